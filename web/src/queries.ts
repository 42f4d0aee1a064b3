// Every operation the pages send, typed from schema.graphql by GraphQL Code Generator.
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

export const JobsQuery = graphql(`
  query Jobs($first: Int!, $after: String, $filter: JobFilter) {
    jobs(first: $first, after: $after, filter: $filter) {
      edges {
        cursor
        node {
          ...JobRow
        }
      }
      pageInfo {
        hasNextPage
        endCursor
      }
      changesCursor
    }
  }
`);

export const JobsChangedSubscription = graphql(`
  subscription JobsChanged($filter: JobFilter, $after: String) {
    jobsChanged(filter: $filter, after: $after) {
      cursor
      job {
        ...JobRow
      }
    }
  }
`);

export const JobRowFragment = graphql(`
  fragment JobRow on Job {
    id
    name
    virtualCluster
    state
    attempt
    submittedAt
    completedAt
    eventCursor
    user {
      id
      name
    }
    instanceCounts {
      total
      running
    }
  }
`);

export const JobRowQuery = graphql(`
  query JobRowById($id: ID!) {
    job(id: $id) {
      ...JobRow
    }
  }
`);

export const JobDetailFragment = graphql(`
  fragment JobDetail on Job {
    id
    name
    virtualCluster
    state
    stateReason
    warnings {
      path
      code
      message
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

export const JobEventsSubscription = graphql(`
  subscription JobEvents($jobId: ID!, $after: String) {
    jobEvents(jobId: $jobId, after: $after) {
      cursor
      sequence
      at
      type
      message
      state
      attempt
      taskRole
      index
    }
  }
`);

export const TaskLogsSubscription = graphql(`
  subscription TaskLogs(
    $jobId: ID!
    $taskRole: String!
    $index: Int!
    $follow: Boolean
    $offset: Int!
    $tail: Int
  ) {
    taskLogs(
      jobId: $jobId
      taskRole: $taskRole
      index: $index
      follow: $follow
      offset: $offset
      tail: $tail
    ) {
      offset
      data
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
        path
        code
        message
      }
    }
  }
`);

export const ClusterQuery = graphql(`
  query Cluster {
    cluster {
      backend
      nodes {
        name
        instances
        capacity {
          cpu
          memoryMB
          gpu
        }
        used {
          cpu
          memoryMB
          gpu
        }
        free {
          cpu
          memoryMB
          gpu
        }
      }
    }
    virtualClusters {
      name
      canSubmit
      instances
      quota {
        cpu
        memoryMB
        gpu
      }
      used {
        cpu
        memoryMB
        gpu
      }
      free {
        cpu
        memoryMB
        gpu
      }
    }
  }
`);

export const VirtualClusterNamesQuery = graphql(`
  query VirtualClusterNames {
    virtualClusters {
      name
    }
  }
`);

export const JobMetricsQuery = graphql(`
  query JobMetrics($id: ID!, $since: DateTime) {
    job(id: $id) {
      id
      metrics(since: $since) {
        source
        step
        roles {
          taskRole
          instances
          request {
            cpuCores
            memoryBytes
            gpus
          }
          cpuCores {
            ...Spread
          }
          memoryBytes {
            ...Spread
          }
          networkRxBytesPerSecond {
            ...Spread
          }
          networkTxBytesPerSecond {
            ...Spread
          }
          gpuUtilization {
            times
          }
        }
      }
    }
  }
`);

export const SpreadFragment = graphql(`
  fragment Spread on SpreadSeries {
    times
    sums
    mins
    maxes
    instances
  }
`);

export const SeriesFragment = graphql(`
  fragment Series on MetricSeries {
    times
    values
  }
`);

export const InstanceMetricsQuery = graphql(`
  query InstanceMetrics($id: ID!, $since: DateTime) {
    job(id: $id) {
      id
      taskRoles {
        name
        instances {
          taskRole
          index
          metrics(since: $since) {
            source
            gpuNote
            oomKilledAt
            request {
              cpuCores
              memoryBytes
              gpus
            }
            cpuCores {
              ...Series
            }
            memoryBytes {
              ...Series
            }
            memoryLimitBytes {
              ...Series
            }
            networkRxBytesPerSecond {
              ...Series
            }
            networkTxBytesPerSecond {
              ...Series
            }
          }
        }
      }
    }
  }
`);

export const JobUsageSubscription = graphql(`
  subscription JobUsage($jobId: ID!) {
    jobUsage(jobId: $jobId) {
      at
      source
      instances {
        taskRole
        index
        at
        cpuCores
        memoryBytes
        memoryLimitBytes
        networkRxBytesPerSecond
        networkTxBytesPerSecond
      }
    }
  }
`);

export const ClusterUsageQuery = graphql(`
  query ClusterUsage {
    cluster {
      usageSource
      usage {
        name
        cpuCapacity
        cpuAllocated
        cpuUsedCores
        memoryCapacityBytes
        memoryAllocatedBytes
        memoryUsedBytes
        gpus
        gpusAllocated
        gpusReal
        gpuUtilization
        gpuNote
        instances
      }
    }
  }
`);
