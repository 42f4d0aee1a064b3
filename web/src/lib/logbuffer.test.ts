import { describe, expect, it } from "vitest";
import { EMPTY_LOG, appendChunk, tailNote, trimTo } from "./logbuffer";

describe("appendChunk", () => {
  it("places chunks by byte offset and drops what it holds already", () => {
    let log = appendChunk(EMPTY_LOG, 0, "one\n");
    log = appendChunk(log, 4, "two\n");
    log = appendChunk(log, 4, "two\n"); // sent again after a reconnection
    log = appendChunk(log, 6, "o\nthree\n"); // overlaps
    expect(log.text).toBe("one\ntwo\nthree\n");
    expect(log.end).toBe(14);
  });

  it("counts bytes, not characters", () => {
    let log = appendChunk(EMPTY_LOG, 0, "é\n");
    expect(log.end).toBe(3);
    log = appendChunk(log, 3, "ü\n");
    expect(log.text).toBe("é\nü\n");
  });

  it("starts where the tail starts, and says so", () => {
    const log = appendChunk(EMPTY_LOG, 5000, "last line\n");
    expect(log.start).toBe(5000);
    expect(tailNote(log)).toContain("first 5,000 bytes are left out");
    expect(tailNote(appendChunk(EMPTY_LOG, 0, "all\n"))).toBeNull();
  });

  it("shows the server's note about dropped output as a line like any other", () => {
    const log = appendChunk(EMPTY_LOG, 0, "a\n[paigraph] 1000 bytes of output were dropped here\nb\n");
    expect(log.text.split("\n")[1]).toBe("[paigraph] 1000 bytes of output were dropped here");
  });
});

describe("trimTo", () => {
  it("keeps the newest lines within the limit and moves the start on", () => {
    const log = appendChunk(EMPTY_LOG, 0, "aaaa\nbbbb\ncccc\n");
    const trimmed = trimTo(log, 8);
    expect(trimmed.text).toBe("cccc\n");
    expect(trimmed.start).toBe(10);
    expect(trimmed.end).toBe(15);
    expect(trimTo(log, 100)).toBe(log);
  });
});
