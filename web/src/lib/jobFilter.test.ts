import { describe, expect, it } from "vitest";
import type { JobState } from "../gql/graphql";
import { inFilter } from "./jobFilter";

const job = (state: JobState, user = "alice", name = "Train-Cifar", virtualCluster = "default") => ({
  name,
  state,
  virtualCluster,
  user: { name: user },
});

describe("a job in a jobs list's filter", () => {
  it("leaves a list of RUNNING jobs once it finishes", () => {
    const running = { state: ["RUNNING" as JobState] };
    expect(inFilter(job("RUNNING"), running)).toBe(true);
    expect(inFilter(job("SUCCEEDED"), running)).toBe(false);
    expect(inFilter(job("SUCCEEDED"), { state: null })).toBe(true);
  });

  it("belongs to the filter's user, virtual cluster and name only", () => {
    expect(inFilter(job("RUNNING", "bob"), { user: "alice" })).toBe(false);
    expect(inFilter(job("RUNNING", "alice"), { user: "alice" })).toBe(true);
    expect(inFilter(job("RUNNING"), { user: null })).toBe(true);
    expect(inFilter(job("RUNNING"), { virtualCluster: "research" })).toBe(false);
    expect(inFilter(job("RUNNING"), { name: "Train-Cifar" })).toBe(true);
    expect(inFilter(job("RUNNING"), { name: "train-cifar" })).toBe(false);
  });

  it("matches part of the name in any case, as the search box does", () => {
    expect(inFilter(job("RUNNING"), { nameContains: "cifar" })).toBe(true);
    expect(inFilter(job("RUNNING"), { nameContains: "mnist" })).toBe(false);
  });
});
