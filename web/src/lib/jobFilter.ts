// Whether a job, as last told, still belongs in a jobs list read with a filter: the list
// drops a row live when its job leaves the filter (it finishes while the list shows RUNNING
// jobs, say), as the server would leave it out of a new reading. The same rules as the
// server's filter (server/store/jobs.py `_matching`).
import type { JobFilter, JobState } from "../gql/graphql";

export interface FilteredJob {
  name: string;
  state: JobState;
  virtualCluster: string;
  user: { name: string };
}

export function inFilter(job: FilteredJob, filter: JobFilter): boolean {
  if (filter.state && filter.state.length > 0 && !filter.state.includes(job.state)) return false;
  if (filter.user && job.user.name !== filter.user) return false;
  if (filter.virtualCluster && job.virtualCluster !== filter.virtualCluster) return false;
  if (filter.name && job.name !== filter.name) return false;
  if (filter.nameContains && !job.name.toLowerCase().includes(filter.nameContains.toLowerCase())) {
    return false;
  }
  return true;
}
