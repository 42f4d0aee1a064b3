// The marketplace as cards: filtered by type and tag, searched (as one types, debounced),
// sorted, and paged; all of it in the URL's query.
import { useEffect, useMemo, useState } from "react";
import { Link, useLocation, useSearchParams } from "react-router-dom";
import { useQuery } from "urql";
import type { ItemCardFragment, ItemType } from "../gql/graphql";
import { describeProblem } from "../lib/errors";
import { formatTime } from "../lib/format";
import { ITEM_TYPES, SORTS, changeList, listFilter, readListState, typeLabel, writeListState, type ListState } from "./listState";
import { MarketplaceListQuery, MarketplaceTagsQuery } from "./MarketplacePage.operations";

export const PAGE_SIZE = 12;
export const SEARCH_DELAY_MS = 300;

export function MarketplacePage() {
  const [params, setParams] = useSearchParams();
  const state = useMemo(() => readListState(params), [params]);
  // what is typed in the search box, over the URL's search it began from (a URL changed
  // otherwise, e.g. by going back, shows its own search again)
  const [typed, setTyped] = useState({ text: state.search, base: state.search });
  const searchInput = typed.base === state.search ? typed.text : state.search;
  // the cursors of the pages before this one, to go back: kept in the history entry, so a
  // reload keeps them too (a link opened afresh goes back to the first page)
  const location = useLocation();
  const kept = location.state as { trail?: string[]; deleted?: string } | null;
  const trail = kept?.trail ?? [];

  function go(change: Partial<ListState>, nextTrail: string[] = []) {
    setParams(writeListState(changeList(state, change)), { state: { trail: nextTrail } });
  }

  // the search follows the typing once it pauses
  useEffect(() => {
    if (searchInput.trim() === state.search.trim()) return;
    const timer = setTimeout(() => {
      setTyped({ text: searchInput, base: searchInput.trim() });
      setParams(writeListState(changeList(state, { search: searchInput })), { state: { trail: [] } });
    }, SEARCH_DELAY_MS);
    return () => clearTimeout(timer);
  }, [searchInput, state, setParams]);

  const filter = useMemo(() => listFilter(state), [state]);
  const [{ data, error, fetching }] = useQuery({
    query: MarketplaceListQuery,
    variables: { first: PAGE_SIZE, after: state.after, filter, sort: state.sort },
  });
  const [{ data: tags }] = useQuery({ query: MarketplaceTagsQuery, variables: { type: state.type } });
  const items = data?.marketplaceItems.edges.map((edge) => edge.node) ?? [];
  const total = data?.marketplaceItems.totalCount ?? 0;
  const first = (state.page - 1) * PAGE_SIZE + 1;
  const tagNames = tags?.marketplaceTags.map((t) => t.name) ?? [];
  if (state.tag && !tagNames.includes(state.tag)) tagNames.unshift(state.tag);

  return (
    <section>
      <div className="title-bar">
        <h1>Marketplace</h1>
        <Link className="button" to="/marketplace/publish">Publish an item</Link>
      </div>
      <form className="filters" role="search" onSubmit={(event) => event.preventDefault()}>
        <label>
          Search
          <input
            name="q"
            type="search"
            value={searchInput}
            placeholder="name, summary or description"
            onChange={(event) => setTyped({ text: event.target.value, base: state.search })}
          />
        </label>
        <label>
          Type
          <select
            name="type"
            value={state.type ?? ""}
            onChange={(event) => go({ type: (event.target.value || null) as ItemType | null, tag: null })}
          >
            <option value="">any</option>
            {ITEM_TYPES.map((t) => (
              <option key={t.value} value={t.value}>{t.label}</option>
            ))}
          </select>
        </label>
        <label>
          Tag
          <select name="tag" value={state.tag ?? ""} onChange={(event) => go({ tag: event.target.value || null })}>
            <option value="">any</option>
            {tagNames.map((name) => {
              const count = tags?.marketplaceTags.find((t) => t.name === name)?.items;
              return (
                <option key={name} value={name}>
                  {name}{count !== undefined ? ` (${count})` : ""}
                </option>
              );
            })}
          </select>
        </label>
        <label>
          Sort by
          <select name="sort" value={state.sort} onChange={(event) => go({ sort: event.target.value as ListState["sort"] })}>
            {SORTS.map((s) => (
              <option key={s.value} value={s.value}>{s.label}</option>
            ))}
          </select>
        </label>
      </form>
      {kept?.deleted && <p className="note" role="status">{kept.deleted} was deleted with all its versions.</p>}
      {error && <p className="error" role="alert">{describeProblem(error).message}</p>}
      {data && (
        <p className="muted" data-testid="count">
          {total === 0
            ? "No items match."
            : `${first} to ${first + items.length - 1} of ${total} item${total === 1 ? "" : "s"}`}
        </p>
      )}
      {fetching && !data && <p className="muted">Loading…</p>}
      <ul className="cards" data-testid="items" aria-busy={fetching} data-query={writeListState(state).toString()}>
        {items.map((item) => (
          <ItemCard key={item.id} item={item} onTag={(tag) => go({ tag })} />
        ))}
      </ul>
      <div className="pager">
        <button
          type="button"
          disabled={!state.after}
          onClick={() => {
            const previous = trail[trail.length - 1];
            if (previous) go({ after: previous, page: state.page - 1 }, trail.slice(0, -1));
            else go({ after: null });
          }}
        >
          Previous
        </button>
        <button
          type="button"
          disabled={!data?.marketplaceItems.pageInfo.hasNextPage}
          onClick={() => {
            const next = data?.marketplaceItems.pageInfo.endCursor ?? null;
            go({ after: next, page: state.page + 1 }, state.after ? [...trail, state.after] : []);
          }}
        >
          Next
        </button>
      </div>
    </section>
  );
}

function ItemCard({ item, onTag }: { item: ItemCardFragment; onTag: (tag: string) => void }) {
  return (
    <li className="card" data-item={item.name}>
      <div className="card-head">
        <Link to={`/marketplace/${encodeURIComponent(item.id)}`} className="card-name">{item.name}</Link>
        <span className={`kind kind-${item.type.toLowerCase()}`}>{typeLabel(item.type)}</span>
        {item.visibility !== "PUBLIC" && <span className="kind">{item.visibility.toLowerCase()}</span>}
      </div>
      <p className="card-summary">{item.summary ?? <span className="muted">No summary.</span>}</p>
      <p className="tags">
        {item.tags.map((tag) => (
          <button key={tag} type="button" className="tag" onClick={() => onTag(tag)}>{tag}</button>
        ))}
      </p>
      <p className="card-foot muted">
        <span>by {item.owner.name}</span>
        <span data-testid="stars" title="stars">★ {item.stars}</span>
        <span data-testid="submits" title="jobs submitted from it">▶ {item.submits}</span>
        <span title="updated">{formatTime(item.updatedAt)}</span>
      </p>
    </li>
  );
}
