// The marketplace list's filter, sort and page, kept in the URL's query so that a reload or a
// shared link shows the same list.
import type { ItemType, MarketplaceItemFilter, MarketplaceItemSort } from "../gql/graphql";

export const ITEM_TYPES: { value: ItemType; label: string }[] = [
  { value: "JOB_TEMPLATE", label: "job template" },
  { value: "DOCKERIMAGE", label: "docker image" },
  { value: "DATA", label: "data" },
  { value: "SCRIPT", label: "script" },
  { value: "STORAGE", label: "storage" },
  { value: "OUTPUT", label: "output" },
  { value: "PLUGIN", label: "plugin" },
];

export const SORTS: { value: MarketplaceItemSort; label: string }[] = [
  { value: "RECENT", label: "most recent" },
  { value: "STARS", label: "most starred" },
  { value: "SUBMITS", label: "most used" },
];

export interface ListState {
  type: ItemType | null;
  tag: string | null;
  search: string;
  sort: MarketplaceItemSort;
  after: string | null;
  /** The page `after` starts (1 is the first), for the reader: "13 to 24 of 40". */
  page: number;
}

export function typeLabel(type: string): string {
  return ITEM_TYPES.find((t) => t.value === type)?.label ?? type.toLowerCase();
}

/** The list a URL asks for; values it does not know fall back to the defaults. */
export function readListState(params: URLSearchParams): ListState {
  const type = params.get("type");
  const sort = params.get("sort");
  return {
    type: ITEM_TYPES.some((t) => t.value === type) ? (type as ItemType) : null,
    tag: params.get("tag") || null,
    search: params.get("q") ?? "",
    sort: SORTS.some((s) => s.value === sort) ? (sort as MarketplaceItemSort) : "RECENT",
    after: params.get("after") || null,
    page: params.get("after") ? Math.max(2, Number.parseInt(params.get("page") ?? "", 10) || 2) : 1,
  };
}

/** The URL query of a list: defaults left out, so the plain list is plain `/marketplace`. */
export function writeListState(state: ListState): URLSearchParams {
  const params = new URLSearchParams();
  if (state.type) params.set("type", state.type);
  if (state.tag) params.set("tag", state.tag);
  if (state.search.trim()) params.set("q", state.search.trim());
  if (state.sort !== "RECENT") params.set("sort", state.sort);
  if (state.after) {
    params.set("after", state.after);
    params.set("page", String(state.page));
  }
  return params;
}

/** A change of filter or sort starts again at the first page; a page change keeps the rest. */
export function changeList(state: ListState, change: Partial<ListState>): ListState {
  const next = { ...state, ...change };
  if (!("after" in change)) next.after = null;
  if (!next.after) next.page = 1;
  return next;
}

export function listFilter(state: ListState): MarketplaceItemFilter {
  return { type: state.type, tag: state.tag, search: state.search.trim() || null };
}
