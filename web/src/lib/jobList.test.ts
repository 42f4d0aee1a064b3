import { describe, expect, it } from "vitest";
import { listRows } from "./jobList";

const row = (id: string, state = "RUNNING") => ({ id, state });

describe("the rows of a jobs list", () => {
  it("shows the jobs told since the reading above the listed ones, newest first", () => {
    const rows = listRows([row("c"), row("b")], [row("a")]);
    expect(rows.map((r) => r.id)).toEqual(["c", "b", "a"]);
  });

  it("shows a job once when it was told and is also listed by a later reading", () => {
    const rows = listRows([row("bobs", "RUNNING")], [row("bobs", "SUCCEEDED"), row("older")]);
    expect(rows).toEqual([row("bobs", "SUCCEEDED"), row("older")]);
  });

  it("keeps the listed rows as read when nothing was told", () => {
    const listed = [row("a"), row("b")];
    expect(listRows([], listed)).toEqual(listed);
  });
});
