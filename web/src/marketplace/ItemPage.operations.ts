// The item page's operations: the item (the publish page reads it too, to edit it), starring
// and deleting it.
import { graphql } from "../gql";

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
        ...UserErrorFields
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
        ...UserErrorFields
      }
    }
  }
`);
