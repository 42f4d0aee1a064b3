// Selections that operations of several pages share, spread by name (`...UserErrorFields`).
import { graphql } from "./gql";

// A rejected or questionable field of a mutation's input: where, which rule, and what to do.
export const UserErrorFieldsFragment = graphql(`
  fragment UserErrorFields on UserError {
    path
    code
    message
  }
`);
