import { describe, expect, it } from "vitest";
import { changeList, listFilter, readListState, writeListState } from "./listState";

describe("the list's state in the URL", () => {
  it("reads what it wrote", () => {
    const state = { type: "DATA", tag: "gpu", search: "mnist", sort: "STARS", after: "abc", page: 3 } as const;
    expect(readListState(writeListState(state))).toEqual(state);
    expect(writeListState(state).toString()).toBe("type=DATA&tag=gpu&q=mnist&sort=STARS&after=abc&page=3");
  });

  it("counts a page given without a number as the second", () => {
    expect(readListState(new URLSearchParams("after=abc")).page).toBe(2);
    expect(readListState(new URLSearchParams("page=7")).page).toBe(1);
  });

  it("leaves the defaults out and ignores values it does not know", () => {
    const state = readListState(new URLSearchParams("type=nonsense&sort=LOUDEST&q=%20"));
    expect(state).toEqual({ type: null, tag: null, search: " ", sort: "RECENT", after: null, page: 1 });
    expect(writeListState(state).toString()).toBe("");
    expect(listFilter(state)).toEqual({ type: null, tag: null, search: null });
  });

  it("starts at the first page when the filter or the sort changes", () => {
    const state = readListState(new URLSearchParams("tag=gpu&after=abc&page=4"));
    expect(state.page).toBe(4);
    expect(changeList(state, { sort: "SUBMITS" })).toMatchObject({ after: null, page: 1 });
    expect(changeList(state, { after: "def", page: 5 })).toMatchObject({ tag: "gpu", after: "def", page: 5 });
    expect(changeList(state, { after: null })).toMatchObject({ page: 1 });
  });
});
