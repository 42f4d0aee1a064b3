// Who waits for whom, in words, for the job page: a role's start order (`startsAfter`) and
// what its instances still wait for (their reason while they are STARTING).

export interface StartsAfter {
  role: string;
  when: string;
  instances: number;
  of: number;
}

const PHASE: Record<string, string> = { running: "is running", ready: "is ready", succeeded: "has succeeded" };

/** `worker starts after ps is ready (2 of 2)`; several are joined with "and"; null for none. */
export function startsAfterInWords(role: string, deps: readonly StartsAfter[]): string | null {
  if (deps.length === 0) return null;
  const parts = deps.map((d) => `${d.role} ${PHASE[d.when] ?? d.when} (${d.instances} of ${d.of})`);
  return `${role} starts after ${parts.join(" and ")}`;
}

interface Waiting {
  state: string;
  stateReason?: string | null;
}

/** What the role's instances still wait for: `2 of 2 instances waiting for 2 of 2 ps instances
 * to be ready`, from the reasons of those still STARTING; null when none waits. */
export function waitingNow(instances: readonly Waiting[]): string | null {
  const reasons = instances
    .filter((i) => i.state === "STARTING" && i.stateReason)
    .map((i) => /waiting for [^;]*/.exec(i.stateReason ?? "")?.[0])
    .filter((r): r is string => !!r);
  if (reasons.length === 0) return null;
  const distinct = [...new Set(reasons)];
  return `${reasons.length} of ${instances.length} instance${instances.length === 1 ? "" : "s"} ${distinct.join("; ")}`;
}
