// The form model against real configs: reading a job into the forms and writing the forms back
// must not change what the YAML means, and a form edit must change only what it edits.
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { applyForm, EMPTY_JOB, newRole, readForm } from "./form";
import { parse } from "./yamlDoc";

const REPO = resolve(import.meta.dirname, "../../..");
const EXAMPLES = join(REPO, "examples");
const CORPUS = resolve(REPO, "../shared/corpus");

function yamlFiles(folder: string): string[] {
  return readdirSync(folder).flatMap((name) => {
    const path = join(folder, name);
    if (statSync(path).isDirectory()) return yamlFiles(path);
    return /\.ya?ml$/.test(name) ? [path] : [];
  });
}

/** Corpus files INDEX.md calls accepted (VALID, or v1 VALID), top level only. */
function acceptedCorpus(): string[] {
  const index = readFileSync(join(CORPUS, "INDEX.md"), "utf-8");
  const row = /^\| `([^`]+)` \|[^|]*\|[^|]*\|[^|]*\|([^|]*)\|/;
  return index
    .split("\n")
    .map((line) => row.exec(line))
    .filter((match): match is RegExpExecArray => match !== null)
    .filter((match) => !match[1]!.includes("/") && match[2]!.trim().replace(/^v1 /, "").startsWith("VALID"))
    .map((match) => join(CORPUS, match[1]!));
}

function roundTrip(text: string): { before: unknown; after: unknown; output: string } {
  const parsed = parse(text);
  const form = readForm(parsed.doc);
  applyForm(parsed.doc, structuredClone(form));
  const output = parsed.doc.toString();
  return { before: parseYaml(text), after: parseYaml(output), output };
}

describe("round trip through the form model", () => {
  const examples = yamlFiles(EXAMPLES);
  it("finds the examples", () => expect(examples.length).toBeGreaterThan(5));
  it.each(examples.map((path) => [path.slice(REPO.length + 1), path]))("%s", (_, path) => {
    const { before, after } = roundTrip(readFileSync(path, "utf-8"));
    expect(after).toEqual(before);
  });

  const corpus = existsSync(join(CORPUS, "INDEX.md")) ? acceptedCorpus() : [];
  if (corpus.length === 0) it.skip(`../shared/corpus is missing (looked in ${CORPUS}): no corpus round trips`);
  it.each(corpus.map((path) => [path.slice(CORPUS.length + 1), path]))("corpus %s", (_, path) => {
    const { before, after } = roundTrip(readFileSync(path, "utf-8"));
    expect(after).toEqual(before);
  });
});

const PS_WORKER = readFileSync(join(EXAMPLES, "ps-worker.yaml"), "utf-8");

describe("form edits", () => {
  it("reads roles, resources, commands and prerequisites", () => {
    const form = readForm(parse(PS_WORKER).doc);
    expect(form.dialect).toBe("v2");
    expect(form.roles.map((role) => role.name)).toEqual(["ps_server", "worker"]);
    expect(form.roles[1]).toMatchObject({ instances: 2, cpu: 1, memoryMB: 256, gpu: 0, dockerImage: "busybox" });
    expect(form.prerequisites?.[0]).toMatchObject({ name: "busybox", type: "dockerimage", uri: "paigraph/busybox:test" });
    expect(form.parameters).toEqual({ model: "resnet20", batchsize: 32 });
  });

  it("changes one field and keeps the comments", () => {
    const parsed = parse(PS_WORKER);
    const form = readForm(parsed.doc);
    form.roles[1]!.cpu = 2;
    applyForm(parsed.doc, form);
    const output = parsed.doc.toString();
    expect(output).toContain("# A parameter server and its workers");
    const before = parseYaml(PS_WORKER) as { taskRoles: { worker: { resourcePerInstance: { cpu: number } } } };
    before.taskRoles.worker.resourcePerInstance.cpu = 2;
    expect(parseYaml(output)).toEqual(before);
  });

  it("renames, deletes and adds roles, keeping the others as they were", () => {
    const parsed = parse(PS_WORKER);
    const form = readForm(parsed.doc);
    form.roles[0]!.name = "ps";
    form.roles.splice(1, 1);
    form.roles.push({ ...newRole(form), name: "tail", commands: ["echo done"] });
    applyForm(parsed.doc, form);
    const after = parseYaml(parsed.doc.toString()) as { taskRoles: { ps: unknown; tail: unknown } };
    const before = parseYaml(PS_WORKER) as { taskRoles: { ps_server: unknown } };
    expect(Object.keys(after.taskRoles)).toEqual(["ps", "tail"]);
    expect(after.taskRoles.ps).toEqual(before.taskRoles.ps_server);
    expect(after.taskRoles.tail).toEqual({
      instances: 1,
      resourcePerInstance: { cpu: 1, memoryMB: 256, gpu: 0 },
      commands: ["echo done"],
      dockerImage: "busybox",
    });
  });

  it("builds a two-role job from the empty one in block style", () => {
    const parsed = parse(EMPTY_JOB);
    const form = readForm(parsed.doc);
    form.prerequisites = [{ origin: null, name: "box", type: "dockerimage", uri: "paigraph/busybox:test" }];
    form.roles.push(newRole(form));
    form.roles.push({ ...newRole(form), instances: 2, ports: { http: 1 } });
    applyForm(parsed.doc, form);
    const output = parsed.doc.toString();
    expect(output).not.toContain("{");
    const job = parseYaml(output) as { prerequisites: unknown; taskRoles: { taskrole2: { resourcePerInstance: unknown } } };
    expect(job.prerequisites).toEqual([{ name: "box", type: "dockerimage", uri: "paigraph/busybox:test" }]);
    expect(Object.keys(job.taskRoles)).toEqual(["taskrole", "taskrole2"]);
    expect(job.taskRoles.taskrole2.resourcePerInstance).toEqual({ cpu: 1, memoryMB: 256, gpu: 0, ports: { http: 1 } });
  });

  it("removes a prerequisite from the middle and keeps the rest with their comments", () => {
    const text = "protocolVersion: 2\nname: j\ntype: job\nprerequisites:\n  - name: a # first\n    type: data\n    uri: [x]\n  - name: b\n    type: data\n    uri: [y]\n  - name: c # third\n    type: script\n    uri: [z]\n    extra: kept\ntaskRoles: {}\n";
    const parsed = parse(text);
    const form = readForm(parsed.doc);
    form.prerequisites!.splice(1, 1);
    applyForm(parsed.doc, form);
    const output = parsed.doc.toString();
    expect(output).toContain("# third");
    const { prerequisites } = parseYaml(output) as { prerequisites: { name: string; extra?: string }[] };
    expect(prerequisites.map((p) => p.name)).toEqual(["a", "c"]);
    expect(prerequisites[1]!.extra).toBe("kept");
  });

  it("leaves other dialects alone", () => {
    const draft = readFileSync(join(EXAMPLES, "dialects/counting.draft.yaml"), "utf-8");
    const parsed = parse(draft);
    expect(readForm(parsed.doc).dialect).toBe("draft");
    const v1 = parse(readFileSync(join(EXAMPLES, "dialects/counting.v1.json"), "utf-8"));
    expect(readForm(v1.doc).dialect).toBe("v1");
  });
});
