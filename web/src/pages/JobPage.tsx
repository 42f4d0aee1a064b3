// A job's page: its state and times, every task role with its instances, a log, the config
// and the event timeline, all kept live by jobEvents (resumed from the last event seen).
import { lazy, Suspense, useEffect, useMemo, useRef, useState } from "react";
import { Link, useParams, useSearchParams } from "react-router-dom";
import { useMutation, useQuery } from "urql";
import type { JobDetailFragment } from "../gql/graphql";
import { copyText, downloadText } from "../lib/download";
import { PublishAsTemplate } from "../marketplace/PublishAsTemplate";
import { describeProblem } from "../lib/errors";
import { completionInWords, formatDuration, formatTime, isFinal, isGlobalJobId } from "../lib/format";
import { follow } from "../lib/live";
import { startsAfterInWords, waitingNow } from "../lib/startOrder";
import {
  addEvents,
  emptyTimeline,
  instanceStates,
  jobState,
  shownReason,
  shownState,
  type Timeline,
  type TimelineEvent,
} from "../lib/timeline";
import { useSession } from "../session";
import { JobEventsSubscription } from "./jobEvents.operations";
import { JobByIdQuery, JobByNameQuery, JobConfigQuery, StopJobMutation } from "./JobPage.operations";
import { LogView } from "./LogView";
import { StateBadge } from "./StateBadge";

// The charts of what the instances use bring their library (uPlot): loaded after the page.
const JobMetrics = lazy(() => import("../metrics/JobMetrics"));

export function JobPage() {
  const ref = decodeURIComponent(useParams().ref ?? "");
  const byId = isGlobalJobId(ref);
  const [byIdResult, refetchById] = useQuery({
    query: JobByIdQuery,
    variables: { id: ref },
    pause: !byId,
  });
  const [byNameResult, refetchByName] = useQuery({
    query: JobByNameQuery,
    variables: { name: ref },
    pause: byId,
  });
  const result = byId ? byIdResult : byNameResult;
  const refetch = byId ? refetchById : refetchByName;
  if (result.error) {
    return (
      <p className="error" role="alert">
        Job {ref} cannot be shown: {describeProblem(result.error).message}
      </p>
    );
  }
  if (!result.data) return <p className="muted">Loading…</p>;
  const job = result.data.job;
  if (!job) {
    return (
      <section>
        <h1>No such job</h1>
        <p className="error" role="alert" data-testid="not-found">
          There is no job {byId ? "with the ID" : "of yours named"} “{ref}”.
          {!byId && " Another user's job is named user~name, e.g. alice~" + ref + "."}
        </p>
        <p>
          <Link to="/">Back to the jobs</Link>
        </p>
      </section>
    );
  }
  return <JobView key={job.id} job={job} refetch={() => refetch({ requestPolicy: "network-only" })} />;
}

function JobView({ job, refetch }: { job: JobDetailFragment; refetch: () => void }) {
  const { clients, viewer } = useSession();
  const [timeline, setTimeline] = useState<Timeline>(emptyTimeline);
  const [connection, setConnection] = useState<string | null>(null);
  const refetchTimer = useRef<ReturnType<typeof setTimeout>>(undefined);
  const refetchRef = useRef(refetch);
  useEffect(() => {
    refetchRef.current = refetch;
  }, [refetch]);

  useEffect(() => {
    return follow(
      clients.ws,
      JobEventsSubscription,
      { jobId: job.id, after: null as string | null },
      (data, variables) => {
        variables.after = data.jobEvents.cursor;
      },
      {
        next(data) {
          setConnection(null);
          setTimeline((current) => addEvents(current, [data.jobEvents as TimelineEvent]));
          clearTimeout(refetchTimer.current);
          refetchTimer.current = setTimeout(() => refetchRef.current(), 200);
        },
        error(message) {
          setConnection(message);
        },
      },
    );
  }, [clients, job.id]);

  const latest = jobState(timeline.events);
  const state = shownState(job.state, latest?.state);
  const attempt = Math.max(latest?.attempt ?? 0, job.attempt); // attempts only grow
  const reason = shownReason({ state: job.state, reason: job.stateReason ?? null }, state, latest);
  const states = useMemo(() => instanceStates(timeline.events, attempt), [timeline, attempt]);
  const [params, setParams] = useSearchParams();
  const logOf = params.get("log");
  const canStop = (viewer.admin || viewer.id === job.user.id) && !isFinal(state) && state !== "STOPPING";

  const selected = useMemo(() => {
    if (!logOf) return null;
    const cut = logOf.lastIndexOf("/");
    const role = logOf.slice(0, cut);
    const index = Number(logOf.slice(cut + 1));
    return { role, index };
  }, [logOf]);
  const instanceList = useMemo(
    () => job.taskRoles.flatMap((role) => role.instances.map((i) => ({ taskRole: role.name, index: i.index }))),
    [job.taskRoles],
  );
  const roleRequests = useMemo(
    () =>
      job.taskRoles.map((role) => ({
        taskRole: role.name,
        instances: role.instanceCount,
        request: {
          cpuCores: role.resourcePerInstance.cpu,
          memoryBytes: role.resourcePerInstance.memoryMB * 1024 * 1024,
          gpus: role.resourcePerInstance.gpu,
        },
      })),
    [job.taskRoles],
  );
  const selectedRead = selected ? instanceOf(job, selected.role, selected.index)?.state : null;
  const selectedState = selected && selectedRead ? shownState(selectedRead, states.get(`${selected.role}/${selected.index}`)) : null;

  return (
    <section className="job" data-testid="job">
      <h1>
        {job.name} <StateBadge state={state} />
      </h1>
      {connection && <p className="note">Live updates paused ({connection}); reconnecting…</p>}
      <dl className="summary">
        <dt>User</dt>
        <dd>{job.user.name}</dd>
        <dt>Virtual cluster</dt>
        <dd>{job.virtualCluster}</dd>
        <dt>Attempt</dt>
        <dd data-testid="attempt">
          {attempt} (retries {job.retries})
        </dd>
        <dt>Submitted</dt>
        <dd>{formatTime(job.submittedAt)}</dd>
        <dt>Started</dt>
        <dd>{formatTime(job.startedAt)}</dd>
        <dt>Ended</dt>
        <dd>{formatTime(job.completedAt)}</dd>
        <dt>Duration</dt>
        <dd>{formatDuration(job.startedAt, job.completedAt)}</dd>
        <dt>Status</dt>
        <dd data-testid="reason">{completionInWords(state, reason) || "—"}</dd>
      </dl>
      {job.warnings.length > 0 && (
        <ul className="warnings" data-testid="warnings" aria-label="Warnings">
          {job.warnings.map((warning) => (
            <li key={warning.path.join(".") + warning.code}>
              <code>{warning.path.join(".")}</code>: {warning.message}{" "}
              <span className="muted">[{warning.code}]</span>
            </li>
          ))}
        </ul>
      )}
      <Actions job={job} canStop={canStop} ownerOnlyNote={!canStop && !isFinal(state)} />
      {job.taskRoles.map((role) => (
        <section key={role.name} className="role" data-role={role.name}>
          <h2>
            {role.name}{" "}
            <span className="muted">
              {role.instanceCount} × {role.resourcePerInstance.cpu} cpu, {role.resourcePerInstance.memoryMB} MB
              {role.resourcePerInstance.gpu ? `, ${role.resourcePerInstance.gpu} gpu` : ""}; image{" "}
              {role.dockerImage.uri[0] ?? role.dockerImage.name}
            </span>
          </h2>
          <Prerequisites prerequisites={role.prerequisites} />
          {role.startsAfter.length > 0 && (
            <p className="start-order" data-testid={`starts-after-${role.name}`}>
              {startsAfterInWords(role.name, role.startsAfter)}
              {(() => {
                const waiting = isFinal(state) ? null : waitingNow(role.instances);
                return waiting ? <span className="muted"> — now {waiting}</span> : null;
              })()}
            </p>
          )}
          <table className="instances">
            <thead>
              <tr>
                <th>#</th>
                <th>State</th>
                <th>Node</th>
                <th>IP</th>
                <th>Ports</th>
                <th>Exit code</th>
                <th>Exit reason</th>
                <th>Started</th>
                <th>Finished</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {role.instances.map((instance) => {
                const shown = shownState(instance.state, states.get(`${role.name}/${instance.index}`));
                return (
                  <tr key={instance.index} data-instance={`${role.name}-${instance.index}`}>
                    <td>{instance.index}</td>
                    <td>
                      <StateBadge state={shown} />
                    </td>
                    <td>{instance.node ?? "—"}</td>
                    <td>{instance.hostIp ?? "—"}</td>
                    <td className="ports">
                      {instance.ports.map((port) => (
                        <span key={port.label} className="port">
                          {port.label}:{" "}
                          {port.ports.map((number, n) => (
                            <span key={number}>
                              {n > 0 && ", "}
                              {isFinal(shown) ? (
                                number
                              ) : (
                                <a href={`http://${window.location.hostname}:${number}/`} target="_blank" rel="noreferrer">
                                  {number}
                                </a>
                              )}
                            </span>
                          ))}
                        </span>
                      ))}
                    </td>
                    <td>{instance.exitCode ?? "—"}</td>
                    <td>{instance.exitReason ?? instance.stateReason ?? "—"}</td>
                    <td>{formatTime(instance.startedAt)}</td>
                    <td>{formatTime(instance.finishedAt)}</td>
                    <td>
                      <button
                        type="button"
                        className="link"
                        onClick={() => {
                          const next = new URLSearchParams(params);
                          next.set("log", `${role.name}/${instance.index}`);
                          setParams(next, { replace: true });
                        }}
                      >
                        Log
                      </button>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </section>
      ))}
      <Suspense fallback={<p className="muted">Loading the charts…</p>}>
        <JobMetrics
          jobId={job.id}
          jobName={job.name}
          running={!isFinal(state)}
          endedAt={job.completedAt ?? null}
          instances={instanceList}
          roles={roleRequests}
        />
      </Suspense>
      {selected && (
        <LogView
          key={logOf}
          jobId={job.id}
          jobName={job.name}
          taskRole={selected.role}
          index={selected.index}
          running={!!selectedState && !isFinal(selectedState)}
        />
      )}
      <ConfigView jobId={job.id} jobName={job.name} />
      <section className="timeline">
        <h2>Events</h2>
        <ol data-testid="timeline">
          {timeline.events.map((event) => (
            <li key={event.sequence} data-sequence={event.sequence}>
              <span className="muted">{formatTime(event.at)}</span> <code>{event.type}</code>
              {event.taskRole != null && (
                <span>
                  {" "}
                  {event.taskRole}#{event.index}
                </span>
              )}
              {event.state && (
                <>
                  {" "}
                  <StateBadge state={event.state} />
                </>
              )}
              {event.message && <span> {event.message}</span>}
            </li>
          ))}
        </ol>
      </section>
    </section>
  );
}

function instanceOf(job: JobDetailFragment, role: string, index: number) {
  return job.taskRoles.find((r) => r.name === role)?.instances.find((i) => i.index === index) ?? null;
}

function Prerequisites({ prerequisites }: { prerequisites: JobDetailFragment["taskRoles"][number]["prerequisites"] }) {
  const linked = prerequisites.filter((p) => p.marketplaceItem || p.reference);
  if (linked.length === 0) return null;
  return (
    <p className="prereqs">
      From the marketplace:{" "}
      {linked.map((p, n) => (
        <span key={p.name}>
          {n > 0 && ", "}
          {p.marketplaceItem ? (
            <Link to={`/marketplace/${encodeURIComponent(p.marketplaceItem.id)}`}>
              {p.marketplaceItem.name} {p.marketplaceItem.version}
            </Link>
          ) : (
            <code>{p.reference}</code>
          )}
        </span>
      ))}
    </p>
  );
}

function Actions({ job, canStop, ownerOnlyNote }: { job: JobDetailFragment; canStop: boolean; ownerOnlyNote: boolean }) {
  const [stopResult, stopJob] = useMutation(StopJobMutation);
  const [message, setMessage] = useState<string | null>(null);
  const errors = stopResult.data?.stopJob.errors ?? [];
  const stop = async () => {
    if (!window.confirm(`Stop job ${job.name}? Its running instances are ended.`)) return;
    const result = await stopJob({ id: job.id });
    setMessage(result.error ? describeProblem(result.error).message : null);
  };
  return (
    <div className="actions">
      <Link to={`/submit?clone=${encodeURIComponent(job.id)}`} data-testid="clone">Clone</Link>
      {canStop && (
        <button
          type="button"
          className="danger"
          disabled={stopResult.fetching}
          // urql resolves a failed request into result.error instead of rejecting: nothing to catch
          onClick={() => void stop()}
        >
          Stop
        </button>
      )}
      {ownerOnlyNote && <span className="muted">Only {job.user.name} or an admin may stop this job.</span>}
      <PublishAsTemplate job={job} />
      {errors.map((error) => (
        <p key={error.code + error.message} className="error" role="alert">
          {error.message}
        </p>
      ))}
      {message && (
        <p className="error" role="alert">
          {message}
        </p>
      )}
    </div>
  );
}

function ConfigView({ jobId, jobName }: { jobId: string; jobName: string }) {
  const [open, setOpen] = useState(false);
  const [{ data, error }] = useQuery({ query: JobConfigQuery, variables: { id: jobId }, pause: !open });
  const [copied, setCopied] = useState(false);
  const config = data?.job?.config ?? "";
  return (
    <details className="config" onToggle={(event) => setOpen((event.target as HTMLDetailsElement).open)}>
      <summary>Config (as submitted, secrets masked) — copy it or download it to clone the job</summary>
      {error && <p className="error">{describeProblem(error).message}</p>}
      {open && data && (
        <>
          <div className="actions">
            <button
              type="button"
              // copyText settles false on a clipboard failure rather than rejecting
              onClick={() => void copyText(config).then(setCopied)}
            >
              {copied ? "Copied" : "Copy"}
            </button>
            <button type="button" onClick={() => downloadText(`${jobName}.yaml`, config, "application/yaml")}>
              Download
            </button>
          </div>
          <pre data-testid="config">{config}</pre>
        </>
      )}
    </details>
  );
}
