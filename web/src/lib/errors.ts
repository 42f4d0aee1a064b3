// What a failed request means for the person looking at the page.
import type { CombinedError } from "urql";

export type Problem = { kind: "unauthorized" | "forbidden" | "network" | "other"; message: string };

export function describeProblem(error: CombinedError): Problem {
  const status = (error.response as Response | undefined)?.status;
  const first = error.graphQLErrors[0];
  const code = first?.extensions.code;
  const message = first?.message ?? error.networkError?.message ?? error.message;
  if (status === 401 || code === "UNAUTHENTICATED" || code === "UNAUTHORIZED") {
    return { kind: "unauthorized", message };
  }
  if (status === 403 || code === "FORBIDDEN") return { kind: "forbidden", message };
  if (error.networkError) return { kind: "network", message: `The server cannot be reached: ${message}` };
  return { kind: "other", message };
}
