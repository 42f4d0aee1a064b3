// A job's events as they happen: the job page shows them, and the jobs table follows the
// states of its unfinished rows with them.
import { graphql } from "../gql";

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
