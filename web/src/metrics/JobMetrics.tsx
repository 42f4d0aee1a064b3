// What a job's instances use and have used: CPU, memory and network per task role (the sum,
// with the spread between instances) or of one instance (with its request, memory limit and
// OOM kill), live while the job runs. Loaded only when the job page shows it, with uPlot.
import { useEffect, useMemo, useRef, useState } from "react";
import { useQuery } from "urql";
import { describeProblem } from "../lib/errors";
import { follow } from "../lib/live";
import {
  appendRoundToInstance,
  appendRoundToRoles,
  FIGURES,
  instanceChart,
  roleChart,
  type InstanceSeries,
  type RequestLine,
  type RoleSeries,
  withEveryRole,
  roleSeriesOf,
  instanceSeriesOf,
} from "../lib/metrics";
import { InstanceMetricsQuery, JobMetricsQuery, JobUsageSubscription } from "./JobMetrics.operations";
import { useSession } from "../session";
import { Chart } from "./Chart";

const HOUR_MS = 3600 * 1000;

interface Props {
  jobId: string;
  jobName: string;
  running: boolean;
  /** When the job ended (ISO), or null: "the last hour" is the last hour it ran. */
  endedAt: string | null;
  instances: { taskRole: string; index: number }[];
  /** The job's roles with what each instance asks for (drawn before any is measured). */
  roles: { taskRole: string; instances: number; request: RequestLine }[];
}

export default function JobMetrics({ jobId, jobName, running, endedAt, instances, roles: jobRoles }: Props) {
  const { clients } = useSession();
  const [range, setRange] = useState<"hour" | "all">("hour");
  const [shown, setShown] = useState<string>("roles");
  // the range's start is fixed when it is chosen; live rounds extend it
  const since = useMemo(
    () => (range === "all" ? null : new Date((endedAt ? Date.parse(endedAt) : Date.now()) - HOUR_MS).toISOString()),
    [range, endedAt],
  );
  const [roleResult] = useQuery({ query: JobMetricsQuery, variables: { id: jobId, since }, requestPolicy: "network-only" });
  const [instanceResult] = useQuery({
    query: InstanceMetricsQuery,
    variables: { id: jobId, since },
    requestPolicy: "network-only",
    pause: shown === "roles",
  });
  const [roles, setRoles] = useState<RoleSeries[] | null>(null);
  const [instanceSeries, setInstanceSeries] = useState<InstanceSeries[] | null>(null);
  const [liveSource, setLiveSource] = useState<string | null>(null);

  // the job's roles come anew with every read of the job page; only a new read of the series
  // starts them over (live rounds appended since would be lost otherwise)
  const jobRolesNow = useRef(jobRoles);
  useEffect(() => {
    jobRolesNow.current = jobRoles;
  }, [jobRoles]);
  useEffect(() => {
    const read = roleResult.data?.job?.metrics.roles;
    setRoles(read ? withEveryRole(read.map(roleSeriesOf), jobRolesNow.current) : null);
  }, [roleResult.data]);
  const instanceRead = instanceResult.data?.job?.taskRoles;
  useEffect(() => {
    setInstanceSeries(
      instanceRead?.flatMap((role) =>
        role.instances.map((instance) => instanceSeriesOf(instance.taskRole, instance.index, instance.metrics)),
      ) ?? null,
    );
  }, [instanceRead]);

  useEffect(() => {
    if (!running) return;
    return follow(
      clients.ws,
      JobUsageSubscription,
      { jobId },
      () => {},
      {
        next(data) {
          const round = data.jobUsage;
          setLiveSource(round.source);
          setRoles((current) => (current ? appendRoundToRoles(current, round.at, round.instances) : current));
          setInstanceSeries((current) => current?.map((series) => appendRoundToInstance(series, round.instances)) ?? current);
        },
      },
    );
  }, [clients, jobId, running]);

  const metrics = roleResult.data?.job?.metrics;
  const source = liveSource ?? metrics?.source;
  const selected = shown === "roles" ? null : instanceSeries?.find((s) => `${s.taskRole}/${s.index}` === shown) ?? null;
  const selectedNote = shown === "roles" ? null : instanceRead?.flatMap((r) => r.instances).find((i) => `${i.taskRole}/${i.index}` === shown)?.metrics;
  const error = roleResult.error ?? instanceResult.error;
  const roleModels = useMemo(
    () => roles?.map((role) => ({ role: role.taskRole, models: FIGURES.map((figure) => roleChart(role, figure)) })),
    [roles],
  );
  const instanceModels = useMemo(() => (selected ? FIGURES.map((figure) => instanceChart(selected, figure)) : null), [selected]);

  return (
    <section className="metrics" data-testid="metrics">
      <h2>Resource use</h2>
      <div className="actions">
        <label>
          Show{" "}
          <select value={shown} onChange={(event) => setShown(event.target.value)} data-testid="metrics-of">
            <option value="roles">each task role (sum and spread)</option>
            {instances.map((i) => (
              <option key={`${i.taskRole}/${i.index}`} value={`${i.taskRole}/${i.index}`}>
                instance {i.taskRole} #{i.index}
              </option>
            ))}
          </select>
        </label>
        <label>
          over{" "}
          <select value={range} onChange={(event) => setRange(event.target.value as "hour" | "all")} data-testid="metrics-range">
            <option value="hour">the last hour{endedAt ? " it ran" : ""}</option>
            <option value="all">all that is kept</option>
          </select>
        </label>
        {running && <span className="muted">live</span>}
      </div>
      {source && (
        <p className="muted" data-testid="metrics-source">
          Measured: {source}
          {metrics && ` (a point every ${metrics.step} s)`}
        </p>
      )}
      {selectedNote?.gpuNote && (
        <p className="muted" data-testid="gpu-note">
          GPUs: {selectedNote.gpuNote}
        </p>
      )}
      {shown === "roles" &&
        metrics?.roles
          .filter((role) => role.request.gpus > 0 && role.gpuUtilization.times.length === 0)
          .map((role) => (
            <p key={role.taskRole} className="muted" data-testid="gpu-note">
              GPUs of {role.taskRole}: no utilization measured (simulated GPUs have none; choose an instance
              for why)
            </p>
          ))}
      {error && <p className="error">{describeProblem(error).message}</p>}
      {shown === "roles" &&
        roleModels?.map(({ role, models }) => (
          <div key={role} className="charts" data-metrics-role={role}>
            {models.map((model, n) => (
              <Chart key={FIGURES[n]} model={model} name={`${jobName}-${role}-${FIGURES[n]}`} testId={`chart-${FIGURES[n]}`} />
            ))}
          </div>
        ))}
      {shown === "roles" && roles?.every((role) => role.cpuCores.length === 0) && (
        <p className="muted">No instance has been measured in this range{running ? " yet" : ""}.</p>
      )}
      {selected && instanceModels && (
        <div className="charts" data-metrics-instance={shown}>
          {instanceModels.map((model, n) => (
            <Chart
              key={FIGURES[n]}
              model={model}
              name={`${jobName}-${selected.taskRole}-${selected.index}-${FIGURES[n]}`}
              testId={`chart-${FIGURES[n]}`}
            />
          ))}
        </div>
      )}
      {(shown === "roles" ? !roles && !error : !selected && !error) && <p className="muted">Loading…</p>}
    </section>
  );
}
