// The cluster page's operations: nodes and virtual clusters with their capacity, and measured
// usage.
import { graphql } from "../gql";

export const ClusterQuery = graphql(`
  query Cluster {
    cluster {
      backend
      nodes {
        name
        instances
        capacity {
          ...Capacity
        }
        used {
          ...Capacity
        }
        free {
          ...Capacity
        }
      }
    }
    virtualClusters {
      name
      canSubmit
      instances
      quota {
        ...Capacity
      }
      used {
        ...Capacity
      }
      free {
        ...Capacity
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

export const CapacityFragment = graphql(`
  fragment Capacity on Capacity {
    cpu
    memoryMB
    gpu
  }
`);
