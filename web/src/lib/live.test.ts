import { describe, expect, it } from "vitest";
import type { FormattedExecutionResult, Client as WsClient, Sink } from "graphql-ws";
import { parse } from "graphql";
import type { TypedDocumentNode } from "@graphql-typed-document-node/core";
import { FELL_BEHIND, fellBehind, follow } from "./live";

type Events = { jobEvents: { cursor: string } };
type Vars = { jobId: string; after?: string | null };

const document = parse(
  "subscription($jobId: ID!, $after: String) { jobEvents(jobId: $jobId, after: $after) { cursor } }",
) as TypedDocumentNode<Events, Vars>;

/** A graphql-ws client that records each subscription and lets the test play the server. */
type Subscribed = { variables: Vars; sink: Sink<FormattedExecutionResult<Events>>; stopped: boolean };

function fakeClient() {
  const subscriptions: Subscribed[] = [];
  const client = {
    subscribe(
      payload: { variables?: Record<string, unknown> | null },
      sink: Sink<FormattedExecutionResult<Events>>,
    ) {
      const entry = { variables: { ...(payload.variables as Vars) }, sink, stopped: false };
      subscriptions.push(entry);
      return () => {
        entry.stopped = true;
      };
    },
  } as unknown as WsClient;
  const nth = (index: number): Subscribed => {
    const found = subscriptions[index];
    if (!found) throw new Error(`no subscription ${index}`);
    return found;
  };
  return { client, subscriptions, nth };
}

const behind = [{ message: "fell too far behind", extensions: { code: FELL_BEHIND } }];

describe("follow", () => {
  it("subscribes again from the last cursor received when the server says it fell behind", () => {
    const { client, subscriptions, nth } = fakeClient();
    const seen: string[] = [];
    const errors: string[] = [];
    follow(
      client,
      document,
      { jobId: "j", after: "c1" },
      (data, variables) => {
        variables.after = data.jobEvents.cursor;
      },
      { next: (data) => seen.push(data.jobEvents.cursor), error: (message) => errors.push(message) },
    );
    nth(0).sink.next({ data: { jobEvents: { cursor: "c2" } } });
    nth(0).sink.next({ data: { jobEvents: { cursor: "c3" } } });
    nth(0).sink.error(behind);
    expect(subscriptions).toHaveLength(2);
    expect(nth(1).variables).toEqual({ jobId: "j", after: "c3" });
    nth(1).sink.next({ data: { jobEvents: { cursor: "c4" } } });
    expect(seen).toEqual(["c2", "c3", "c4"]);
    expect(errors).toEqual([]);
  });

  it("reports other errors, and subscribes no more once stopped", () => {
    const { client, subscriptions, nth } = fakeClient();
    const errors: string[] = [];
    const stop = follow(client, document, { jobId: "j" }, () => {}, {
      next: () => {},
      error: (message) => errors.push(message),
    });
    nth(0).sink.error([{ message: "jobId: no job has that ID" }]);
    expect(errors).toEqual(["jobId: no job has that ID"]);
    expect(subscriptions).toHaveLength(1);

    const again = follow(client, document, { jobId: "j" }, () => {}, { next: () => {} });
    again();
    expect(nth(1).stopped).toBe(true);
    nth(1).sink.error(behind);
    expect(subscriptions).toHaveLength(2);
    expect(stop).toBeTypeOf("function");
  });

  it("knows the code only in a list of GraphQL errors", () => {
    expect(fellBehind(behind)).toBe(true);
    expect(fellBehind([{ message: "x" }])).toBe(false);
    expect(fellBehind(new Error(FELL_BEHIND))).toBe(false);
  });
});
