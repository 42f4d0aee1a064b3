// The Submit Job page: compose a job from a file, a template, another job or nothing, in forms
// or in YAML (kept in sync), see every problem the server finds as you type, preview what each
// instance will get, and submit. The YAML text is the one source of truth; forms are read from
// it and write into it.
import { useCallback, useEffect, useMemo, useReducer, useRef } from "react";
import { useNavigate, useSearchParams } from "react-router-dom";
import { useClient } from "urql";
import { isScalar } from "yaml";
import { describeProblem } from "../lib/errors";
import { variablesFromSearch } from "../marketplace/variables";
import { useSession } from "../session";
import { conversionNote, DIALECT_NAMES } from "./conversion";
import { clearDraft, loadDraft, saveDraft } from "./draft";
import { Editor, type EditorHandle, type Mark } from "./Editor";
import { EMPTY_JOB, readForm, type JobForm } from "./form";
import { JobFields, PrerequisitesForm, RolesForm, type Edit } from "./Forms";
import { parameterValues, ParametersForm } from "./Parameters";
import { Picker } from "./Picker";
import { Preview } from "./Preview";
import { initialState, submitReducer, type Problem } from "./submitState";
import { CloneConfigQuery, ConvertJobMutation, ResolveJobMutation, SubmitJobMutation, UseItemMutation } from "./SubmitPage.operations";
import { parse, placeOf, type Parsed } from "./yamlDoc";

/** How long typing must pause before the server checks the text. */
export const CHECK_DELAY_MS = 120;

/** The config as sent: the YAML with the secrets typed into password fields put in. */
function forServer(text: string, secrets: Record<string, string>): string {
  const given = Object.entries(secrets).filter(([, value]) => value !== "");
  if (given.length === 0) return text;
  const parsed = parse(text);
  if (parsed.syntax) return text;
  for (const [name, value] of given) parsed.doc.setIn(["secrets", name], value);
  return parsed.doc.toString();
}

function located(parsed: Parsed, problems: Problem[], severity: Mark["severity"]) {
  return problems.map((problem) => ({ problem, place: placeOf(parsed, problem.path), severity }));
}

export default function SubmitPage() {
  const { viewer } = useSession();
  const client = useClient();
  const navigate = useNavigate();
  const [search] = useSearchParams();
  const entry = {
    template: search.get("template"),
    version: search.get("version"),
    data: search.get("data"),
    clone: search.get("clone"),
    variables: variablesFromSearch(search),
  };
  const entryKey = JSON.stringify(entry);
  const hasEntry = !!(entry.template || entry.data || entry.clone);

  const [state, dispatch] = useReducer(submitReducer, null, () =>
    initialState(hasEntry ? null : loadDraft(viewer.id), hasEntry),
  );
  const { text, values, secretValues, madeFrom, note, loadError, notes, loading, check, refused } = state;
  const { submitting, converting, previewOpen } = state;
  const editor = useRef<EditorHandle | null>(null);

  const parsed = useMemo(() => parse(text), [text]);
  const form = useMemo(() => (parsed.syntax ? null : readForm(parsed.doc)), [parsed]);
  const sentParameters = useMemo(() => parameterValues(form?.parameters, values), [form?.parameters, values]);
  const secretNames = useMemo(
    () => (form?.secrets && typeof form.secrets === "object" ? Object.keys(form.secrets) : []),
    [form?.secrets],
  );

  const edit: Edit = useCallback((change: (form: JobForm) => void) => dispatch({ type: "formEdited", change }), []);
  const setText = useCallback((next: string) => dispatch({ type: "textEdited", text: next }), []);

  /** Show a config: one in the draft or v1 dialect converted to protocol v2 (the server's
   * conversion, which judges only the protocol: whether this cluster can run the job never
   * keeps it from the forms), saying so. A config the protocol cannot read is shown as it is,
   * its problems at their lines, with a button to convert it once they are fixed. */
  const show = useCallback(
    async (raw: string, from: string, fresh?: { madeFrom: string[] }) => {
      const answer = await client.mutation(ConvertJobMutation, { config: raw }).toPromise();
      const converted = answer.data?.convertJob;
      const failure = answer.error ? describeProblem(answer.error).message : undefined;
      dispatch({
        type: "configShown",
        text: converted?.config ?? raw,
        notes: converted?.config != null ? converted.notes : [],
        note: conversionNote(from, converted, failure),
        fresh,
      });
    },
    [client],
  );

  /** Show a config from somewhere else, starting over: no parameter values or secrets, and
   * made from the given marketplace items only. */
  const load = useCallback(
    async (raw: string, from: string, madeFrom: string[] = []) => {
      dispatch({ type: "loadStarted" });
      await show(raw, from, { madeFrom });
    },
    [show],
  );

  // entry addresses: a template, a data item, or another job's config
  const loadedEntry = useRef<string | null>(null);
  useEffect(() => {
    if (!hasEntry || loadedEntry.current === entryKey) return;
    loadedEntry.current = entryKey;
    const { template, version, data, clone, variables } = JSON.parse(entryKey) as typeof entry;
    void (async () => {
      dispatch({ type: "entryLoading" });
      try {
        if (clone) {
          const answer = await client.query(CloneConfigQuery, { id: clone }, { requestPolicy: "network-only" }).toPromise();
          if (answer.error) throw new Error(describeProblem(answer.error).message);
          const job = answer.data?.job;
          if (!job) throw new Error(`There is no job ${clone} that you may see.`);
          let config = job.config;
          const cloned = parse(config);
          const masked = !cloned.syntax && isScalar(cloned.doc.get("secrets", true));
          if (masked) {
            cloned.doc.delete("secrets");
            config = cloned.doc.toString();
          }
          await load(config, `A copy of job ${job.name}${masked ? " (its secrets were masked: add them again)" : ""}`);
        } else {
          const id = (template ?? data) as string;
          const parameters = Object.keys(variables).length > 0 ? variables : null;
          const answer = await client.mutation(UseItemMutation, { id, version, parameters }).toPromise();
          if (answer.error) throw new Error(describeProblem(answer.error).message);
          const used = answer.data?.useMarketplaceItem;
          if (!used?.config) {
            const why = used?.errors.map((e) => e.message).join("; ") || "it cannot be used";
            throw new Error(`The marketplace item cannot be used: ${why}`);
          }
          const item = used.item;
          const usedItem = `${item?.type === "DATA" ? "the data " : ""}${item?.name} ${item?.version}`;
          const what = template ? `Template ${item?.name} ${item?.version}` : `A new job using ${usedItem}`;
          await load(used.config, what, [item?.id ?? id]);
        }
      } catch (error) {
        dispatch({ type: "loadFailed", message: error instanceof Error ? error.message : String(error) });
      } finally {
        dispatch({ type: "entryDone" });
      }
    })();
  }, [client, entryKey, hasEntry, load]);

  // the server checks the text (a dry run) shortly after typing pauses; older answers are dropped
  const asked = useRef(0);
  const secretsKey = JSON.stringify(secretValues);
  useEffect(() => {
    const number = ++asked.current;
    const checkNow = async () => {
      const sent = text;
      const local = parse(sent);
      if (local.syntax) {
        const message = `line ${local.syntax.line}: ${local.syntax.message}`;
        dispatch({ type: "checked", check: { text: sent, errors: [{ path: [], code: "yaml", message }], warnings: [], job: null } });
        return;
      }
      const secrets = JSON.parse(secretsKey) as Record<string, string>;
      const answer = await client
        .mutation(ResolveJobMutation, { config: forServer(sent, secrets), parameters: sentParameters, preview: previewOpen })
        .toPromise();
      if (number !== asked.current) return;
      if (answer.error) {
        const message = describeProblem(answer.error).message;
        dispatch({ type: "checked", check: { text: sent, errors: [{ path: [], code: "request", message }], warnings: [], job: null } });
        return;
      }
      const resolved = answer.data?.resolveJob;
      if (!resolved) {
        const message = "The server answered without a result.";
        dispatch({ type: "checked", check: { text: sent, errors: [{ path: [], code: "request", message }], warnings: [], job: null } });
        return;
      }
      dispatch({ type: "checked", check: { text: sent, errors: resolved.errors, warnings: resolved.warnings, job: resolved.job ?? null } });
    };
    // urql resolves a failed request into result.error instead of rejecting: nothing to catch
    const timer = setTimeout(() => void checkNow(), CHECK_DELAY_MS);
    return () => clearTimeout(timer);
  }, [client, text, sentParameters, secretsKey, previewOpen]);

  // the draft: kept a moment after each change, without secrets
  useEffect(() => {
    if (loading) return;
    const untouched = text === EMPTY_JOB && Object.values(values).every((value) => value === "");
    const timer = setTimeout(
      () => (untouched ? clearDraft(viewer.id) : saveDraft(viewer.id, { yaml: text, parameters: values, madeFrom }, secretNames)),
      200,
    );
    return () => clearTimeout(timer);
  }, [viewer.id, text, values, madeFrom, secretNames, loading]);

  const checked = check && check.text === text ? check : null;
  const checkedParsed = useMemo(() => (check ? parse(check.text) : null), [check]);
  const errors = useMemo(() => {
    if (!check || !checkedParsed) return [];
    const only = check.errors.length === 1 ? check.errors[0] : undefined;
    if (only?.code === "yaml" && checkedParsed.syntax) {
      const line = checkedParsed.syntax.line;
      const from = checkedParsed.lines.lineStarts[line - 1] ?? 0;
      return [{ problem: only, place: { line, from, to: from, exact: true }, severity: "error" as const }];
    }
    return located(checkedParsed, check.errors, "error");
  }, [check, checkedParsed]);
  const warnings = useMemo(() => (check && checkedParsed ? located(checkedParsed, check.warnings, "warning") : []), [check, checkedParsed]);
  const marks: Mark[] = useMemo(
    () =>
      [...errors, ...warnings].map(({ problem, place, severity }) => ({
        from: place.from,
        to: place.to,
        severity,
        message: `${problem.path.join(".") || "(document)"}: ${problem.message}`,
      })),
    [errors, warnings],
  );

  const submit = async () => {
    dispatch({ type: "submitStarted" });
    const sent = text;
    try {
      const answer = await client
        .mutation(SubmitJobMutation, { config: forServer(sent, secretValues), parameters: sentParameters, fromItems: madeFrom })
        .toPromise();
      if (answer.error) {
        dispatch({ type: "submitFailed", message: describeProblem(answer.error).message });
        return;
      }
      const outcome = answer.data?.submitJob;
      if (!outcome) {
        dispatch({ type: "submitFailed", message: "The server answered without a result." });
        return;
      }
      if (outcome.job) {
        clearDraft(viewer.id);
        // in-app navigation: nothing to wait for, and nothing that can fail
        void navigate(`/jobs/${encodeURIComponent(outcome.job.id)}`);
        return;
      }
      dispatch({ type: "submitRefused", text: sent, errors: outcome.errors });
    } finally {
      dispatch({ type: "submitDone" });
    }
  };

  const count = errors.length;
  return (
    <section className="submit" data-testid="submit-page">
      <h1>Submit a job</h1>
      <div className="actions sources">
        <label className="file">
          Import a file
          <input
            type="file"
            name="import"
            accept=".yaml,.yml,.json,application/json,application/yaml,text/yaml"
            onChange={(event) => {
              const file = event.target.files?.[0];
              event.target.value = "";
              if (!file) return;
              // a file that cannot be read is said so where a config that cannot be loaded is
              void file.text().then(
                (raw) => load(raw, `Imported ${file.name}`),
                (problem: unknown) => dispatch({ type: "loadFailed", message: `${file.name} cannot be read: ${String(problem)}` }),
              );
            }}
          />
        </label>
        <button type="button" onClick={() => dispatch({ type: "startedEmpty" })}>
          Start empty
        </button>
        <Picker
          type="JOB_TEMPLATE"
          label="a template"
          // in-app navigation: nothing to wait for, and nothing that can fail
          onPick={(_, item) => void navigate(`/submit?template=${encodeURIComponent(item.id)}`)}
        />
        <span className="muted">or clone a job from its page.</span>
      </div>
      {loading && <p className="muted">Loading…</p>}
      {loadError && (
        <p className="error" role="alert">
          {loadError}
        </p>
      )}
      {note && (
        <p className="note" data-testid="source-note">
          {note}
        </p>
      )}
      {notes.length > 0 && (
        <ul className="conversion-notes" data-testid="conversion-notes">
          {notes.map((converted, n) => (
            <li key={n}>
              {converted.path.length > 0 && <code>{converted.path.join(".")}</code>} {converted.message}
            </li>
          ))}
        </ul>
      )}
      <div className="submit-grid">
        <div className="forms">
          {form?.dialect === "v2" ? (
            <>
              <JobFields form={form} edit={edit} />
              <ParametersForm
                parameters={form.parameters}
                secrets={form.secrets}
                values={values}
                secretValues={secretValues}
                onValue={(name, value) => dispatch({ type: "valueTyped", name, value })}
                onSecret={(name, value) => dispatch({ type: "secretTyped", name, value })}
              />
              <PrerequisitesForm form={form} edit={edit} />
              <RolesForm form={form} edit={edit} notes={notes} />
            </>
          ) : form ? (
            <div className="note convert" data-testid="convert-note">
              <p>
                The forms edit protocol v2 jobs; this is {form.dialect === "unknown" ? "not a job config the page recognises" : `the ${DIALECT_NAMES[form.dialect]}`}. Convert it (its problems, if any, are listed at their lines in the editor), or edit the YAML.
              </p>
              <button
                type="button"
                data-testid="convert"
                disabled={converting}
                onClick={() => {
                  dispatch({ type: "convertStarted" });
                  // urql resolves a failed request into result.error instead of rejecting: nothing to catch
                  void show(text, "This job").finally(() => dispatch({ type: "convertDone" }));
                }}
              >
                Convert to protocol v2
              </button>
            </div>
          ) : (
            <p className="note">The YAML cannot be read (see the problem under the editor): the forms return once it can.</p>
          )}
        </div>
        <div className="yaml-side">
          <Editor value={text} onChange={setText} marks={marks} marksFor={check?.text ?? null} handle={editor} />
          <div className="problems" data-testid="problems" aria-live="polite">
            {!checked && <p className="muted">Checking…</p>}
            {checked && count === 0 && <p className="ok">No problems.</p>}
            {count > 0 && (
              <ol>
                {errors.map(({ problem, place }, n) => (
                  <li key={n} data-line={place.line} data-path={problem.path.join(".")} className="problem">
                    <button type="button" className="link" onClick={() => editor.current?.reveal(place.from)}>
                      line {place.line}
                    </button>{" "}
                    {problem.path.length > 0 && <code>{problem.path.join(".")}</code>} {problem.message}
                  </li>
                ))}
              </ol>
            )}
            {warnings.length > 0 && (
              <div className="warnings" data-testid="warnings">
                <h3>Warnings</h3>
                <ul>
                  {warnings.map(({ problem, place }, n) => (
                    <li key={n} data-line={place.line}>
                      line {place.line} {problem.path.length > 0 && <code>{problem.path.join(".")}</code>} {problem.message}
                    </li>
                  ))}
                </ul>
              </div>
            )}
          </div>
          <div className="actions">
            <button
              type="button"
              className="primary"
              disabled={submitting || loading}
              // urql resolves a failed request into result.error instead of rejecting: nothing to catch
              onClick={() => void submit()}
              data-testid="submit"
            >
              {count === 0 ? "Submit" : `Submit (${count} problem${count === 1 ? "" : "s"})`}
            </button>
            {refused && (
              <p className="error" role="alert">
                {refused}
              </p>
            )}
          </div>
          <Preview job={checked?.job ?? null} open={previewOpen} onToggle={(open) => dispatch({ type: "previewToggled", open })} />
        </div>
      </div>
    </section>
  );
}

