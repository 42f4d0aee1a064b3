// Subscriptions that resume where they stopped. graphql-ws subscribes again with the same
// payload after a dropped connection; the payload's variables are moved on with every
// message received, so the server resends only what came after it. A subscription the
// server ends because it fell behind (an error with the code FELL_BEHIND: this browser took
// the frames more slowly than they came) is subscribed again the same way.
import type { Client as WsClient } from "graphql-ws";
import { stringifyDocument } from "urql";
import type { TypedDocumentNode } from "@graphql-typed-document-node/core";

export interface LiveHandlers<T> {
  next: (data: T) => void;
  error?: (message: string) => void;
  complete?: () => void;
}

export const FELL_BEHIND = "FELL_BEHIND";

export function follow<T, V extends Record<string, unknown>>(
  ws: WsClient,
  document: TypedDocumentNode<T, V>,
  variables: V,
  resume: (data: T, variables: V) => void,
  handlers: LiveHandlers<T>,
): () => void {
  const payload = { query: stringifyDocument(document), variables: { ...variables } };
  let stopped = false;
  let stop = () => {};
  const start = () => {
    stop = ws.subscribe<T>(payload, {
      next(result) {
        if (result.errors && result.errors.length) {
          handlers.error?.(result.errors.map((error) => error.message).join("; "));
          return;
        }
        if (result.data) {
          resume(result.data, payload.variables);
          handlers.next(result.data);
        }
      },
      error(error) {
        if (!stopped && fellBehind(error)) {
          start(); // from the cursor of the last message received
          return;
        }
        handlers.error?.(describeError(error));
      },
      complete() {
        handlers.complete?.();
      },
    });
  };
  start();
  return () => {
    stopped = true;
    stop();
  };
}

/** Whether the server ended the subscription because it fell behind (see FELL_BEHIND). */
export function fellBehind(error: unknown): boolean {
  return (
    Array.isArray(error) &&
    error.some(
      (item) =>
        item !== null &&
        typeof item === "object" &&
        (item as { extensions?: { code?: unknown } }).extensions?.code === FELL_BEHIND,
    )
  );
}

export function describeError(error: unknown): string {
  if (Array.isArray(error)) return error.map((item) => describeError(item)).join("; ");
  if (error instanceof Error) return error.message;
  if (typeof CloseEvent !== "undefined" && error instanceof CloseEvent) {
    return error.reason || `the connection closed (code ${error.code})`;
  }
  if (error && typeof error === "object" && "message" in error) return String(error.message);
  return String(error);
}
