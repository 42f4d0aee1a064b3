import { CombinedError } from "urql";
import { describe, expect, it } from "vitest";
import { retriesAfter, retryDelay } from "./client";

const unanswered = new CombinedError({
  networkError: new TypeError("Failed to fetch"),
});
const refused = new CombinedError({
  graphQLErrors: [{ message: "not allowed" }],
});

describe("which failed operations are asked again", () => {
  it("asks a query again when its request got no answer", () => {
    expect(retriesAfter(unanswered, { kind: "query" })).toBe(true);
  });

  it("never asks a mutation again: the server may have carried it out", () => {
    expect(retriesAfter(unanswered, { kind: "mutation" })).toBe(false);
  });

  it("does not ask again what the server answered with an error", () => {
    expect(retriesAfter(refused, { kind: "query" })).toBe(false);
  });
});

describe("reconnecting", () => {
  it("waits longer each time, at most 5 s", () => {
    expect([0, 1, 2, 10].map(retryDelay)).toEqual([250, 500, 1000, 5000]);
  });
});
