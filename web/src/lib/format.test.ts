import { describe, expect, it } from "vitest";
import { completionInWords, formatDuration, isFinal, isGlobalJobId } from "./format";
import { retryDelay } from "./client";

describe("format", () => {
  it("tells global job IDs from names", () => {
    expect(isGlobalJobId(btoa("Job:psw-1234").replace(/=+$/, ""))).toBe(true);
    expect(isGlobalJobId("psw")).toBe(false);
    expect(isGlobalJobId("alice~psw")).toBe(false);
    expect(isGlobalJobId(btoa("User:3"))).toBe(false);
  });

  it("puts the completion in words", () => {
    expect(completionInWords("FAILED", "exit code 3")).toBe("Failed: exit code 3");
    expect(completionInWords("SUCCEEDED", null)).toBe("Succeeded");
    expect(completionInWords("RUNNING", null)).toBe("");
  });

  it("measures durations", () => {
    expect(formatDuration("2024-05-01T12:00:00Z", "2024-05-01T12:01:05Z")).toBe("1m 5s");
    expect(formatDuration("2024-05-01T12:00:00Z", "2024-05-01T14:30:00Z")).toBe("2h 30m");
    expect(formatDuration(null, null)).toBe("—");
  });

  it("knows final states", () => {
    expect(["SUCCEEDED", "FAILED", "STOPPED"].every(isFinal)).toBe(true);
    expect(isFinal("STOPPING")).toBe(false);
  });

  it("reconnects quickly first, then at most every 5 s", () => {
    expect(retryDelay(0)).toBe(250);
    expect(retryDelay(2)).toBe(1000);
    expect(retryDelay(20)).toBe(5000);
  });
});
