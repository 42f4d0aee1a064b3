// The jobs table: the viewer's jobs or everyone's (as far as the server's job_visibility lets
// the viewer read them), newest first, filtered and paged through the URL; rows of unfinished
// jobs follow their jobEvents, and jobs submitted since the list was read arrive through
// jobsChanged. A row whose job leaves the filter (it finishes while the list shows RUNNING
// jobs) leaves the list at once.
import { useEffect, useMemo, useState } from "react";
import { Link, useSearchParams } from "react-router-dom";
import { useQuery } from "urql";
import type { JobFilter, JobRowFragment, JobState } from "../gql/graphql";
import { describeProblem } from "../lib/errors";
import { JOB_STATES, formatTime, isFinal } from "../lib/format";
import { inFilter } from "../lib/jobFilter";
import { listRows } from "../lib/jobList";
import { follow } from "../lib/live";
import { useSession } from "../session";
import { JobEventsSubscription } from "./jobEvents.operations";
import { JobRowQuery, JobsChangedSubscription, JobsQuery, VirtualClusterNamesQuery } from "./JobsPage.operations";
import { StateBadge } from "./StateBadge";

export const PAGE_SIZE = 25;

export function JobsPage() {
  const { viewer, clients } = useSession();
  const [params, setParams] = useSearchParams();
  const everyone = params.get("all") === "1";
  const state = params.get("state") ?? "";
  const name = params.get("name") ?? "";
  const vc = params.get("vc") ?? "";
  const after = params.get("after");
  const [nameInput, setNameInput] = useState(name);
  const [history, setHistory] = useState<string[]>([]);

  const filter = useMemo<JobFilter>(
    () => ({
      user: everyone ? null : viewer.name,
      state: state ? [state as JobState] : null,
      nameContains: name || null,
      virtualCluster: vc || null,
    }),
    [everyone, viewer.name, state, name, vc],
  );
  const [{ data, error, fetching }] = useQuery({
    query: JobsQuery,
    variables: { first: PAGE_SIZE, after, filter },
  });
  const [{ data: vcs }] = useQuery({ query: VirtualClusterNamesQuery });
  const listed = useMemo(() => data?.jobs.edges.map((edge) => edge.node) ?? [], [data]);
  const added = useNewJobs(listed, filter, data?.jobs.changesCursor ?? null, !after, clients);
  const rows = useMemo(() => listRows(added, listed), [added, listed]);
  const live = useLiveRows(rows, clients);
  const shown = rows.map((row) => live.get(row.id) ?? row).filter((job) => inFilter(job, filter));

  function change(updates: Record<string, string | null>) {
    const next = new URLSearchParams(params);
    for (const [key, value] of Object.entries(updates)) {
      if (value) next.set(key, value);
      else next.delete(key);
    }
    if (!("after" in updates)) {
      next.delete("after");
      setHistory([]);
    }
    setParams(next);
  }

  return (
    <section>
      <h1>Jobs</h1>
      <form
        className="filters"
        onSubmit={(event) => {
          event.preventDefault();
          change({ name: nameInput.trim() || null });
        }}
      >
        <label>
          Jobs of
          <select
            name="owner"
            value={everyone ? "all" : "mine"}
            onChange={(event) => change({ all: event.target.value === "all" ? "1" : null })}
          >
            <option value="mine">me</option>
            <option value="all">every user</option>
          </select>
        </label>
        <label>
          State
          <select name="state" value={state} onChange={(event) => change({ state: event.target.value || null })}>
            <option value="">any</option>
            {JOB_STATES.map((s) => (
              <option key={s} value={s}>{s}</option>
            ))}
          </select>
        </label>
        <label>
          Virtual cluster
          <select name="vc" value={vc} onChange={(event) => change({ vc: event.target.value || null })}>
            <option value="">any</option>
            {vcs?.virtualClusters.map((v) => (
              <option key={v.name} value={v.name}>{v.name}</option>
            ))}
          </select>
        </label>
        <label>
          Name
          <input
            name="name"
            type="search"
            value={nameInput}
            placeholder="part of a name"
            onChange={(event) => setNameInput(event.target.value)}
          />
        </label>
        <button type="submit">Filter</button>
      </form>
      {error && <p className="error" role="alert">{describeProblem(error).message}</p>}
      <table className="jobs" data-testid="jobs">
        <thead>
          <tr>
            <th>Name</th>
            <th>User</th>
            <th>Virtual cluster</th>
            <th>State</th>
            <th>Attempt</th>
            <th>Instances running/total</th>
            <th>Submitted</th>
            <th>Ended</th>
          </tr>
        </thead>
        <tbody>
          {shown.map((job) => {
            return (
              <tr key={job.id} data-job={job.name}>
                <td>
                  <Link to={`/jobs/${encodeURIComponent(job.id)}`}>{job.name}</Link>
                </td>
                <td>{job.user.name}</td>
                <td>{job.virtualCluster}</td>
                <td><StateBadge state={job.state} /></td>
                <td>{job.attempt}</td>
                <td>{job.instanceCounts.running}/{job.instanceCounts.total}</td>
                <td>{formatTime(job.submittedAt)}</td>
                <td>{formatTime(job.completedAt)}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
      {data && shown.length === 0 && <p className="muted">No jobs match.</p>}
      {fetching && !data && <p className="muted">Loading…</p>}
      <div className="pager">
        <button
          type="button"
          disabled={history.length === 0 && !after}
          onClick={() => {
            const previous = history.slice(0, -1);
            setHistory(previous);
            change({ after: history[history.length - 1] ?? null });
          }}
        >
          Newer
        </button>
        <button
          type="button"
          disabled={!data?.jobs.pageInfo.hasNextPage}
          onClick={() => {
            setHistory([...history, after ?? ""]);
            change({ after: data?.jobs.pageInfo.endCursor ?? null });
          }}
        >
          Older
        </button>
      </div>
    </section>
  );
}

/** The jobs that entered the list after it was read (`since`, its changesCursor), newest
 * first, each as last told: a new job is shown on the first page at once, without a reload.
 * jobsChanged tells only changes within the filter, so every row, these too, also follows
 * its own jobEvents (`useLiveRows`), which tell when a job leaves the filter's state. A new
 * reading of the list (its cursor) starts again. */
function useNewJobs(
  listed: JobRowFragment[],
  filter: JobFilter,
  since: string | null,
  firstPage: boolean,
  clients: ReturnType<typeof useSession>["clients"],
) {
  const filterKey = JSON.stringify(filter);
  // What was told belongs to one reading: its filter and its cursor.
  const reading = `${filterKey}@${since ?? ""}`;
  const [told, setTold] = useState<{ reading: string; jobs: JobRowFragment[] }>({ reading: "", jobs: [] });
  useEffect(() => {
    if (!since || !firstPage) return;
    const known = new Set(listed.map((row) => row.id));
    return follow(
      clients.ws,
      JobsChangedSubscription,
      { filter: JSON.parse(filterKey) as JobFilter, after: since as string | null },
      (data, variables) => {
        variables.after = data.jobsChanged.cursor;
      },
      {
        next(data) {
          const job = data.jobsChanged.job;
          if (known.has(job.id)) return;
          setTold((current) => {
            const jobs = current.reading === reading ? current.jobs : [];
            const at = jobs.findIndex((row) => row.id === job.id);
            if (at >= 0) return { reading, jobs: jobs.map((row, i) => (i === at ? job : row)) };
            return { reading, jobs: [job, ...jobs] };
          });
        },
      },
    );
    // The listed rows are read through `since`; a new reading may share its cursor with the
    // last one (nothing changed between them), which listRows allows for.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [since, firstPage, filterKey, clients]);
  return told.reading === reading ? told.jobs : NONE;
}

const NONE: JobRowFragment[] = [];

/** The newest known version of each unfinished row: its state at once from each JOB_STATE
 * event, the rest (counts, times) read again after any event. What is known belongs to one
 * reading of the page: a new reading (another page, a refetch) starts again from its rows. */
function useLiveRows(rows: JobRowFragment[], clients: ReturnType<typeof useSession>["clients"]) {
  const watched = rows.filter((row) => !isFinal(row.state));
  const key = watched.map((row) => `${row.id}@${row.eventCursor}`).join(",");
  const [live, setLive] = useState<{ key: string; rows: Map<string, JobRowFragment> }>({
    key: "",
    rows: new Map(),
  });
  useEffect(() => {
    const stops: (() => void)[] = [];
    const timers = new Map<string, ReturnType<typeof setTimeout>>();
    const update = (id: string, change: (row: JobRowFragment) => JobRowFragment) =>
      setLive((current) => {
        const known = current.key === key ? current.rows : new Map<string, JobRowFragment>();
        const base = known.get(id) ?? rows.find((row) => row.id === id);
        if (!base) return current;
        const next = new Map(known);
        next.set(id, change(base));
        return { key, rows: next };
      });
    const refresh = (id: string) => {
      clearTimeout(timers.get(id));
      timers.set(
        id,
        setTimeout(() => {
          // urql resolves a failed read into result.error (the row then stays as it is): it never rejects
          void clients.urql
            .query(JobRowQuery, { id }, { requestPolicy: "network-only" })
            .toPromise()
            .then((result) => {
              const fresh = result.data?.job;
              // a final state already shown stays: the read may have begun before it
              if (fresh) update(id, (row) => ({ ...fresh, state: isFinal(row.state) ? row.state : fresh.state }));
            });
        }, 150),
      );
    };
    for (const row of watched) {
      stops.push(
        follow(
          clients.ws,
          JobEventsSubscription,
          { jobId: row.id, after: row.eventCursor },
          (data, variables) => {
            variables.after = data.jobEvents.cursor;
          },
          {
            next(data) {
              const event = data.jobEvents;
              if (event.type === "JOB_STATE" && event.state) {
                const state = event.state;
                update(row.id, (current) => ({ ...current, state, attempt: event.attempt ?? current.attempt }));
              }
              refresh(row.id);
            },
          },
        ),
      );
    }
    return () => {
      stops.forEach((stop) => stop());
      timers.forEach((timer) => clearTimeout(timer));
    };
    // The rows are read through `key`: a new page or new cursors subscribe again.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [key, clients]);
  return live.key === key ? live.rows : EMPTY;
}

const EMPTY = new Map<string, JobRowFragment>();
