// What instances used, shaped for charts and CSV: the server's series (per role with the
// spread between instances, or per instance) become one time axis and aligned columns, and
// each live round of jobUsage is appended to them. No charting library here, so the shaping
// is tested on its own and the library loads only with the charts.

export interface Point {
  at: string;
  value: number;
}

export interface Spread {
  at: string;
  sum: number;
  min: number;
  max: number;
  instances: number;
}

export interface RequestLine {
  cpuCores: number;
  memoryBytes: number;
  gpus: number;
}

/** One task role's series as Job.metrics gives them. */
export interface RoleSeries {
  taskRole: string;
  instances: number;
  request: RequestLine;
  cpuCores: Spread[];
  memoryBytes: Spread[];
  networkRxBytesPerSecond: Spread[];
  networkTxBytesPerSecond: Spread[];
}

/** One instance's series as TaskInstance.metrics gives them. */
export interface InstanceSeries {
  taskRole: string;
  index: number;
  request: RequestLine;
  oomKilledAt?: string | null;
  cpuCores: Point[];
  memoryBytes: Point[];
  memoryLimitBytes: Point[];
  networkRxBytesPerSecond: Point[];
  networkTxBytesPerSecond: Point[];
}

/** One instance's figures in one jobUsage round. */
export interface Usage {
  taskRole: string;
  index: number;
  at: string;
  cpuCores: number;
  memoryBytes: number;
  memoryLimitBytes?: number | null;
  networkRxBytesPerSecond?: number | null;
  networkTxBytesPerSecond?: number | null;
}

/** A series as the server sends it: parallel lists, times in seconds since the epoch. */
export interface SeriesLists {
  times: number[];
  values: number[];
}

/** A role's series as the server sends it: parallel lists of one length. */
export interface SpreadLists {
  times: number[];
  sums: number[];
  mins: number[];
  maxes: number[];
  instances: number[];
}

function isoAt(time: number): string {
  return new Date(time * 1000).toISOString();
}

export function pointsOf(series: SeriesLists): Point[] {
  return series.times.map((time, n) => ({ at: isoAt(time), value: series.values[n] ?? 0 }));
}

export function spreadsOf(series: SpreadLists): Spread[] {
  return series.times.map((time, n) => ({
    at: isoAt(time),
    sum: series.sums[n] ?? 0,
    min: series.mins[n] ?? 0,
    max: series.maxes[n] ?? 0,
    instances: series.instances[n] ?? 0,
  }));
}

/** Job.metrics' role as the charts read it. */
export function roleSeriesOf(read: {
  taskRole: string;
  instances: number;
  request: RequestLine;
  cpuCores: SpreadLists;
  memoryBytes: SpreadLists;
  networkRxBytesPerSecond: SpreadLists;
  networkTxBytesPerSecond: SpreadLists;
}): RoleSeries {
  return {
    taskRole: read.taskRole,
    instances: read.instances,
    request: read.request,
    cpuCores: spreadsOf(read.cpuCores),
    memoryBytes: spreadsOf(read.memoryBytes),
    networkRxBytesPerSecond: spreadsOf(read.networkRxBytesPerSecond),
    networkTxBytesPerSecond: spreadsOf(read.networkTxBytesPerSecond),
  };
}

/** TaskInstance.metrics as the charts read it. */
export function instanceSeriesOf(
  taskRole: string,
  index: number,
  read: {
    request: RequestLine;
    oomKilledAt?: string | null;
    cpuCores: SeriesLists;
    memoryBytes: SeriesLists;
    memoryLimitBytes: SeriesLists;
    networkRxBytesPerSecond: SeriesLists;
    networkTxBytesPerSecond: SeriesLists;
  },
): InstanceSeries {
  return {
    taskRole,
    index,
    request: read.request,
    oomKilledAt: read.oomKilledAt,
    cpuCores: pointsOf(read.cpuCores),
    memoryBytes: pointsOf(read.memoryBytes),
    memoryLimitBytes: pointsOf(read.memoryLimitBytes),
    networkRxBytesPerSecond: pointsOf(read.networkRxBytesPerSecond),
    networkTxBytesPerSecond: pointsOf(read.networkTxBytesPerSecond),
  };
}

export type Figure = "cpu" | "memory" | "network";
export type Unit = "cores" | "bytes" | "bytes/s";

/** What a line is, which decides how it is drawn. */
export type LineKind = "used" | "request" | "limit" | "low" | "high";

export interface Line {
  label: string;
  kind: LineKind;
  values: (number | null)[];
  /** A request's level, which holds before any point is measured. */
  level?: number;
}

/** A chart independent of the library that draws it: x in seconds since the epoch. */
export interface ChartModel {
  title: string;
  unit: Unit;
  xs: number[];
  lines: Line[];
  /** Moments to mark with a vertical line (an OOM kill), in seconds. */
  marks: { at: number; label: string }[];
}

export const FIGURES: Figure[] = ["cpu", "memory", "network"];

const TITLES: Record<Figure, string> = { cpu: "CPU", memory: "Memory", network: "Network" };
const UNITS: Record<Figure, Unit> = { cpu: "cores", memory: "bytes", network: "bytes/s" };

export function seconds(at: string): number {
  return Date.parse(at) / 1000;
}

/** The union of the columns' times, sorted, and each column's value at each (null where it
 * has none), so lines measured at different moments share one axis. */
export function align<T>(columns: { points: T[]; at: (point: T) => number; value: (point: T) => number }[]): {
  xs: number[];
  values: (number | null)[][];
} {
  const times = new Set<number>();
  for (const column of columns) for (const point of column.points) times.add(column.at(point));
  const xs = [...times].sort((a, b) => a - b);
  const position = new Map(xs.map((x, n) => [x, n]));
  const values = columns.map((column) => {
    const out = xs.map((): number | null => null);
    for (const point of column.points) {
      const at = position.get(column.at(point));
      if (at !== undefined) out[at] = column.value(point);
    }
    return out;
  });
  return { xs, values };
}

function col(values: (number | null)[][], n: number): (number | null)[] {
  return values[n] ?? [];
}

const at = (point: { at: string }) => seconds(point.at);

function constant(xs: number[], value: number): (number | null)[] {
  return xs.map(() => value);
}

/** Bytes received and sent per second, as two lines on one axis. */
function networkChart<T extends { at: string }>(
  title: string,
  received: T[],
  sent: T[],
  value: (point: T) => number,
  suffix: string,
  marks: ChartModel["marks"],
): ChartModel {
  const { xs, values } = align([
    { points: received, at, value },
    { points: sent, at, value },
  ]);
  return {
    title,
    unit: UNITS.network,
    xs,
    lines: [
      { label: `received${suffix}`, kind: "used", values: col(values, 0) },
      { label: `sent${suffix}`, kind: "used", values: col(values, 1) },
    ],
    marks,
  };
}

/** A task role's chart: the sum over its instances, the least and the most one instance used
 * (drawn as a band), and for CPU and memory what all its instances asked for together. */
export function roleChart(role: RoleSeries, figure: Figure): ChartModel {
  const title = `${TITLES[figure]} of ${role.taskRole} (${role.instances} instance${role.instances === 1 ? "" : "s"})`;
  if (figure === "network") {
    const sum = (p: Spread) => p.sum;
    return networkChart(title, role.networkRxBytesPerSecond, role.networkTxBytesPerSecond, sum, " (sum)", []);
  }
  const points = figure === "cpu" ? role.cpuCores : role.memoryBytes;
  const { xs, values } = align([
    { points, at, value: (p) => p.sum },
    { points, at, value: (p) => p.min },
    { points, at, value: (p) => p.max },
  ]);
  const asked = (figure === "cpu" ? role.request.cpuCores : role.request.memoryBytes) * role.instances;
  return {
    title,
    unit: UNITS[figure],
    xs,
    lines: [
      { label: "used (sum)", kind: "used", values: col(values, 0) },
      { label: "least one instance", kind: "low", values: col(values, 1) },
      { label: "most one instance", kind: "high", values: col(values, 2) },
      { label: "requested (sum)", kind: "request", values: constant(xs, asked), level: asked },
    ],
    marks: [],
  };
}

/** An instance's chart: what it used, what it asked for, its memory limit and its OOM kill. */
export function instanceChart(instance: InstanceSeries, figure: Figure): ChartModel {
  const title = `${TITLES[figure]} of ${instance.taskRole} #${instance.index}`;
  const marks = instance.oomKilledAt ? [{ at: seconds(instance.oomKilledAt), label: "killed: out of memory" }] : [];
  if (figure === "network") {
    const value = (p: Point) => p.value;
    return networkChart(title, instance.networkRxBytesPerSecond, instance.networkTxBytesPerSecond, value, "", marks);
  }
  if (figure === "cpu") {
    const { xs, values } = align([{ points: instance.cpuCores, at, value: (p) => p.value }]);
    return {
      title,
      unit: UNITS[figure],
      xs,
      lines: [
        { label: "used", kind: "used", values: col(values, 0) },
        { label: "requested", kind: "request", values: constant(xs, instance.request.cpuCores), level: instance.request.cpuCores },
      ],
      marks,
    };
  }
  const { xs, values } = align([
    { points: instance.memoryBytes, at, value: (p) => p.value },
    { points: instance.memoryLimitBytes, at, value: (p) => p.value },
  ]);
  return {
    title,
    unit: UNITS[figure],
    xs,
    lines: [
      { label: "used", kind: "used", values: col(values, 0) },
      {
        label: "requested",
        kind: "request",
        values: constant(xs, instance.request.memoryBytes),
        level: instance.request.memoryBytes,
      },
      { label: "limit", kind: "limit", values: col(values, 1) },
    ],
    marks,
  };
}

/** The last value of a line, or null when it has none. */
export function latest(values: (number | null)[]): number | null {
  for (let n = values.length - 1; n >= 0; n--) {
    const value = values[n];
    if (value !== null && value !== undefined) return value;
  }
  return null;
}

export function formatFigure(value: number | null, unit: Unit): string {
  if (value === null) return "—";
  if (unit === "cores") return `${value.toFixed(2)} cores`;
  const scaled =
    value >= 1024 ** 3
      ? `${(value / 1024 ** 3).toFixed(2)} GiB`
      : value >= 1024 ** 2
        ? `${(value / 1024 ** 2).toFixed(1)} MiB`
        : value >= 1024
          ? `${(value / 1024).toFixed(1)} KiB`
          : `${Math.round(value)} B`;
  return unit === "bytes/s" ? `${scaled}/s` : scaled;
}

function csvField(text: string): string {
  return /[",\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** The chart's series as CSV: a row per time (ISO 8601, UTC), a column per line in the
 * chart's unit (cores, bytes, bytes per second), empty where a line has no value then. */
export function toCsv(model: ChartModel): string {
  const unit = model.unit === "cores" ? "cores" : model.unit === "bytes" ? "bytes" : "bytes_per_second";
  const header = ["time", ...model.lines.map((line) => `${line.label} [${unit}]`)].map(csvField).join(",");
  const rows = model.xs.map((x, n) =>
    [new Date(x * 1000).toISOString(), ...model.lines.map((line) => String(line.values[n] ?? ""))].join(","),
  );
  return [header, ...rows].join("\n") + "\n";
}

function spreadOf(at: string, values: number[]): Spread {
  return {
    at,
    sum: values.reduce((a, b) => a + b, 0),
    min: Math.min(...values),
    max: Math.max(...values),
    instances: values.length,
  };
}

function appendAfter<T extends { at: string }>(points: T[], point: T): T[] {
  const last = points[points.length - 1];
  if (last && seconds(last.at) >= seconds(point.at)) return points;
  return [...points, point];
}

/** The role series with one live round appended: each role's sum and spread over the
 * instances measured in it. A round not later than the last point is left out (the stored
 * series may already hold it). */
export function appendRoundToRoles(roles: RoleSeries[], roundAt: string, usages: Usage[]): RoleSeries[] {
  return roles.map((role) => {
    const mine = usages.filter((usage) => usage.taskRole === role.taskRole);
    if (mine.length === 0) return role;
    const rx = mine.map((u) => u.networkRxBytesPerSecond).filter((v): v is number => v != null);
    const tx = mine.map((u) => u.networkTxBytesPerSecond).filter((v): v is number => v != null);
    return {
      ...role,
      instances: Math.max(role.instances, mine.length),
      cpuCores: appendAfter(role.cpuCores, spreadOf(roundAt, mine.map((u) => u.cpuCores))),
      memoryBytes: appendAfter(role.memoryBytes, spreadOf(roundAt, mine.map((u) => u.memoryBytes))),
      networkRxBytesPerSecond: rx.length ? appendAfter(role.networkRxBytesPerSecond, spreadOf(roundAt, rx)) : role.networkRxBytesPerSecond,
      networkTxBytesPerSecond: tx.length ? appendAfter(role.networkTxBytesPerSecond, spreadOf(roundAt, tx)) : role.networkTxBytesPerSecond,
    };
  });
}

/** An instance's series with its figures of one live round appended (unchanged when the
 * round has none of it). */
export function appendRoundToInstance(instance: InstanceSeries, usages: Usage[]): InstanceSeries {
  const usage = usages.find((u) => u.taskRole === instance.taskRole && u.index === instance.index);
  if (!usage) return instance;
  const add = (points: Point[], value: number | null | undefined) =>
    value == null ? points : appendAfter(points, { at: usage.at, value });
  return {
    ...instance,
    cpuCores: add(instance.cpuCores, usage.cpuCores),
    memoryBytes: add(instance.memoryBytes, usage.memoryBytes),
    memoryLimitBytes: add(instance.memoryLimitBytes, usage.memoryLimitBytes),
    networkRxBytesPerSecond: add(instance.networkRxBytesPerSecond, usage.networkRxBytesPerSecond),
    networkTxBytesPerSecond: add(instance.networkTxBytesPerSecond, usage.networkTxBytesPerSecond),
  };
}

/** The series with an empty one for each of the job's roles that has none yet, so the first
 * live round of a role measured after the page read its series has a place to go; a role
 * with no instance measured counts all of its instances (for what they ask together). */
export function withEveryRole(
  series: RoleSeries[],
  roles: { taskRole: string; instances: number; request: RequestLine }[],
): RoleSeries[] {
  const counts = new Map(roles.map((role) => [role.taskRole, role.instances]));
  const known = new Set(series.map((role) => role.taskRole));
  const missing = roles
    .filter((role) => !known.has(role.taskRole))
    .map((role) => ({
      taskRole: role.taskRole,
      instances: role.instances,
      request: role.request,
      cpuCores: [],
      memoryBytes: [],
      networkRxBytesPerSecond: [],
      networkTxBytesPerSecond: [],
    }));
  const counted = series.map((role) =>
    role.instances === 0 ? { ...role, instances: counts.get(role.taskRole) ?? 0 } : role,
  );
  return [...counted, ...missing];
}
