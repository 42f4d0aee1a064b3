import { describe, expect, it } from "vitest";
import { startsAfterInWords, waitingNow } from "./startOrder";

describe("start order in words", () => {
  it("says whom a role starts after, with how many of its instances", () => {
    expect(startsAfterInWords("worker", [{ role: "ps", when: "ready", instances: 2, of: 2 }])).toBe(
      "worker starts after ps is ready (2 of 2)",
    );
    expect(
      startsAfterInWords("client", [
        { role: "server", when: "running", instances: 1, of: 3 },
        { role: "init", when: "succeeded", instances: 1, of: 1 },
      ]),
    ).toBe("client starts after server is running (1 of 3) and init has succeeded (1 of 1)");
    expect(startsAfterInWords("ps", [])).toBeNull();
  });

  it("says what the instances still starting wait for", () => {
    const reason = "placed on node-0; waiting for 2 of 2 ps instances to be ready";
    expect(
      waitingNow([
        { state: "STARTING", stateReason: reason },
        { state: "STARTING", stateReason: reason },
        { state: "RUNNING", stateReason: null },
      ]),
    ).toBe("2 of 3 instances waiting for 2 of 2 ps instances to be ready");
    expect(waitingNow([{ state: "RUNNING", stateReason: reason }])).toBeNull();
    expect(waitingNow([{ state: "STARTING", stateReason: "placed on node-0" }])).toBeNull();
  });
});
