// How times, durations, states and reasons read on the pages.

export type JobStateName =
  | "WAITING"
  | "STARTING"
  | "RUNNING"
  | "STOPPING"
  | "SUCCEEDED"
  | "FAILED"
  | "STOPPED";

export const JOB_STATES: JobStateName[] = [
  "WAITING",
  "STARTING",
  "RUNNING",
  "STOPPING",
  "SUCCEEDED",
  "FAILED",
  "STOPPED",
];

export function isFinal(state: string): boolean {
  return state === "SUCCEEDED" || state === "FAILED" || state === "STOPPED";
}

export function formatTime(value: string | null | undefined): string {
  if (!value) return "—";
  const at = new Date(value);
  if (Number.isNaN(at.getTime())) return value;
  const pad = (n: number) => String(n).padStart(2, "0");
  return (
    `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())} ` +
    `${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())}`
  );
}

export function formatDuration(from: string | null | undefined, to: string | null | undefined, now = Date.now()): string {
  if (!from) return "—";
  const start = new Date(from).getTime();
  const end = to ? new Date(to).getTime() : now;
  let seconds = Math.max(0, Math.round((end - start) / 1000));
  const hours = Math.floor(seconds / 3600);
  seconds -= hours * 3600;
  const minutes = Math.floor(seconds / 60);
  seconds -= minutes * 60;
  if (hours) return `${hours}h ${minutes}m`;
  if (minutes) return `${minutes}m ${seconds}s`;
  return `${seconds}s`;
}

/** The completion of a job in words, from its state and the reason the server gave. */
export function completionInWords(state: string, reason: string | null | undefined): string {
  const why = reason ? `: ${reason}` : "";
  switch (state) {
    case "SUCCEEDED":
      return `Succeeded${why}`;
    case "FAILED":
      return `Failed${why}`;
    case "STOPPED":
      return `Stopped${why}`;
    case "WAITING":
      return `Waiting${why}`;
    case "STOPPING":
      return `Stopping${why}`;
    default:
      return reason ? `${state.charAt(0)}${state.slice(1).toLowerCase()}${why}` : "";
  }
}

export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

/** A job reference in a URL: a global ID, or a name (`user~name` for another user's). */
export function isGlobalJobId(ref: string): boolean {
  try {
    const padded = ref.replace(/-/g, "+").replace(/_/g, "/");
    return atob(padded + "=".repeat((4 - (padded.length % 4)) % 4)).startsWith("Job:");
  } catch {
    return false;
  }
}
