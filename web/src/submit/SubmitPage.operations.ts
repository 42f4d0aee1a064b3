// The submit page's operations: resolve (check and preview), submit, fill the form from an
// item, clone a job, and convert a config.
import { graphql } from "../gql";

export const ResolveJobMutation = graphql(`
  mutation SubmitPageResolve($config: String!, $parameters: JSON, $preview: Boolean!) {
    resolveJob(input: { config: $config, parameters: $parameters }) {
      errors {
        ...UserErrorFields
      }
      warnings {
        ...UserErrorFields
      }
      job {
        name
        dialect
        virtualCluster
        config
        taskRoles @include(if: $preview) {
          name
          instanceCount
          instances {
            index
            hostIp
            ports {
              label
              ports
            }
            environment {
              name
              value
            }
          }
        }
      }
    }
  }
`);

export const SubmitJobMutation = graphql(`
  mutation SubmitPageSubmit($config: String!, $parameters: JSON, $fromItems: [ID!]) {
    submitJob(input: { config: $config, parameters: $parameters, fromItems: $fromItems }) {
      job {
        id
        name
      }
      errors {
        ...UserErrorFields
      }
    }
  }
`);

export const UseItemMutation = graphql(`
  mutation SubmitPageUseItem($id: ID!, $version: String, $parameters: JSON) {
    useMarketplaceItem(input: { id: $id, version: $version, parameters: $parameters, submit: false }) {
      config
      item {
        id
        name
        version
        type
        parameters
        templateVariables
      }
      errors {
        ...UserErrorFields
      }
    }
  }
`);

export const CloneConfigQuery = graphql(`
  query SubmitPageClone($id: ID!) {
    job(id: $id) {
      id
      name
      config
    }
  }
`);

export const ConvertJobMutation = graphql(`
  mutation SubmitPageConvert($config: String!) {
    convertJob(input: { config: $config }) {
      config
      dialect
      errors {
        ...UserErrorFields
      }
      notes {
        ...UserErrorFields
      }
    }
  }
`);
