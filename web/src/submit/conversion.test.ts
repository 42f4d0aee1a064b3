// Opening a job of any dialect on the Submit page: the seed's draft job as its document writes
// it (read from the seed documents beside the repository, skipped when they are missing), the
// server's problems placed at their own lines of it, what the page says about a conversion, and
// the form edits the page relies on once the job is converted.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { conversionNote } from "./conversion";
import { applyForm, commandRows, EMPTY_JOB, notesAt, readForm } from "./form";
import { parse, placeOf } from "./yamlDoc";

const SEEDS = resolve(import.meta.dirname, "../../../../shared/seeds");

/** The ```yaml block of seed `prefix` that is the job called `name`, as the seed writes it. */
function seedJob(prefix: string, name: string): string | null {
  if (!existsSync(SEEDS)) return null;
  const file = readdirSync(SEEDS).find((entry) => entry.startsWith(`${prefix}_`));
  if (!file) return null;
  const text = readFileSync(join(SEEDS, file), "utf-8");
  const blocks = [...text.matchAll(/```yaml\n([\s\S]*?)```/g)].map((match) => match[1]!);
  return blocks.find((block) => new RegExp(`^name\\s*:\\s*${name}\\b`, "m").test(block)) ?? null;
}

function lineOf(text: string, needle: string, after = 0): number {
  const lines = text.split("\n");
  return lines.findIndex((line, n) => n >= after && line.includes(needle)) + 1;
}

describe("the seed's draft job, before it is converted", () => {
  const draft = seedJob("000", "tensorflow_cifar10");
  if (draft === null) {
    it.skip(`../shared/seeds is missing (looked in ${SEEDS}): no seed job to place problems in`);
    return;
  }
  const parsed = parse(draft);

  it("is recognised as the draft dialect, which the forms do not edit", () => {
    expect(readForm(parsed.doc).dialect).toBe("draft");
  });

  it("puts each problem the server finds at its own line, none at line 1", () => {
    const worker = lineOf(draft, "- role: worker");
    const psServer = lineOf(draft, "- role: ps_server");
    const gpu = placeOf(parsed, ["tasks", "0", "resource", "resourcePerInstance", "gpu"]);
    expect(gpu).toMatchObject({ line: lineOf(draft, "gpu: 4"), exact: true });
    expect(placeOf(parsed, ["tasks", "1"]).line).toBe(psServer);
    expect(placeOf(parsed, ["tasks", "0"]).line).toBe(worker);
    const storage = placeOf(parsed, ["prerequisites", "3", "uri", "0"]);
    expect(storage.line).toBe(lineOf(draft, "hdfs://"));
    expect(new Set([gpu.line, storage.line, worker, psServer]).size).toBe(4);
  });
});

describe("what the page says about a conversion", () => {
  it("names the dialect it converted from", () => {
    const said = conversionNote("Imported job.yaml", { config: "protocolVersion: 2\n", dialect: "draft", notes: [] });
    expect(said).toBe("Imported job.yaml: converted from the draft dialect (protocol_version, a tasks list) to protocol v2.");
  });
  it("counts what could not stay a template", () => {
    const notes = [{ path: ["taskRoles", "w", "instances"], message: "was parameter 'n'" }];
    expect(conversionNote("Template t 1.0.0", { config: "x", dialect: "draft", notes })).toContain("1 value could not stay as written");
  });
  it("says nothing of a conversion for a v2 job", () => {
    expect(conversionNote("Imported a.yaml", { config: "x", dialect: "v2", notes: [] })).toBe("Imported a.yaml.");
  });
  it("offers to convert a draft job once its problems are fixed, with no file needed", () => {
    const said = conversionNote("Imported b.yaml", { config: null, dialect: "draft", notes: [] });
    expect(said).toContain('press "Convert to protocol v2"');
    expect(said).not.toContain("import it again");
  });
});

describe("notes and command boxes", () => {
  it("finds the notes of exactly one field", () => {
    const notes = [
      { path: ["taskRoles", "w", "instances"], message: "a" },
      { path: ["taskRoles", "w", "commands", "0"], message: "b" },
      { path: ["taskRoles", "w"], message: "c" },
    ];
    expect(notesAt(notes, ["taskRoles", "w", "instances"]).map((n) => n.message)).toEqual(["a"]);
    expect(notesAt(notes, ["taskRoles", "x", "instances"])).toEqual([]);
  });
  it("gives a command at least two rows and a long one as many as it wraps to", () => {
    expect(commandRows("true")).toBe(2);
    expect(commandRows("x".repeat(200))).toBe(4);
    expect(commandRows("a\nb\nc")).toBe(3);
    expect(commandRows("x\n".repeat(100))).toBe(12);
  });
});

describe("prerequisites in the forms", () => {
  const JOB = `protocolVersion: 2
name: j
type: job
prerequisites:
  - name: box
    type: dockerimage
    uri: busybox
taskRoles:
  main:
    dockerImage: box
`;

  it("removes the key with the last prerequisite instead of leaving an empty list", () => {
    const parsed = parse(JOB);
    const form = readForm(parsed.doc);
    form.prerequisites = [];
    applyForm(parsed.doc, form);
    const written = parsed.doc.toString();
    expect(written).not.toContain("prerequisites");
    expect(parseYaml(written)).toEqual({ protocolVersion: 2, name: "j", type: "job", taskRoles: { main: { dockerImage: "box" } } });
  });

  it("starts an empty job without an empty list, and adds the first one before the task roles", () => {
    expect(parseYaml(EMPTY_JOB)).not.toHaveProperty("prerequisites");
    const parsed = parse(EMPTY_JOB);
    const form = readForm(parsed.doc);
    form.prerequisites = [{ origin: null, name: "box", type: "dockerimage", uri: "busybox" }];
    applyForm(parsed.doc, form);
    const written = parsed.doc.toString();
    expect(Object.keys(parseYaml(written) as object)).toEqual(["protocolVersion", "name", "type", "prerequisites", "taskRoles"]);
    expect((parseYaml(written) as { prerequisites: unknown }).prerequisites).toEqual([{ name: "box", type: "dockerimage", uri: "busybox" }]);
  });
});
