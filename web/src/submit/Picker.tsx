// Picking a prerequisite from the marketplace: a searchable list of the items of one type the
// viewer may see; picking puts the item's marketplace:// reference into the job. The item's own
// details (where it comes from, what it requires) show as what the job will get.
import { useState } from "react";
import { useQuery } from "urql";
import { parse as parseYaml } from "yaml";
import type { ItemType, SubmitPagePickerItemsQuery } from "../gql/graphql";
import { describeProblem } from "../lib/errors";
import { initialValues, missingValues } from "../marketplace/variables";
import { VariablesForm } from "../marketplace/VariablesForm";
import { PickerItemsQuery } from "./Picker.operations";

export type PickerItem = SubmitPagePickerItemsQuery["marketplaceItems"]["edges"][number]["node"];

const NAME_REFERENCE = "marketplace://name/";
const ID_REFERENCE = "marketplace://prerequisites/itemId/";

export function referenceTo(item: PickerItem, byId = false): string {
  return byId ? `${ID_REFERENCE}${item.id}` : `${NAME_REFERENCE}${item.name}`;
}

/** Picking calls `onPick` with the item's reference and, for an item with template variables,
 * the values given in the form it shows first (prefilled with the declared defaults). */
export function Picker({
  type,
  label,
  onPick,
}: {
  type: ItemType;
  label: string;
  onPick: (reference: string, item: PickerItem, variables: Record<string, string> | null) => void;
}) {
  const [open, setOpen] = useState(false);
  const [asking, setAsking] = useState<{ item: PickerItem; values: Record<string, string> } | null>(null);
  const [search, setSearch] = useState("");
  const [byId, setById] = useState(false);
  const [{ data, error, fetching }] = useQuery({
    query: PickerItemsQuery,
    variables: { filter: { type, search: search.trim() || null } },
    pause: !open,
  });
  if (!open) {
    return (
      <button type="button" className="pick" onClick={() => setOpen(true)}>
        Pick {label} from the marketplace
      </button>
    );
  }
  const items = data?.marketplaceItems.edges.map((edge) => edge.node) ?? [];
  return (
    <div className="picker" role="dialog" aria-label={`Pick ${label}`} data-picker={type}>
      <div className="picker-bar">
        <input
          type="search"
          aria-label={`Search ${label}`}
          placeholder={`Search ${label} by name, summary or description`}
          value={search}
          onChange={(event) => setSearch(event.target.value)}
        />
        <label className="inline">
          <input type="checkbox" checked={byId} onChange={(event) => setById(event.target.checked)} /> by item ID
        </label>
        <button type="button" className="link" onClick={() => setOpen(false)}>
          Close
        </button>
      </div>
      {error && <p className="error">{describeProblem(error).message}</p>}
      {!fetching && data && items.length === 0 && <p className="muted">No {label} matches.</p>}
      <ul className="picker-items">
        {items.map((item) => (
          <li key={item.id} data-item={item.name}>
            <div>
              <strong>{item.name}</strong> <span className="muted">{item.version} by {item.owner.name}</span>
              {item.summary && <div>{item.summary}</div>}
              <ItemDetails item={item} />
            </div>
            {asking?.item.id === item.id ? (
              <div className="picker-variables">
                <VariablesForm
                  itemName={item.name}
                  declared={item.declaredVariables}
                  values={asking.values}
                  onChange={(name, value) => setAsking({ item, values: { ...asking.values, [name]: value } })}
                />
                <button
                  type="button"
                  className="primary"
                  disabled={missingValues(item.declaredVariables, asking.values).length > 0}
                  onClick={() => {
                    onPick(referenceTo(item, byId), item, asking.values);
                    setAsking(null);
                    setOpen(false);
                  }}
                >
                  Add {item.name} with these values
                </button>
                <button type="button" className="link" onClick={() => setAsking(null)}>
                  Cancel
                </button>
              </div>
            ) : (
              <button
                type="button"
                onClick={() => {
                  if (item.declaredVariables.length > 0) {
                    setAsking({ item, values: initialValues(item.declaredVariables) });
                    return;
                  }
                  onPick(referenceTo(item, byId), item, null);
                  setOpen(false);
                }}
              >
                Use {item.name}
              </button>
            )}
          </li>
        ))}
      </ul>
    </div>
  );
}

/** What an item gives a job: its uri, and the other items and storages it requires. */
export function ItemDetails({ item }: { item: PickerItem }) {
  const own = item.prerequisites[0];
  const required = requirements(item.content);
  return (
    <dl className="item-details">
      {own && own.uri.length > 0 && (
        <>
          <dt>uri</dt>
          <dd>
            {own.uri.map((uri) => (
              <code key={uri}>{uri}</code>
            ))}
          </dd>
        </>
      )}
      {required.require.length > 0 && (
        <>
          <dt>requires</dt>
          <dd>{required.require.join(", ")}</dd>
        </>
      )}
      {required.storages.length > 0 && (
        <>
          <dt>storages</dt>
          <dd>{required.storages.join(", ")}</dd>
        </>
      )}
      {item.templateVariables.length > 0 && (
        <>
          <dt>variables</dt>
          <dd>{item.templateVariables.join(", ")}</dd>
        </>
      )}
    </dl>
  );
}

function requirements(content: string): { require: string[]; storages: string[] } {
  try {
    const doc = parseYaml(content) as Record<string, unknown> | null;
    const names = (value: unknown): string[] =>
      Array.isArray(value)
        ? value.map((entry: unknown) => {
            if (typeof entry === "string") return entry;
            const given = (entry ?? {}) as { name?: unknown; mountPath?: unknown };
            const name = given.name ?? given.mountPath;
            return typeof name === "string" || typeof name === "number" ? String(name) : "?";
          })
        : [];
    return { require: names(doc?.require), storages: names(doc?.requireStorages) };
  } catch {
    return { require: [], storages: [] };
  }
}

/** The details of the item a `marketplace://name/…` reference names, looked up by name. */
export function ReferenceDetails({ reference, type }: { reference: unknown; type: ItemType }) {
  const name = typeof reference === "string" && reference.startsWith(NAME_REFERENCE) ? reference.slice(NAME_REFERENCE.length) : null;
  const [{ data }] = useQuery({
    query: PickerItemsQuery,
    variables: { filter: { type, name } },
    pause: name === null,
  });
  const item = data?.marketplaceItems.edges[0]?.node;
  if (name === null || !item) return null;
  return (
    <div className="reference-details" data-reference={reference as string}>
      <span className="muted">
        The job gets {item.name} {item.version} ({item.type.toLowerCase()}):
      </span>
      <ItemDetails item={item} />
    </div>
  );
}
