import { describe, expect, it } from "vitest";
import {
  align,
  appendRoundToInstance,
  appendRoundToRoles,
  formatFigure,
  instanceSeriesOf,
  instanceChart,
  latest,
  roleChart,
  roleSeriesOf,
  toCsv,
  withEveryRole,
  type InstanceSeries,
  type RoleSeries,
} from "./metrics";

const T0 = "2026-01-01T00:00:00Z";
const T5 = "2026-01-01T00:00:05Z";
const T10 = "2026-01-01T00:00:10Z";
const s0 = Date.parse(T0) / 1000;

const spread = (at: string, sum: number, min: number, max: number, instances = 2) => ({ at, sum, min, max, instances });

function role(): RoleSeries {
  return {
    taskRole: "worker",
    instances: 2,
    request: { cpuCores: 1, memoryBytes: 512 * 1024 ** 2, gpus: 0 },
    cpuCores: [spread(T0, 1.5, 0.5, 1), spread(T5, 2, 1, 1)],
    memoryBytes: [spread(T0, 300, 100, 200)],
    networkRxBytesPerSecond: [spread(T5, 10, 4, 6)],
    networkTxBytesPerSecond: [spread(T0, 1, 0, 1)],
  };
}

function instance(): InstanceSeries {
  return {
    taskRole: "worker",
    index: 1,
    request: { cpuCores: 1, memoryBytes: 1000, gpus: 0 },
    oomKilledAt: T10,
    cpuCores: [{ at: T0, value: 0.9 }],
    memoryBytes: [{ at: T0, value: 800 }, { at: T5, value: 990 }],
    memoryLimitBytes: [{ at: T5, value: 1000 }],
    networkRxBytesPerSecond: [],
    networkTxBytesPerSecond: [],
  };
}

describe("align", () => {
  it("puts columns measured at different times on one sorted axis with gaps", () => {
    const { xs, values } = align([
      { points: [{ t: 10, v: 1 }, { t: 0, v: 2 }], at: (p) => p.t, value: (p) => p.v },
      { points: [{ t: 5, v: 3 }], at: (p) => p.t, value: (p) => p.v },
    ]);
    expect(xs).toEqual([0, 5, 10]);
    expect(values).toEqual([
      [2, null, 1],
      [null, 3, null],
    ]);
  });
});

describe("roleChart", () => {
  it("draws the sum, the spread as least and most, and the request of all instances", () => {
    const model = roleChart(role(), "cpu");
    expect(model.xs).toEqual([s0, s0 + 5]);
    expect(model.lines.map((l) => [l.kind, l.values])).toEqual([
      ["used", [1.5, 2]],
      ["low", [0.5, 1]],
      ["high", [1, 1]],
      ["request", [2, 2]],
    ]);
    expect(model.title).toBe("CPU of worker (2 instances)");
  });

  it("draws received and sent on one axis for the network", () => {
    const model = roleChart(role(), "network");
    expect(model.xs).toEqual([s0, s0 + 5]);
    expect(model.lines.map((l) => l.values)).toEqual([
      [null, 10],
      [1, null],
    ]);
    expect(model.unit).toBe("bytes/s");
  });
});

describe("instanceChart", () => {
  it("draws memory with the request and the limit, and marks the OOM kill", () => {
    const model = instanceChart(instance(), "memory");
    expect(model.lines.map((l) => [l.label, l.values])).toEqual([
      ["used", [800, 990]],
      ["requested", [1000, 1000]],
      ["limit", [null, 1000]],
    ]);
    expect(model.marks).toEqual([{ at: s0 + 10, label: "killed: out of memory" }]);
    expect(latest(model.lines[0]!.values)).toBe(990);
    expect(latest(model.lines[2]!.values)).toBe(1000);
  });
});

describe("live rounds", () => {
  it("append each role's sum and spread of a later round, and leave out a round already held", () => {
    const usages = [
      { taskRole: "worker", index: 0, at: T10, cpuCores: 0.25, memoryBytes: 100, networkRxBytesPerSecond: null },
      { taskRole: "worker", index: 1, at: T10, cpuCores: 1, memoryBytes: 300, networkRxBytesPerSecond: 7 },
      { taskRole: "ps", index: 0, at: T10, cpuCores: 9, memoryBytes: 9 },
    ];
    const [next] = appendRoundToRoles([role()], T10, usages);
    expect(next!.cpuCores.at(-1)).toEqual({ at: T10, sum: 1.25, min: 0.25, max: 1, instances: 2 });
    expect(next!.memoryBytes.at(-1)).toEqual({ at: T10, sum: 400, min: 100, max: 300, instances: 2 });
    expect(next!.networkRxBytesPerSecond.at(-1)).toEqual({ at: T10, sum: 7, min: 7, max: 7, instances: 1 });
    expect(next!.networkTxBytesPerSecond).toHaveLength(1);
    const [again] = appendRoundToRoles([role()], T5, usages);
    expect(again!.cpuCores).toHaveLength(2);
  });

  it("append an instance's own figures only", () => {
    const next = appendRoundToInstance(instance(), [
      { taskRole: "worker", index: 0, at: T10, cpuCores: 5, memoryBytes: 5 },
      { taskRole: "worker", index: 1, at: T10, cpuCores: 0.5, memoryBytes: 999, memoryLimitBytes: 1000 },
    ]);
    expect(next.cpuCores.map((p) => p.value)).toEqual([0.9, 0.5]);
    expect(next.memoryBytes.map((p) => p.value)).toEqual([800, 990, 999]);
    expect(next.networkRxBytesPerSecond).toEqual([]);
  });
});

describe("toCsv", () => {
  it("writes a row per time with a column per line in the chart's unit, empty where missing", () => {
    const csv = toCsv(roleChart(role(), "network"));
    expect(csv).toBe(
      "time,received (sum) [bytes_per_second],sent (sum) [bytes_per_second]\n" +
        "2026-01-01T00:00:00.000Z,,1\n" +
        "2026-01-01T00:00:05.000Z,10,\n",
    );
  });

  it("quotes labels that hold commas", () => {
    const model = { ...roleChart(role(), "cpu"), xs: [], lines: [{ label: "a, b", kind: "used" as const, values: [] }] };
    expect(toCsv(model)).toBe('time,"a, b [cores]"\n');
  });
});

describe("formatFigure", () => {
  it("says cores and binary byte units", () => {
    expect(formatFigure(0.987, "cores")).toBe("0.99 cores");
    expect(formatFigure(200 * 1024 ** 2, "bytes")).toBe("200.0 MiB");
    expect(formatFigure(1536, "bytes/s")).toBe("1.5 KiB/s");
    expect(formatFigure(null, "bytes")).toBe("—");
  });
});

describe("withEveryRole", () => {
  it("adds an empty series for a role not measured yet, which the next round fills", () => {
    const request = { cpuCores: 2, memoryBytes: 1024, gpus: 0 };
    const all = withEveryRole([role(), { ...role(), taskRole: "chief", instances: 0, cpuCores: [] }], [
      { taskRole: "worker", instances: 2, request },
      { taskRole: "ps", instances: 3, request },
      { taskRole: "chief", instances: 1, request },
    ]);
    expect(all.map((r) => [r.taskRole, r.instances, r.cpuCores.length])).toEqual([
      ["worker", 2, 2],
      ["chief", 1, 0],
      ["ps", 3, 0],
    ]);
    const [, , ps] = appendRoundToRoles(all, T10, [{ taskRole: "ps", index: 0, at: T10, cpuCores: 0.5, memoryBytes: 9 }]);
    const empty = roleChart(all[2]!, "cpu");
    expect(empty.xs).toEqual([]);
    expect(empty.lines.at(-1)!.level).toBe(6); // what the 3 instances ask, shown before a point
    expect(ps!.instances).toBe(3);
    expect(roleChart(ps!, "cpu").lines.map((l) => l.values)).toEqual([[0.5], [0.5], [0.5], [6]]);
  });
});

describe("the server's parallel lists", () => {
  const lists = (times: number[], sums: number[]) => ({ times, sums, mins: sums, maxes: sums, instances: times.map(() => 1) });

  it("become a role's spreads at the same moments", () => {
    const read = roleSeriesOf({
      taskRole: "ps",
      instances: 1,
      request: { cpuCores: 1, memoryBytes: 1024, gpus: 0 },
      cpuCores: lists([s0, s0 + 5], [0.5, 0.75]),
      memoryBytes: lists([s0], [300]),
      networkRxBytesPerSecond: lists([], []),
      networkTxBytesPerSecond: lists([], []),
    });
    expect(read.cpuCores).toEqual([spread(new Date(T0).toISOString(), 0.5, 0.5, 0.5, 1), spread(new Date(T5).toISOString(), 0.75, 0.75, 0.75, 1)]);
    expect(read.memoryBytes.map((point) => point.sum)).toEqual([300]);
    expect(read.networkRxBytesPerSecond).toEqual([]);
  });

  it("become an instance's points, keeping its OOM kill", () => {
    const series = (times: number[], values: number[]) => ({ times, values });
    const read = instanceSeriesOf("worker", 1, {
      request: { cpuCores: 1, memoryBytes: 1024, gpus: 0 },
      oomKilledAt: T10,
      cpuCores: series([s0 + 10], [2]),
      memoryBytes: series([s0, s0 + 10], [1, 2]),
      memoryLimitBytes: series([s0], [1024]),
      networkRxBytesPerSecond: series([], []),
      networkTxBytesPerSecond: series([], []),
    });
    expect(read.index).toBe(1);
    expect(read.oomKilledAt).toBe(T10);
    expect(read.cpuCores).toEqual([{ at: new Date(T10).toISOString(), value: 2 }]);
    expect(read.memoryBytes.map((point) => point.value)).toEqual([1, 2]);
  });
});
