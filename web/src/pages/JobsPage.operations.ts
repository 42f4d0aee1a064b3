// The jobs table's operations: a page of rows, the rows submitted or changed since, and one row read again.
import { graphql } from "../gql";

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

export const JobRowQuery = graphql(`
  query JobRowById($id: ID!) {
    job(id: $id) {
      ...JobRow
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
