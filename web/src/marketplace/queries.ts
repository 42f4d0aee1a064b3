// The marketplace pages' operations, typed from schema.graphql by GraphQL Code Generator.
import { graphql } from "../gql";

export const ItemCardFragment = graphql(`
  fragment ItemCard on MarketplaceItem {
    id
    name
    version
    type
    summary
    tags
    stars
    submits
    visibility
    updatedAt
    owner {
      id
      name
    }
  }
`);

export const MarketplaceListQuery = graphql(`
  query MarketplaceList(
    $first: Int!
    $after: String
    $filter: MarketplaceItemFilter
    $sort: MarketplaceItemSort!
  ) {
    marketplaceItems(first: $first, after: $after, filter: $filter, sort: $sort) {
      totalCount
      edges {
        cursor
        node {
          ...ItemCard
        }
      }
      pageInfo {
        hasNextPage
        endCursor
      }
    }
  }
`);

export const MarketplaceTagsQuery = graphql(`
  query MarketplaceTags($type: ItemType) {
    marketplaceTags(type: $type) {
      name
      items
    }
  }
`);

export const ItemDetailQuery = graphql(`
  query MarketplaceItemDetail($id: ID!, $version: String) {
    marketplaceItem(id: $id, version: $version) {
      id
      name
      version
      latestVersion
      type
      summary
      description
      tags
      visibility
      groups
      stars
      submits
      createdAt
      updatedAt
      contributor
      viewerHasStarred
      viewerCanChange
      owner {
        id
        name
      }
      content
      versions {
        version
        createdAt
        latest
      }
      parameters
      templateVariables
      declaredVariables {
        name
        default
      }
      taskRoles {
        name
        instanceCount
        commands
        resourcePerInstance {
          cpu
          memoryMB
          gpu
        }
        dockerImage {
          name
          uri
          reference
        }
      }
      prerequisites {
        name
        type
        uri
        plugin
        version
        reference
      }
      requires {
        reference
        item {
          id
          name
          type
        }
      }
    }
  }
`);

export const StarItemMutation = graphql(`
  mutation StarItem($id: ID!, $star: Boolean!) {
    starMarketplaceItem(input: { id: $id, star: $star }) {
      item {
        id
        stars
        viewerHasStarred
      }
      errors {
        path
        code
        message
      }
    }
  }
`);

export const PublishItemMutation = graphql(`
  mutation PublishItem($input: PublishMarketplaceItemInput!) {
    publishMarketplaceItem(input: $input) {
      outcome
      item {
        id
        name
        version
      }
      errors {
        path
        code
        message
      }
      warnings {
        path
        code
        message
      }
    }
  }
`);

export const UpdateItemMutation = graphql(`
  mutation UpdateItem($input: UpdateMarketplaceItemInput!) {
    updateMarketplaceItem(input: $input) {
      item {
        id
        name
        version
      }
      errors {
        path
        code
        message
      }
    }
  }
`);

export const DeleteItemMutation = graphql(`
  mutation DeleteItem($id: ID!) {
    deleteMarketplaceItem(input: { id: $id }) {
      item {
        id
        name
      }
      errors {
        path
        code
        message
      }
    }
  }
`);

export const PublishJobQuery = graphql(`
  query PublishJob($id: ID!) {
    job(id: $id) {
      id
      name
      config
      user {
        id
        name
      }
    }
  }
`);
