// The marketplace list's operations: a page of item cards and the tags to filter by.
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
