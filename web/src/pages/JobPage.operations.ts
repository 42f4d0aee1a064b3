// The job page's operations: the job (by id or by name), its config, and stopping it.
import { graphql } from "../gql";

export const JobDetailFragment = graphql(`
  fragment JobDetail on Job {
    id
    name
    virtualCluster
    state
    stateReason
    warnings {
      ...UserErrorFields
    }
    submittedAt
    startedAt
    completedAt
    attempt
    retries
    user {
      id
      name
    }
    taskRoles {
      name
      instanceCount
      taskRetryCount
      startsAfter {
        role
        when
        instances
        of
      }
      resourcePerInstance {
        cpu
        memoryMB
        gpu
      }
      dockerImage {
        name
        uri
      }
      prerequisites {
        name
        type
        reference
        marketplaceItem {
          id
          name
          version
        }
      }
      instances {
        taskRole
        index
        attempt
        state
        stateReason
        exitCode
        exitReason
        node
        hostIp
        ports {
          label
          ports
        }
        startedAt
        finishedAt
      }
    }
  }
`);

export const JobByIdQuery = graphql(`
  query JobById($id: ID!) {
    job(id: $id) {
      ...JobDetail
    }
  }
`);

export const JobByNameQuery = graphql(`
  query JobByName($name: String!) {
    job(name: $name) {
      ...JobDetail
    }
  }
`);

export const JobConfigQuery = graphql(`
  query JobConfig($id: ID!) {
    job(id: $id) {
      id
      config
    }
  }
`);

export const StopJobMutation = graphql(`
  mutation StopJob($id: ID!) {
    stopJob(input: { id: $id }) {
      job {
        id
        state
        stateReason
      }
      errors {
        ...UserErrorFields
      }
    }
  }
`);
