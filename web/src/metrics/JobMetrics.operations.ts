// A job's metrics: per role, per instance, and the live usage samples.
import { graphql } from "../gql";

export const SpreadFragment = graphql(`
  fragment Spread on SpreadSeries {
    times
    sums
    mins
    maxes
    instances
  }
`);

export const RequestFragment = graphql(`
  fragment Request on ResourceRequestLine {
    cpuCores
    memoryBytes
    gpus
  }
`);

export const SeriesFragment = graphql(`
  fragment Series on MetricSeries {
    times
    values
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
            ...Request
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
              ...Request
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
