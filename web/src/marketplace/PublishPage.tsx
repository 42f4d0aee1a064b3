// Publish an item (from pasted YAML, a file, or one's job: `?job=<id>`) and change one (a new
// version when its content changes). Every error the server gives comes back at its field.
import { useMemo, useState } from "react";
import { Link, useNavigate, useParams, useSearchParams } from "react-router-dom";
import { useMutation, useQuery } from "urql";
import type { Visibility } from "../gql/graphql";
import { describeProblem } from "../lib/errors";
import { useSession } from "../session";
import { Editor, type Mark } from "../submit/Editor";
import { parse, placeOf } from "../submit/yamlDoc";
import { VISIBILITIES, errorsByField, splitLabels, type FormField, type UserErrorLike } from "./publishForm";
import { ItemDetailQuery } from "./ItemPage.operations";
import { PublishItemMutation, PublishJobQuery, UpdateItemMutation } from "./PublishPage.operations";

interface Values {
  name: string;
  content: string;
  version: string;
  summary: string;
  description: string;
  tags: string;
  visibility: Visibility;
  groups: string;
}

const EMPTY: Values = { name: "", content: "", version: "", summary: "", description: "", tags: "", visibility: "PUBLIC", groups: "" };

export function PublishPage() {
  const jobId = useSearchParams()[0].get("job");
  const { viewer } = useSession();
  const navigate = useNavigate();
  const [result, publish] = useMutation(PublishItemMutation);
  const [{ data: job, error: jobError }] = useQuery({ query: PublishJobQuery, variables: { id: jobId ?? "" }, pause: !jobId });
  const [errors, setErrors] = useState<UserErrorLike[]>([]);

  async function submit(values: Values) {
    const answer = await publish({
      input: {
        content: jobId ? null : values.content,
        jobId: jobId ?? null,
        name: values.name.trim() || null,
        version: values.version.trim() || null,
        summary: values.summary.trim() || null,
        description: values.description.trim() || null,
        tags: splitLabels(values.tags),
        visibility: values.visibility,
        groups: values.visibility === "GROUPS" ? splitLabels(values.groups) : null,
      },
    });
    if (answer.error) {
      setErrors([{ path: [], code: "request", message: describeProblem(answer.error).message }]);
      return;
    }
    const payload = answer.data?.publishMarketplaceItem;
    setErrors(payload?.errors ?? []);
    // what the publisher should know (a draft-dialect template is converted when used) is shown
    // on the item's page
    if (payload?.item && payload.errors.length === 0) {
      // in-app navigation: nothing to wait for, and nothing that can fail
      void navigate(`/marketplace/${encodeURIComponent(payload.item.id)}`, { state: { publishWarnings: payload.warnings } });
    }
  }

  if (jobId && jobError) return <p className="error" role="alert">{describeProblem(jobError).message}</p>;
  if (jobId && !job) return <p className="muted">Loading…</p>;
  if (jobId && !job?.job) return <p className="error" role="alert">There is no job with that ID that you may see.</p>;
  if (job?.job && !viewer.admin && viewer.id !== job.job.user.id) {
    return (
      <p className="error" role="alert">
        Job {job.job.name} belongs to {job.job.user.name}: only its owner or an admin may publish it.
      </p>
    );
  }
  return (
    <section>
      <h1>{job?.job ? `Publish job ${job.job.name} as a template` : "Publish an item"}</h1>
      <ItemForm
        initial={EMPTY}
        job={job?.job ? { name: job.job.name, config: job.job.config } : null}
        errors={errors}
        busy={result.fetching}
        action="Publish"
        onSubmit={submit}
      />
    </section>
  );
}

export function EditPage() {
  const id = decodeURIComponent(useParams().id ?? "");
  const navigate = useNavigate();
  const [{ data, error }] = useQuery({ query: ItemDetailQuery, variables: { id, version: null } });
  const [result, update] = useMutation(UpdateItemMutation);
  const [errors, setErrors] = useState<UserErrorLike[]>([]);
  if (error) return <p className="error" role="alert">{describeProblem(error).message}</p>;
  if (!data) return <p className="muted">Loading…</p>;
  const item = data.marketplaceItem;
  if (!item) return <p className="error" role="alert">There is no marketplace item with that ID that you may see.</p>;
  if (!item.viewerCanChange) {
    return <p className="error" role="alert">Only {item.owner.name} or an admin may change {item.name}.</p>;
  }
  const initial: Values = {
    name: item.name,
    content: item.content,
    version: "",
    summary: item.summary ?? "",
    description: item.description ?? "",
    tags: item.tags.join(", "),
    visibility: item.visibility,
    groups: item.groups.join(", "),
  };

  async function submit(values: Values) {
    const changed = values.content !== initial.content;
    const answer = await update({
      input: {
        id,
        content: changed ? values.content : null,
        version: changed ? values.version.trim() || null : null,
        summary: values.summary.trim(),
        description: values.description.trim(),
        tags: splitLabels(values.tags),
        visibility: values.visibility,
        groups: values.visibility === "GROUPS" ? splitLabels(values.groups) : null,
      },
    });
    if (answer.error) {
      setErrors([{ path: [], code: "request", message: describeProblem(answer.error).message }]);
      return;
    }
    const payload = answer.data?.updateMarketplaceItem;
    setErrors(payload?.errors ?? []);
    // in-app navigation: nothing to wait for, and nothing that can fail
    if (payload?.item && payload.errors.length === 0) void navigate(`/marketplace/${encodeURIComponent(id)}`);
  }

  return (
    <section>
      <p className="muted">
        <Link to="/marketplace">Marketplace</Link> / <Link to={`/marketplace/${encodeURIComponent(id)}`}>{item.name}</Link> /
      </p>
      <h1>Edit {item.name}</h1>
      <p className="muted">
        Changing the content publishes a new version (now {item.latestVersion}); the rest changes the item as it is.
      </p>
      <ItemForm initial={initial} job={null} errors={errors} busy={result.fetching} action="Save" onSubmit={submit} editing />
    </section>
  );
}

/** The content's errors as marks on their lines: a path inside the content at the node it
 * names, a "line N" in the message (the YAML or JSON itself is wrong) at that line. */
function contentMarks(text: string, errors: UserErrorLike[]): Mark[] {
  const parsed = parse(text);
  const lineStart = (line: number) => parsed.lines.lineStarts[Math.max(0, line - 1)] ?? 0;
  return errors
    .filter((error) => error.path[0] === "content" || error.path[0] === "config")
    .map((error) => {
      const inside = error.path.slice(1);
      const line = /\bline (\d+)/.exec(error.message);
      let from = 0;
      let to = 0;
      if (inside.length > 0) {
        const place = placeOf(parsed, inside);
        from = place.from;
        to = place.to;
      } else if (line) {
        from = to = lineStart(Number(line[1]));
      } else if (parsed.syntax) {
        from = to = lineStart(parsed.syntax.line);
      }
      const where = inside.length > 0 ? `${inside.join(".")}: ` : "";
      return { from, to, severity: "error" as const, message: `${where}${error.message}` };
    });
}

function ItemForm({
  initial,
  job,
  errors,
  busy,
  action,
  onSubmit,
  editing = false,
}: {
  initial: Values;
  job: { name: string; config: string } | null;
  errors: UserErrorLike[];
  busy: boolean;
  action: string;
  onSubmit: (values: Values) => Promise<void>;
  editing?: boolean;
}) {
  const { viewer } = useSession();
  const [values, setValues] = useState(initial);
  const [fileProblem, setFileProblem] = useState<string | null>(null);
  const set = (field: keyof Values) => (event: { target: { value: string } }) =>
    setValues({ ...values, [field]: event.target.value });
  const at = errorsByField(errors);
  const contentChanged = values.content !== initial.content;
  // the content the errors are about: the marks show while the editor still holds it
  const [sent, setSent] = useState<string | null>(null);
  const marks = useMemo(() => (sent === null ? [] : contentMarks(sent, errors)), [sent, errors]);
  return (
    <form
      className="publish"
      noValidate
      onSubmit={(event) => {
        event.preventDefault();
        setSent(values.content);
        // the pages' submits show a failed request as errors (urql resolves it, never rejects)
        void onSubmit(values);
      }}
    >
      {job ? (
        <div className="field">
          <span className="label">Content: the job's config as submitted (secrets masked)</span>
          <pre className="code" data-testid="job-config">{job.config}</pre>
          <FieldErrors field="content" at={at} />
        </div>
      ) : (
        <div className="field">
          <label htmlFor="content">
            Content: a job template or a component, YAML or JSON
          </label>
          <Editor
            id="content"
            label="Content"
            value={values.content}
            onChange={(content) => setValues((current) => ({ ...current, content }))}
            marks={marks}
            marksFor={sent}
          />
          <label className="file">
            or read it from a file{" "}
            <input
              type="file"
              name="file"
              accept=".yaml,.yml,.json,text/yaml,application/json"
              onChange={(event) => {
                const file = event.target.files?.[0];
                if (!file) return;
                // a file that cannot be read is said so under the field
                void file.text().then(
                  (content) => {
                    setValues({ ...values, content });
                    setFileProblem(null);
                  },
                  (problem: unknown) => setFileProblem(`${file.name} cannot be read: ${String(problem)}`),
                );
              }}
            />
          </label>
          {fileProblem && <p className="field-error">{fileProblem}</p>}
          <FieldErrors field="content" at={at} />
          {editing && <FieldErrors field="name" at={at} />}
        </div>
      )}
      {!editing && (
        <div className="field">
          <label htmlFor="name">Name</label>
          <input
            id="name"
            name="name"
            value={values.name}
            placeholder={job ? `the job's: ${job.name}` : "the content's name"}
            aria-invalid={at.name ? true : undefined}
            onChange={set("name")}
          />
          <FieldErrors field="name" at={at} />
        </div>
      )}
      {(!editing || contentChanged) && (
        <div className="field">
          <label htmlFor="version">Version</label>
          <input id="version" name="version" value={values.version} placeholder="the content's version, else the next number" onChange={set("version")} />
          <FieldErrors field="version" at={at} />
        </div>
      )}
      <div className="field">
        <label htmlFor="summary">Summary</label>
        <input id="summary" name="summary" value={values.summary} placeholder="one line; default: the description's first line" onChange={set("summary")} />
        <FieldErrors field="summary" at={at} />
      </div>
      <div className="field">
        <label htmlFor="description">Description (Markdown)</label>
        <textarea id="description" name="description" rows={5} value={values.description} placeholder="default: the content's description" onChange={set("description")} />
        <FieldErrors field="description" at={at} />
      </div>
      <div className="field">
        <label htmlFor="tags">Tags, separated by commas</label>
        <input id="tags" name="tags" value={values.tags} placeholder="e.g. vision, pytorch" onChange={set("tags")} />
        <FieldErrors field="tags" at={at} />
      </div>
      <div className="field">
        <label htmlFor="visibility">Visibility</label>
        <select id="visibility" name="visibility" value={values.visibility} onChange={set("visibility")}>
          {VISIBILITIES.map((v) => (
            <option key={v.value} value={v.value}>{v.label}</option>
          ))}
        </select>
        <FieldErrors field="visibility" at={at} />
      </div>
      {values.visibility === "GROUPS" && (
        <div className="field">
          <label htmlFor="groups">Groups (virtual clusters), separated by commas</label>
          <input id="groups" name="groups" list="my-groups" value={values.groups} onChange={set("groups")} />
          <datalist id="my-groups">
            {viewer.virtualClusters.map((vc) => (
              <option key={vc} value={vc} />
            ))}
          </datalist>
          <FieldErrors field="groups" at={at} />
        </div>
      )}
      <FieldErrors field="form" at={at} />
      <div className="actions">
        <button type="submit" className="primary" disabled={busy}>{action}</button>
        {errors.length > 0 && (
          <span className="error-count" role="status">
            {errors.length} problem{errors.length === 1 ? "" : "s"} to fix
          </span>
        )}
      </div>
    </form>
  );
}

function FieldErrors({ field, at }: { field: FormField; at: Partial<Record<FormField, string[]>> }) {
  const messages = at[field];
  if (!messages) return null;
  return (
    <ul className="field-error" data-testid={`error-${field}`} role="alert">
      {messages.map((message) => (
        <li key={message}>{message}</li>
      ))}
    </ul>
  );
}
