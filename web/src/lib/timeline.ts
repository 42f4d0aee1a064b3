// A job's event timeline built from a replayable stream: each event kept once, in order of
// its sequence, whatever a reconnection delivers again.

export interface TimelineEvent {
  cursor: string;
  sequence: number;
  at: string;
  type: string;
  message?: string | null;
  state?: string | null;
  attempt?: number | null;
  taskRole?: string | null;
  index?: number | null;
}

export interface Timeline<E extends TimelineEvent = TimelineEvent> {
  events: E[];
  /** The cursor of the newest event kept: where a new subscription resumes. */
  cursor: string | null;
  last: number;
}

export function emptyTimeline<E extends TimelineEvent>(): Timeline<E> {
  return { events: [], cursor: null, last: 0 };
}

/** The timeline with `incoming` added; the same object when nothing was new. */
export function addEvents<E extends TimelineEvent>(timeline: Timeline<E>, incoming: E[]): Timeline<E> {
  const fresh = incoming.filter((event) => event.sequence > timeline.last);
  if (fresh.length === 0) return timeline;
  const known = new Set(timeline.events.map((event) => event.sequence));
  const events = [...timeline.events];
  for (const event of fresh) {
    if (!known.has(event.sequence)) {
      known.add(event.sequence);
      events.push(event);
    }
  }
  events.sort((a, b) => a.sequence - b.sequence);
  const newest = events[events.length - 1];
  return { events, cursor: newest ? newest.cursor : null, last: newest ? newest.sequence : 0 };
}

export interface InstanceKey {
  taskRole: string;
  index: number;
}

/** The newest state each instance reached in the timeline, by "role/index", for `attempt`. */
export function instanceStates(events: TimelineEvent[], attempt: number): Map<string, string> {
  const states = new Map<string, string>();
  for (const event of events) {
    if (
      event.type === "INSTANCE_STATE" &&
      event.taskRole != null &&
      event.index != null &&
      event.state &&
      (event.attempt == null || event.attempt === attempt)
    ) {
      states.set(`${event.taskRole}/${event.index}`, event.state);
    }
  }
  return states;
}

/** The job's newest state in the timeline, if any. */
export function jobState(events: TimelineEvent[]): { state: string; attempt: number | null; message: string | null } | null {
  for (let n = events.length - 1; n >= 0; n--) {
    const event = events[n];
    if (event && event.type === "JOB_STATE" && event.state) {
      return { state: event.state, attempt: event.attempt ?? null, message: event.message ?? null };
    }
  }
  return null;
}

/** The state to show: the timeline's, unless the page's last read already saw a final state
 * the timeline has not caught up with (a replay from the first event passes through every
 * earlier state on its way). */
export function shownState(read: string, fromTimeline: string | null | undefined): string {
  if (!fromTimeline) return read;
  if (isFinalState(read) && !isFinalState(fromTimeline)) return read;
  return fromTimeline;
}

/** Why the job is in the state shown: the job's own reason as last read (refetched after every
 * event, so instance events after the job's last change of state update it: "3 of 3 placed"),
 * unless the timeline is ahead of that read, when its newest change's message is all there is. */
export function shownReason(
  read: { state: string; reason: string | null },
  shown: string,
  latest: { state: string; message: string | null } | null,
): string | null {
  if (read.state === shown || !latest || latest.state !== shown) return read.reason;
  return latest.message ?? read.reason;
}

function isFinalState(state: string): boolean {
  return state === "SUCCEEDED" || state === "FAILED" || state === "STOPPED";
}
