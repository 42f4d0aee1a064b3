// The signed-in viewer the whole app shows (name, admin, virtual clusters) and the server's version.
import { graphql } from "./gql";

export const ViewerQuery = graphql(`
  query Viewer {
    viewer {
      id
      name
      admin
      virtualClusters
    }
    version
  }
`);
