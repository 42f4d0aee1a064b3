import { describe, expect, it } from "vitest";
import { addEvents, emptyTimeline, instanceStates, jobState, shownReason, shownState, type TimelineEvent } from "./timeline";

function event(sequence: number, extra: Partial<TimelineEvent> = {}): TimelineEvent {
  return { cursor: `c${sequence}`, sequence, at: "2024-05-01T12:00:00Z", type: "JOB_STATE", ...extra };
}

describe("addEvents", () => {
  it("keeps each event once, in order, whatever a reconnection sends again", () => {
    let timeline = addEvents(emptyTimeline(), [event(1), event(2)]);
    timeline = addEvents(timeline, [event(2), event(3)]);
    timeline = addEvents(timeline, [event(1), event(3), event(4)]);
    expect(timeline.events.map((e) => e.sequence)).toEqual([1, 2, 3, 4]);
    expect(timeline.cursor).toBe("c4");
    expect(timeline.last).toBe(4);
  });

  it("returns the same timeline when nothing is new", () => {
    const timeline = addEvents(emptyTimeline(), [event(1)]);
    expect(addEvents(timeline, [event(1)])).toBe(timeline);
  });
});

describe("states from the timeline", () => {
  const events = [
    event(1, { state: "WAITING", attempt: 1 }),
    event(2, { type: "INSTANCE_STATE", taskRole: "worker", index: 0, state: "RUNNING", attempt: 1 }),
    event(3, { type: "INSTANCE_STATE", taskRole: "worker", index: 0, state: "FAILED", attempt: 1 }),
    event(4, { state: "RUNNING", attempt: 2, message: "retrying" }),
    event(5, { type: "INSTANCE_STATE", taskRole: "worker", index: 0, state: "STARTING", attempt: 2 }),
  ];

  it("gives each instance of the current attempt its newest state", () => {
    expect(instanceStates(events, 1).get("worker/0")).toBe("FAILED");
    expect(instanceStates(events, 2).get("worker/0")).toBe("STARTING");
  });

  it("gives the job's newest state with its attempt and message", () => {
    expect(jobState(events)).toEqual({ state: "RUNNING", attempt: 2, message: "retrying" });
    expect(jobState([])).toBeNull();
  });
});

describe("shownState", () => {
  it("takes the timeline's state, unless a replay has not reached the final state read", () => {
    expect(shownState("RUNNING", "SUCCEEDED")).toBe("SUCCEEDED");
    expect(shownState("STARTING", "RUNNING")).toBe("RUNNING");
    expect(shownState("SUCCEEDED", "STARTING")).toBe("SUCCEEDED");
    expect(shownState("STOPPED", "FAILED")).toBe("FAILED");
    expect(shownState("WAITING", null)).toBe("WAITING");
  });
});

describe("shownReason", () => {
  const entered = { state: "STARTING", message: "starting: 1 of 3 instance(s) placed" };

  it("gives the job's current reason once the read caught up, not the message it entered with", () => {
    const read = { state: "STARTING", reason: "starting: 3 of 3 instance(s) placed" };
    expect(shownReason(read, "STARTING", entered)).toBe("starting: 3 of 3 instance(s) placed");
  });

  it("gives the newest change's message while the read lags behind it", () => {
    const read = { state: "WAITING", reason: "waiting: attempt 1 queued" };
    expect(shownReason(read, "STARTING", entered)).toBe("starting: 1 of 3 instance(s) placed");
    expect(shownReason(read, "STARTING", { state: "STARTING", message: null })).toBe("waiting: attempt 1 queued");
  });
});
