// The Submit page's transitions: what each event keeps and what it starts over.
import { describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { EMPTY_JOB } from "./form";
import {
  DRAFT_RESTORED,
  initialState,
  refusalMessage,
  STARTED_EMPTY,
  submitReducer,
  type SubmitAction,
  type SubmitState,
} from "./submitState";

const JOB = `protocolVersion: 2
name: train
type: job
prerequisites:
  - name: image
    type: dockerimage
    uri: busybox
taskRoles:
  worker:
    instances: 1
    dockerImage: image
    commands:
      - echo hi
`;

const problem = (message: string) => ({ path: ["taskRoles", "worker"], code: "invalid", message });

function run(state: SubmitState, ...actions: SubmitAction[]): SubmitState {
  return actions.reduce(submitReducer, state);
}

/** A page that has been used: typed values and secrets, made from an item, refused once. */
function used(): SubmitState {
  return run(
    initialState({ yaml: JOB, parameters: { lr: "0.1" }, madeFrom: ["item-1"] }, false),
    { type: "secretTyped", name: "token", value: "s3cret" },
    { type: "checked", check: { text: JOB, errors: [], warnings: [problem("unused")], job: null } },
    { type: "submitStarted" },
    { type: "submitRefused", text: JOB, errors: [problem("too big")] },
    { type: "submitDone" },
  );
}

describe("initialState", () => {
  it("restores a draft's text, values and items, and says so", () => {
    const state = initialState({ yaml: JOB, parameters: { lr: "0.1" }, madeFrom: ["item-1"] }, false);
    expect(state).toMatchObject({ text: JOB, values: { lr: "0.1" }, madeFrom: ["item-1"], note: DRAFT_RESTORED });
    expect(state.loading).toBe(false);
  });

  it("starts from the empty job, loading, when the address names a config", () => {
    const state = initialState(null, true);
    expect(state).toMatchObject({ text: EMPTY_JOB, values: {}, madeFrom: [], note: null, loading: true });
  });
});

describe("submitReducer", () => {
  it("keeps earlier values when one more is typed", () => {
    const state = run(
      initialState(null, false),
      { type: "valueTyped", name: "lr", value: "0.1" },
      { type: "valueTyped", name: "epochs", value: "3" },
      { type: "valueTyped", name: "lr", value: "0.2" },
      { type: "secretTyped", name: "token", value: "x" },
    );
    expect(state.values).toEqual({ lr: "0.2", epochs: "3" });
    expect(state.secretValues).toEqual({ token: "x" });
  });

  it("does not change the state it is given", () => {
    const before = used();
    const copy = structuredClone(before);
    submitReducer(before, { type: "startedEmpty" });
    submitReducer(before, { type: "valueTyped", name: "lr", value: "9" });
    expect(before).toEqual(copy);
  });

  it("writes a form edit into the text and changes nothing else in it", () => {
    const state = submitReducer(initialState({ yaml: JOB, parameters: {} }, false), {
      type: "formEdited",
      change: (form) => {
        form.name = "renamed";
      },
    });
    const before = parseYaml(JOB) as Record<string, unknown>;
    expect(parseYaml(state.text)).toEqual({ ...before, name: "renamed" });
  });

  it("leaves a text that is not YAML alone on a form edit", () => {
    const broken = "name: [unclosed\n";
    const state = run(initialState(null, false), { type: "textEdited", text: broken }, {
      type: "formEdited",
      change: (form) => {
        form.name = "renamed";
      },
    });
    expect(state.text).toBe(broken);
  });

  it("starts empty: no values, secrets, items, notes or refusal", () => {
    const state = run(used(), {
      type: "configShown",
      text: JOB,
      notes: [problem("written as a value")],
      note: "Converted",
    }, { type: "startedEmpty" });
    expect(state).toMatchObject({
      text: EMPTY_JOB,
      values: {},
      secretValues: {},
      madeFrom: [],
      notes: [],
      refused: null,
      loadError: null,
      note: STARTED_EMPTY,
    });
  });

  it("a loaded config starts over with the items it was made from", () => {
    const state = run(used(), { type: "loadStarted" }, {
      type: "configShown",
      text: "name: other\n",
      notes: [],
      note: "Template other 1.0",
      fresh: { madeFrom: ["template-7"] },
    });
    expect(state).toMatchObject({
      text: "name: other\n",
      values: {},
      secretValues: {},
      madeFrom: ["template-7"],
      refused: null,
      note: "Template other 1.0",
    });
  });

  it("a converted config keeps what was typed and the items", () => {
    const state = run(
      used(),
      { type: "convertStarted" },
      { type: "configShown", text: JOB, notes: [problem("written as a value")], note: "This job, converted" },
    );
    expect(state).toMatchObject({ values: { lr: "0.1" }, secretValues: { token: "s3cret" }, madeFrom: ["item-1"] });
    expect(state.notes).toEqual([problem("written as a value")]);
    expect(state.converting).toBe(true);
    expect(submitReducer(state, { type: "convertDone" }).converting).toBe(false);
  });

  it("a failed entry shows why and stops loading", () => {
    const state = run(
      initialState(null, true),
      { type: "entryLoading" },
      { type: "loadFailed", message: "There is no job 9 that you may see." },
      { type: "entryDone" },
    );
    expect(state).toMatchObject({ loading: false, loadError: "There is no job 9 that you may see." });
    expect(run(state, { type: "loadStarted" }).loadError).toBeNull();
  });

  it("a refused submit lists its problems under the editor and keeps the warnings", () => {
    const state = used();
    expect(state.submitting).toBe(false);
    expect(state.refused).toBe(refusalMessage(1));
    expect(state.check).toEqual({ text: JOB, errors: [problem("too big")], warnings: [problem("unused")], job: null });
  });

  it("a new submit clears the last refusal while it runs", () => {
    const state = submitReducer(used(), { type: "submitStarted" });
    expect(state).toMatchObject({ submitting: true, refused: null });
    expect(submitReducer(state, { type: "submitFailed", message: "The server cannot be reached" }).refused).toBe(
      "The server cannot be reached",
    );
  });

  it("counts problems in words", () => {
    expect(refusalMessage(1)).toBe("The server refused the job: 1 problem (listed under the editor).");
    expect(refusalMessage(3)).toBe("The server refused the job: 3 problems (listed under the editor).");
  });

  it("opens and closes the preview", () => {
    const open = submitReducer(initialState(null, false), { type: "previewToggled", open: true });
    expect(open.previewOpen).toBe(true);
    expect(submitReducer(open, { type: "previewToggled", open: false }).previewOpen).toBe(false);
  });
});
