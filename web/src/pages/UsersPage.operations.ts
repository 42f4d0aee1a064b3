// The users page's operations: list users, add one, give one a new token, remove one.
import { graphql } from "../gql";

export const UsersQuery = graphql(`
  query UsersPage($removed: Boolean!) {
    users(removed: $removed) {
      id
      name
      admin
      createdAt
      removedAt
      virtualClusters
    }
  }
`);

export const AddUserMutation = graphql(`
  mutation UsersPageAdd($input: AddUserInput!) {
    addUser(input: $input) {
      token
      user {
        name
      }
      errors {
        ...UserErrorFields
      }
    }
  }
`);

export const ResetTokenMutation = graphql(`
  mutation UsersPageReset($name: String!) {
    resetUserToken(input: { name: $name }) {
      token
      user {
        name
      }
      errors {
        ...UserErrorFields
      }
    }
  }
`);

export const RemoveUserMutation = graphql(`
  mutation UsersPageRemove($name: String!) {
    removeUser(input: { name: $name }) {
      user {
        name
      }
      errors {
        ...UserErrorFields
      }
    }
  }
`);
