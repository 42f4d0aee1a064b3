// The publish page's operations: publish or update an item, and read the job a template is made from.
import { graphql } from "../gql";

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
        ...UserErrorFields
      }
      warnings {
        ...UserErrorFields
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
        ...UserErrorFields
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
