// The cluster page's operations: nodes and virtual clusters with their capacity, and measured usage.
import { graphql } from "../gql";

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
