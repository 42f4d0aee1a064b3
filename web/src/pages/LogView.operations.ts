// One task instance's log, read from an offset and followed while it grows.
import { graphql } from "../gql";

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
