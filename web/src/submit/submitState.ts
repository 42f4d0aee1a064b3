// The Submit page's state as one model and the events that change it: a pure reducer, so each
// transition (load a config, start empty, a check's answer, a refused submit) is one step that
// unit tests can take without a browser. The YAML text stays the one source of truth; the forms
// are read from it, and a form edit is a change to it.
import type { SubmitPageResolveMutation } from "../gql/graphql";
import type { Draft } from "./draft";
import { applyForm, EMPTY_JOB, readForm, type JobForm } from "./form";
import { parse } from "./yamlDoc";

export interface Problem {
  path: string[];
  code: string;
  message: string;
}

/** The server's (or the YAML parser's) verdict on one text. */
export interface Check {
  text: string;
  errors: Problem[];
  warnings: Problem[];
  job: SubmitPageResolveMutation["resolveJob"]["job"] | null;
}

export interface SubmitState {
  text: string;
  /** Parameter values typed into the parameters form, by name. */
  values: Record<string, string>;
  /** Secret values typed into password fields, by name: never saved, sent only with the config. */
  secretValues: Record<string, string>;
  /** The marketplace items the job was made from: its submit counts as theirs. */
  madeFrom: string[];
  /** Where the shown config came from (and whether it was converted), in words. */
  note: string | null;
  /** Why the config the address asked for (a template, data item or job) could not be loaded. */
  loadError: string | null;
  /** What converting the job wrote as a value instead of a template, at the v2 text's paths. */
  notes: Problem[];
  loading: boolean;
  check: Check | null;
  /** Why the last submit did not make a job. */
  refused: string | null;
  submitting: boolean;
  converting: boolean;
  previewOpen: boolean;
}

export type SubmitAction =
  | { type: "textEdited"; text: string }
  | { type: "formEdited"; change: (form: JobForm) => void }
  | { type: "valueTyped"; name: string; value: string }
  | { type: "secretTyped"; name: string; value: string }
  | { type: "previewToggled"; open: boolean }
  | { type: "startedEmpty" }
  | { type: "loadStarted" }
  | { type: "entryLoading" }
  | { type: "loadFailed"; message: string }
  | { type: "entryDone" }
  /** A config shown in place of the text; `fresh` starts over (no values, secrets or items). */
  | { type: "configShown"; text: string; notes: Problem[]; note: string; fresh?: { madeFrom: string[] } }
  | { type: "convertStarted" }
  | { type: "convertDone" }
  | { type: "checked"; check: Check }
  | { type: "submitStarted" }
  | { type: "submitFailed"; message: string }
  | { type: "submitRefused"; text: string; errors: Problem[] }
  | { type: "submitDone" };

export const STARTED_EMPTY = "Started an empty job: add a docker image and task roles.";
export const DRAFT_RESTORED = "Your draft was restored.";

/** The page's first state: the restored draft if there is one, else the empty job; `loading`
 * while the address names a config to load. */
export function initialState(draft: Draft | null, loading: boolean): SubmitState {
  return {
    text: draft?.yaml ?? EMPTY_JOB,
    values: draft?.parameters ?? {},
    secretValues: {},
    madeFrom: draft?.madeFrom ?? [],
    note: draft ? DRAFT_RESTORED : null,
    loadError: null,
    notes: [],
    loading,
    check: null,
    refused: null,
    submitting: false,
    converting: false,
    previewOpen: false,
  };
}

/** The text with one form edit applied; a text that is not YAML stays as it is. */
export function editedText(text: string, change: (form: JobForm) => void): string {
  const fresh = parse(text);
  if (fresh.syntax) return text;
  const form = readForm(fresh.doc);
  change(form);
  applyForm(fresh.doc, form);
  return fresh.doc.toString();
}

export function refusalMessage(problems: number): string {
  const noun = problems === 1 ? "problem" : "problems";
  return `The server refused the job: ${String(problems)} ${noun} (listed under the editor).`;
}

export function submitReducer(state: SubmitState, action: SubmitAction): SubmitState {
  switch (action.type) {
    case "textEdited":
      return { ...state, text: action.text };
    case "formEdited":
      return { ...state, text: editedText(state.text, action.change) };
    case "valueTyped":
      return { ...state, values: { ...state.values, [action.name]: action.value } };
    case "secretTyped":
      return { ...state, secretValues: { ...state.secretValues, [action.name]: action.value } };
    case "previewToggled":
      return { ...state, previewOpen: action.open };
    case "startedEmpty":
      return {
        ...state,
        text: EMPTY_JOB,
        values: {},
        secretValues: {},
        madeFrom: [],
        refused: null,
        loadError: null,
        notes: [],
        note: STARTED_EMPTY,
      };
    case "loadStarted":
      return { ...state, refused: null, loadError: null };
    case "entryLoading":
      return { ...state, loading: true };
    case "loadFailed":
      return { ...state, loadError: action.message };
    case "entryDone":
      return { ...state, loading: false };
    case "configShown": {
      const shown = { ...state, text: action.text, notes: action.notes, note: action.note };
      if (!action.fresh) return shown;
      return { ...shown, values: {}, secretValues: {}, madeFrom: action.fresh.madeFrom };
    }
    case "convertStarted":
      return { ...state, converting: true };
    case "convertDone":
      return { ...state, converting: false };
    case "checked":
      return { ...state, check: action.check };
    case "submitStarted":
      return { ...state, submitting: true, refused: null };
    case "submitFailed":
      return { ...state, refused: action.message };
    case "submitRefused":
      // the refusal's problems replace the last check's errors; its warnings still hold
      return {
        ...state,
        refused: refusalMessage(action.errors.length),
        check: { text: action.text, errors: action.errors, warnings: state.check?.warnings ?? [], job: null },
      };
    case "submitDone":
      return { ...state, submitting: false };
  }
}
