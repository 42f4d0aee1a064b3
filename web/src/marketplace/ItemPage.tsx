// One marketplace item: what it is and holds (at the version picked in `?version=`), who made
// it, what it requires; star it, use it, copy its reference; its owner edits or deletes it.
import { Suspense, lazy, useEffect, useState } from "react";
import { Link, useLocation, useNavigate, useParams, useSearchParams } from "react-router-dom";
import { useMutation, useQuery } from "urql";
import type { MarketplaceItemDetailQuery } from "../gql/graphql";
import { copyText } from "../lib/download";
import { describeProblem } from "../lib/errors";
import { formatTime } from "../lib/format";
import { typeLabel } from "./listState";
import { DeleteItemMutation, ItemDetailQuery, StarItemMutation } from "./ItemPage.operations";
import { idReference, nameReference, startsANewJob, useLink } from "./references";
import { initialValues, missingValues } from "./variables";
import { VariablesForm } from "./VariablesForm";

type Item = NonNullable<MarketplaceItemDetailQuery["marketplaceItem"]>;

// The Markdown renderer is loaded with the first item page (while its query runs), not with
// every page of the app.
const loadMarkdown = () => import("./Markdown");
const Markdown = lazy(() => loadMarkdown().then((module) => ({ default: module.Markdown })));

export function ItemPage() {
  const id = decodeURIComponent(useParams().id ?? "");
  const [params, setParams] = useSearchParams();
  const version = params.get("version");
  const [{ data, error }] = useQuery({ query: ItemDetailQuery, variables: { id, version } });
  // the warnings of the publish that led here, if it did
  const published = (useLocation().state as { publishWarnings?: { path: string[]; message: string }[] } | null)?.publishWarnings ?? [];
  useEffect(() => {
    void loadMarkdown();
  }, []);
  if (error) return <p className="error" role="alert">{describeProblem(error).message}</p>;
  if (!data) return <p className="muted">Loading…</p>;
  const item = data.marketplaceItem;
  if (!item) {
    return (
      <p className="error" role="alert">
        There is no marketplace item with that ID that you may see. <Link to="/marketplace">See the marketplace</Link>.
      </p>
    );
  }
  const pick = (picked: string) => {
    const next = new URLSearchParams(params);
    if (picked === item.latestVersion) next.delete("version");
    else next.set("version", picked);
    setParams(next);
  };
  return (
    <section className="item-page">
      <p className="muted"><Link to="/marketplace">Marketplace</Link> /</p>
      <h1>
        {item.name} <span className={`kind kind-${item.type.toLowerCase()}`}>{typeLabel(item.type)}</span>
      </h1>
      {item.summary && <p className="lead">{item.summary}</p>}
      {published.length > 0 && (
        <div className="warnings" data-testid="publish-warnings">
          <h3>Published, with warnings</h3>
          <ul>
            {published.map((warning, n) => (
              <li key={n}>{warning.message}</li>
            ))}
          </ul>
        </div>
      )}
      <dl className="summary">
        <dt>Owner</dt>
        <dd data-testid="owner">{item.owner.name}</dd>
        <dt>Contributor</dt>
        <dd data-testid="contributor">{item.contributor ?? <span className="muted">not named</span>}</dd>
        <dt>Version</dt>
        <dd>
          <select name="version" aria-label="Version" value={item.version} onChange={(event) => pick(event.target.value)}>
            {item.versions.map((v) => (
              <option key={v.version} value={v.version}>
                {v.version}{v.latest ? " (latest)" : ""}, {formatTime(v.createdAt)}
              </option>
            ))}
          </select>{" "}
          <span className="muted">{item.versions.length} version{item.versions.length === 1 ? "" : "s"}</span>
        </dd>
        <dt>Visibility</dt>
        <dd>
          {item.visibility.toLowerCase()}
          {item.groups.length > 0 && <> to {item.groups.join(", ")}</>}
        </dd>
        <dt>Tags</dt>
        <dd className="tags">
          {item.tags.length === 0 && <span className="muted">none</span>}
          {item.tags.map((tag) => (
            <Link key={tag} className="tag" to={`/marketplace?tag=${encodeURIComponent(tag)}`}>{tag}</Link>
          ))}
        </dd>
        <dt>Used</dt>
        <dd data-testid="submits">{item.submits} job{item.submits === 1 ? "" : "s"} submitted from it</dd>
        <dt>Published</dt>
        <dd>{formatTime(item.createdAt)}, updated {formatTime(item.updatedAt)}</dd>
      </dl>
      <Actions key={`${item.id}@${item.version}`} item={item} />
      <References item={item} />
      {item.description && (
        <>
          <h2>Description</h2>
          <Suspense fallback={<div className="markdown plain">{item.description}</div>}>
            <Markdown text={item.description} />
          </Suspense>
        </>
      )}
      {item.type === "JOB_TEMPLATE" ? <TemplateParts item={item} /> : <ComponentParts item={item} />}
      <Requires item={item} />
      <h2>Content <span className="muted">(version {item.version})</span></h2>
      <pre data-testid="content" className="code">{item.content}</pre>
    </section>
  );
}

function Actions({ item }: { item: Item }) {
  const navigate = useNavigate();
  const [starring, star] = useMutation(StarItemMutation);
  const [deleting, remove] = useMutation(DeleteItemMutation);
  const [confirming, setConfirming] = useState(false);
  const [problem, setProblem] = useState<string | null>(null);
  const [values, setValues] = useState(() => initialValues(item.declaredVariables));
  const missing = missingValues(item.declaredVariables, values);
  const use = useLink(item.type, item.id, item.version, values);
  const report = (error: { message: string }[] | undefined, failure: Parameters<typeof describeProblem>[0] | undefined) =>
    setProblem(failure ? describeProblem(failure).message : error?.[0]?.message ?? null);
  const toggleStar = async () => {
    const result = await star({ id: item.id, star: !item.viewerHasStarred });
    report(result.data?.starMarketplaceItem.errors, result.error);
  };
  const deleteItem = async () => {
    const result = await remove({ id: item.id });
    const errors = result.data?.deleteMarketplaceItem.errors;
    if (!result.error && errors?.length === 0) {
      // in-app navigation: nothing to wait for, and nothing that can fail
      void navigate("/marketplace", { state: { deleted: item.name } });
    } else {
      report(errors, result.error);
      setConfirming(false);
    }
  };
  return (
    <>
      <div className="actions">
        <button
          type="button"
          aria-pressed={item.viewerHasStarred}
          disabled={starring.fetching}
          // urql resolves a failed request into result.error instead of rejecting: nothing to catch
          onClick={() => void toggleStar()}
        >
          {item.viewerHasStarred ? "★ Unstar" : "☆ Star"}
        </button>
        <span data-testid="stars">{item.stars} star{item.stars === 1 ? "" : "s"}</span>
        {use && missing.length === 0 && (
          <Link className="button primary" to={use}>
            Use{startsANewJob(item.type) ? " in a new job" : ""}
          </Link>
        )}
        {use && missing.length > 0 && (
          <button type="button" className="primary" disabled title={`Give ${missing.join(", ")} a value first`}>
            Use{startsANewJob(item.type) ? " in a new job" : ""}
          </button>
        )}
        {item.viewerCanChange && (
          <>
            <Link className="button" to={`/marketplace/${encodeURIComponent(item.id)}/edit`}>Edit</Link>
            <button type="button" className="danger" onClick={() => setConfirming(true)} disabled={confirming}>
              Delete
            </button>
          </>
        )}
      </div>
      {use && (
        <VariablesForm
          itemName={item.name}
          declared={item.declaredVariables}
          values={values}
          onChange={(name, value) => setValues((old) => ({ ...old, [name]: value }))}
        />
      )}
      {use && missing.length > 0 && (
        <p className="muted" data-testid="variables-needed">
          A use gives every template variable a value: {missing.join(", ")}.
        </p>
      )}
      {confirming && (
        <div className="note confirm" role="alertdialog" aria-label="Confirm deletion">
          Delete {item.name} with all its {item.versions.length} version{item.versions.length === 1 ? "" : "s"}? Jobs that
          name it can no longer be submitted.{" "}
          <button
            type="button"
            className="danger"
            disabled={deleting.fetching}
            // urql resolves a failed request into result.error instead of rejecting: nothing to catch
            onClick={() => void deleteItem()}
          >
            Yes, delete it
          </button>{" "}
          <button type="button" onClick={() => setConfirming(false)}>Cancel</button>
        </div>
      )}
      {problem && <p className="error" role="alert">{problem}</p>}
    </>
  );
}

function References({ item }: { item: Item }) {
  const pinned = item.version !== item.latestVersion ? item.version : null;
  return (
    <div className="references">
      <CopyLine label="Reference by name" text={nameReference(item.name, pinned)} />
      <CopyLine label="Reference by ID" text={idReference(item.id)} />
    </div>
  );
}

function CopyLine({ label, text }: { label: string; text: string }) {
  const [copied, setCopied] = useState(false);
  return (
    <p className="copy-line">
      <span className="muted">{label}</span> <code>{text}</code>{" "}
      {/* copyText settles false on a clipboard failure rather than rejecting */}
      <button type="button" aria-label={`Copy ${label.toLowerCase()}`} onClick={() => void copyText(text).then(setCopied)}>
        {copied ? "Copied" : "Copy"}
      </button>
    </p>
  );
}

function TemplateParts({ item }: { item: Item }) {
  const parameters = Object.entries((item.parameters ?? {}) as Record<string, unknown>);
  return (
    <>
      <h2>Parameters</h2>
      {parameters.length === 0 ? (
        <p className="muted">It takes no parameters.</p>
      ) : (
        <table data-testid="parameters">
          <thead>
            <tr><th>Name</th><th>Default</th></tr>
          </thead>
          <tbody>
            {parameters.map(([name, value]) => (
              <tr key={name}><td><code>{name}</code></td><td><code>{JSON.stringify(value)}</code></td></tr>
            ))}
          </tbody>
        </table>
      )}
      <h2>Task roles</h2>
      <table data-testid="task-roles">
        <thead>
          <tr><th>Role</th><th>Instances</th><th>cpu / memory / gpu</th><th>Docker image</th><th>Commands (defaults filled in)</th></tr>
        </thead>
        <tbody>
          {item.taskRoles.map((role) => (
            <tr key={role.name} data-role={role.name}>
              <td>{role.name}</td>
              <td>{role.instanceCount}</td>
              <td>{role.resourcePerInstance.cpu} / {role.resourcePerInstance.memoryMB} MB / {role.resourcePerInstance.gpu}</td>
              <td><code>{role.dockerImage.reference ?? role.dockerImage.uri[0] ?? role.dockerImage.name}</code></td>
              <td><code className="commands">{role.commands.join("\n")}</code></td>
            </tr>
          ))}
        </tbody>
      </table>
      <h2>Prerequisites</h2>
      <Prerequisites item={item} />
    </>
  );
}

function ComponentParts({ item }: { item: Item }) {
  return (
    <>
      <h2>What it provides</h2>
      <Prerequisites item={item} />
      <h2>Template variables</h2>
      {item.templateVariables.length === 0 ? (
        <p className="muted">None: it is used as it is.</p>
      ) : (
        <table data-testid="template-variables">
          <thead>
            <tr><th>Name</th><th>Default</th></tr>
          </thead>
          <tbody>
            {item.declaredVariables.map((variable) => (
              <tr key={variable.name}>
                <td><code>{variable.name}</code></td>
                <td>{variable.default != null ? <code>{variable.default}</code> : <span className="muted">none: each use gives one</span>}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}

/** Where a prerequisite comes from: its reference, its URIs, or else the plugin that sets it up
 * (a plugin-based item, e.g. seed 004's `cmd` dataset, has no URI). */
function provides(p: Item["prerequisites"][number]) {
  if (p.reference) return <code>{p.reference}</code>;
  if (p.uri.length > 0) return <code>{p.uri.join(", ")}</code>;
  if (p.plugin) return <span>plugin <code>{p.plugin}</code></span>;
  return <span className="muted">—</span>;
}

function Prerequisites({ item }: { item: Item }) {
  if (item.prerequisites.length === 0) return <p className="muted">None.</p>;
  return (
    <table data-testid="prerequisites">
      <thead>
        <tr><th>Name</th><th>Type</th><th>URI or plugin</th><th>Version</th></tr>
      </thead>
      <tbody>
        {item.prerequisites.map((p) => (
          <tr key={`${p.type}:${p.name}`}>
            <td>{p.name}</td>
            <td>{p.type ? typeLabel(p.type) : "—"}</td>
            <td>{provides(p)}</td>
            <td>{p.version ?? "—"}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function Requires({ item }: { item: Item }) {
  return (
    <>
      <h2>Requires</h2>
      {item.requires.length === 0 ? (
        <p className="muted">No other items.</p>
      ) : (
        <ul data-testid="requires">
          {item.requires.map((r) => (
            <li key={r.reference}>
              {r.item ? (
                <Link to={`/marketplace/${encodeURIComponent(r.item.id)}`}>{r.item.name}</Link>
              ) : (
                <span className="muted">
                  {r.reference.startsWith("marketplace://") ? "not an item you may see" : "read from the web when used"}
                </span>
              )}{" "}
              <code>{r.reference}</code>
            </li>
          ))}
        </ul>
      )}
    </>
  );
}
