// The marketplace items the submit page's picker offers.
import { graphql } from "../gql";

export const PickerItemsQuery = graphql(`
  query SubmitPagePickerItems($filter: MarketplaceItemFilter) {
    marketplaceItems(first: 20, filter: $filter) {
      edges {
        node {
          id
          name
          version
          type
          summary
          description
          content
          owner {
            name
          }
          prerequisites {
            name
            type
            uri
            description
          }
          templateVariables
          declaredVariables {
            name
            default
          }
        }
      }
    }
  }
`);
