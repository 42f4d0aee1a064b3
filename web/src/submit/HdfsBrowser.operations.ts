// One directory of a file system the submit page's browser lists.
import { graphql } from "../gql";

export const FileListingQuery = graphql(`
  query SubmitPageFileListing($uri: String!) {
    fileListing(uri: $uri) {
      uri
      directory
      entries {
        name
        uri
        directory
        size
      }
      errors {
        ...UserErrorFields
      }
    }
  }
`);
