// The forms' view of a protocol v2 job, read from and written back into the YAML Document.
// Fields hold the YAML's own values (unknown: a number may be a string someone typed) and are
// undefined when the YAML does not write them; writing back changes only what differs, so
// comments, unknown fields and the author's layout survive every form edit.
import { isMap, isScalar, isSeq, type Document, type Pair } from "yaml";
import { sameValue, valueAt, writeIn } from "./yamlDoc";

export type Dialect = "v2" | "draft" | "v1" | "unknown";

/** Role fields the forms edit, and where each lives under the role. */
export const ROLE_FIELDS = {
  instances: ["instances"],
  cpu: ["resourcePerInstance", "cpu"],
  memoryMB: ["resourcePerInstance", "memoryMB"],
  gpu: ["resourcePerInstance", "gpu"],
  ports: ["resourcePerInstance", "ports"],
  commands: ["commands"],
  minFailed: ["completion", "minFailedInstances"],
  minSucceeded: ["completion", "minSucceededInstances"],
  taskRetryCount: ["taskRetryCount"],
  dockerImage: ["dockerImage"],
  data: ["data"],
  script: ["script"],
  output: ["output"],
  prerequisites: ["prerequisites"],
} as const;
export type RoleField = keyof typeof ROLE_FIELDS;

/** Where a role's start order lives: `extras.paigraph.taskRoles.<role>`, which OpenPAI's own
 * validator accepts (protocol v2 has no field for it). */
export const ORDER_BASE = ["extras", "paigraph", "taskRoles"] as const;
/** Start-order fields the forms edit, and where each lives under the role's entry there. */
export const ORDER_FIELDS = {
  dependsOn: ["dependsOn"],
  readiness: ["readiness"],
  dependencyTimeoutSeconds: ["dependencyTimeoutSeconds"],
} as const;
export type OrderField = keyof typeof ORDER_FIELDS;
export const DEPENDENCY_PHASES = ["running", "ready", "succeeded"] as const;

/** One entry of a role's `dependsOn`, as the form edits it. */
export interface StartAfter {
  role: string;
  when: string;
  /** undefined: all of that role's instances */
  instances?: unknown;
}

/** The role's `dependsOn` as entries the form can show (what is not a mapping is passed over). */
export function startAfterList(value: unknown): StartAfter[] {
  if (!Array.isArray(value)) return [];
  return value
    .filter((item): item is Record<string, unknown> => !!item && typeof item === "object" && !Array.isArray(item))
    .map((item) => ({
      role: typeof item.role === "string" ? item.role : "",
      when: typeof item.when === "string" ? item.when : "running",
      ...(item.instances !== undefined ? { instances: item.instances } : {}),
    }));
}

/** A role's `readiness` as the form edits it: a port label or a command (`sh -c <text>`). */
export interface ReadinessForm {
  kind: "none" | "port" | "command";
  port: string;
  command: string;
  periodSeconds?: unknown;
  timeoutSeconds?: unknown;
  failureThreshold?: unknown;
}

export function readinessForm(value: unknown): ReadinessForm {
  const out: ReadinessForm = { kind: "none", port: "", command: "" };
  if (!value || typeof value !== "object" || Array.isArray(value)) return out;
  const v = value as Record<string, unknown>;
  if (typeof v.port === "string") {
    out.kind = "port";
    out.port = v.port;
  } else if (Array.isArray(v.command)) {
    out.kind = "command";
    const words = v.command.map(String);
    out.command = words.length === 3 && words[0] === "sh" && words[1] === "-c" ? (words[2] ?? "") : words.join(" ");
  }
  for (const key of ["periodSeconds", "timeoutSeconds", "failureThreshold"] as const) {
    if (v[key] !== undefined) out[key] = v[key];
  }
  return out;
}

/** The `readiness` value for what the form says (undefined: no readiness check). */
export function readinessValue(form: ReadinessForm, previous?: unknown): unknown {
  if (form.kind === "none") return undefined;
  const out: Record<string, unknown> = {};
  if (form.kind === "port") out.port = form.port;
  else {
    // a command the YAML wrote as a list of its own words stays so while its text is the same
    const before = readinessForm(previous);
    const kept = before.kind === "command" && before.command === form.command && previous && typeof previous === "object";
    out.command = kept ? (previous as Record<string, unknown>).command : ["sh", "-c", form.command];
  }
  for (const key of ["periodSeconds", "timeoutSeconds", "failureThreshold"] as const) {
    if (form[key] !== undefined) out[key] = form[key];
  }
  return out;
}

export const PREREQUISITE_FIELDS = ["name", "type", "uri", "description"] as const;
export type PrerequisiteField = (typeof PREREQUISITE_FIELDS)[number];
export const PREREQUISITE_TYPES = ["dockerimage", "data", "script", "output", "storage"] as const;

/** Job fields the forms edit, and where each lives. */
export const JOB_FIELDS = {
  name: ["name"],
  description: ["description"],
  virtualCluster: ["defaults", "virtualCluster"],
  jobRetryCount: ["jobRetryCount"],
  parameters: ["parameters"],
  secrets: ["secrets"],
  // items used with template variables (seed 004): [{name, require: [{name, template_variables}]}]
  referencePrerequisites: ["extras", "reference_prerequisites"],
} as const;
export type JobField = keyof typeof JOB_FIELDS;

export type RoleForm = {
  /** The role's name in the YAML it was read from; null for a role the form added. */
  origin: string | null;
  name: string;
} & { [field in RoleField]?: unknown } & { [field in OrderField]?: unknown };

export type PrerequisiteForm = {
  /** Its index in the YAML's `prerequisites`; null for one the form added. */
  origin: number | null;
} & { [field in PrerequisiteField]?: unknown };

export type JobForm = {
  dialect: Dialect;
  /** undefined when the YAML has no `prerequisites` list (or something else there). */
  prerequisites: PrerequisiteForm[] | undefined;
  roles: RoleForm[];
} & { [field in JobField]?: unknown };

export function dialectOf(doc: Document): Dialect {
  const top = doc.contents;
  if (!isMap(top)) return "unknown";
  if (top.has("tasks") || top.has("protocol_version") || top.has("job")) return "draft";
  if (top.has("jobName") || isSeq(top.get("taskRoles", true))) return "v1";
  if (top.has("protocolVersion") || isMap(top.get("taskRoles", true))) return "v2";
  return "unknown";
}

function roleNames(doc: Document): string[] {
  const roles = doc.get("taskRoles", true);
  if (!isMap(roles)) return [];
  return roles.items.map((pair) => String((pair.key as { value?: unknown } | null)?.value ?? pair.key));
}

export function readForm(doc: Document): JobForm {
  const dialect = dialectOf(doc);
  const form: JobForm = { dialect, prerequisites: undefined, roles: [] };
  if (dialect !== "v2") return form;
  for (const [field, path] of Object.entries(JOB_FIELDS)) form[field as JobField] = valueAt(doc, path);
  const prerequisites = doc.get("prerequisites", true);
  if (isSeq(prerequisites)) {
    form.prerequisites = prerequisites.items.map((_, index) => {
      const item: PrerequisiteForm = { origin: index };
      for (const field of PREREQUISITE_FIELDS) item[field] = valueAt(doc, ["prerequisites", index, field]);
      return item;
    });
  }
  form.roles = roleNames(doc).map((name) => {
    const role: RoleForm = { origin: name, name };
    for (const [field, path] of Object.entries(ROLE_FIELDS)) {
      role[field as RoleField] = valueAt(doc, ["taskRoles", name, ...path]);
    }
    for (const [field, path] of Object.entries(ORDER_FIELDS)) {
      role[field as OrderField] = valueAt(doc, [...ORDER_BASE, name, ...path]);
    }
    return role;
  });
  return form;
}

/** Write the form into the Document: only what differs from what the Document says. */
export function applyForm(doc: Document, form: JobForm): void {
  if (form.dialect !== "v2" || dialectOf(doc) !== "v2") return;
  for (const [field, path] of Object.entries(JOB_FIELDS)) writeIn(doc, path, form[field as JobField]);
  applyPrerequisites(doc, form.prerequisites);
  applyRoles(doc, form.roles);
}

function applyPrerequisites(doc: Document, prerequisites: PrerequisiteForm[] | undefined): void {
  const seq = doc.get("prerequisites", true);
  // none left: no key at all, since the protocol refuses an empty list
  if (prerequisites === undefined || (prerequisites.length === 0 && isSeq(seq))) {
    if (isSeq(seq)) doc.delete("prerequisites");
    return;
  }
  if (prerequisites.length === 0) return;
  if (!isSeq(seq)) {
    writeIn(doc, ["prerequisites"], []);
    // a new list goes before the task roles, where the protocol's documents write it
    const top = doc.contents;
    if (isMap(top) && seq === undefined) {
      const keyOf = (pair: Pair) => (isScalar(pair.key) ? pair.key.value : pair.key);
      const at = top.items.findIndex((pair) => keyOf(pair) === "taskRoles");
      const added = top.items.findIndex((pair) => keyOf(pair) === "prerequisites");
      if (at >= 0 && added > at) top.items.splice(at, 0, ...top.items.splice(added, 1));
    }
  }
  const list = doc.get("prerequisites", true);
  if (!isSeq(list)) return;
  const kept = list.items;
  const unchanged =
    prerequisites.length === kept.length && prerequisites.every((item, index) => item.origin === index);
  if (!unchanged) {
    list.items = prerequisites.map((item) => (item.origin !== null && kept[item.origin] ? kept[item.origin] : doc.createNode({})));
    if (list.items.length > 0) list.flow = false;
  }
  prerequisites.forEach((item, index) => {
    for (const field of PREREQUISITE_FIELDS) writeIn(doc, ["prerequisites", index, field], item[field]);
  });
}

function applyRoles(doc: Document, roles: RoleForm[]): void {
  let map = doc.get("taskRoles", true);
  if (!isMap(map)) {
    if (roles.length === 0) return;
    writeIn(doc, ["taskRoles"], {});
    map = doc.get("taskRoles", true);
    if (!isMap(map)) return;
  }
  const pairs = new Map<string, Pair>();
  for (const pair of map.items) pairs.set(String((pair.key as { value?: unknown } | null)?.value ?? pair.key), pair);
  const order = roles.map((role) => role.origin);
  const unchanged = order.length === pairs.size && order.every((origin, index) => origin === [...pairs.keys()][index]);
  if (!unchanged || roles.some((role) => role.origin !== role.name)) {
    map.items = roles.map((role) => {
      const pair = role.origin !== null ? pairs.get(role.origin) : undefined;
      if (pair) {
        if (role.origin !== role.name) pair.key = doc.createNode(role.name);
        return pair;
      }
      return doc.createPair(role.name, {});
    });
    if (map.items.length > 0) map.flow = false;
  }
  for (const role of roles) {
    for (const [field, path] of Object.entries(ROLE_FIELDS)) {
      const value = role[field as RoleField];
      const where = ["taskRoles", role.name, ...path];
      if (!sameValue(valueAt(doc, where), value)) writeIn(doc, where, value);
    }
  }
  applyStartOrder(doc, roles, [...pairs.keys()]);
}

/** Write each role's start order under `extras.paigraph.taskRoles`: the entry of a role renamed
 * or deleted goes with it, and what is left empty there is removed. */
function applyStartOrder(doc: Document, roles: RoleForm[], before: string[]): void {
  const kept = new Set(roles.map((role) => role.name));
  for (const name of before) {
    if (!kept.has(name) && doc.hasIn([...ORDER_BASE, name])) doc.deleteIn([...ORDER_BASE, name]);
  }
  for (const role of roles) {
    for (const [field, path] of Object.entries(ORDER_FIELDS)) {
      const where = [...ORDER_BASE, role.name, ...path];
      const value = role[field as OrderField];
      if (value === undefined && !doc.hasIn([...ORDER_BASE, role.name])) continue;
      if (!sameValue(valueAt(doc, where), value)) writeIn(doc, where, value);
    }
    const entry = valueAt(doc, [...ORDER_BASE, role.name]);
    if (entry && typeof entry === "object" && Object.keys(entry).length === 0) doc.deleteIn([...ORDER_BASE, role.name]);
  }
  for (let depth: number = ORDER_BASE.length; depth > 0; depth -= 1) {
    const path = ORDER_BASE.slice(0, depth);
    const value = valueAt(doc, path);
    if (doc.hasIn(path) && value && typeof value === "object" && Object.keys(value).length === 0) doc.deleteIn(path);
    else break;
  }
}

/** Rename a role in the form, and in the other roles' `dependsOn` that name it. */
export function renameRole(form: JobForm, index: number, name: string): void {
  const role = form.roles[index];
  if (!role) return;
  const old = role.name;
  role.name = name;
  for (const other of form.roles) {
    const list = startAfterList(other.dependsOn);
    if (list.some((d) => d.role === old)) other.dependsOn = list.map((d) => (d.role === old ? { ...d, role: name } : d));
  }
}

/** A role the "Add task role" button makes: one instance of the job's first docker image. */
export function newRole(form: JobForm): RoleForm {
  const taken = new Set(form.roles.map((role) => role.name));
  let n = form.roles.length + 1;
  while (taken.has(`taskrole${n}`)) n += 1;
  const image = (form.prerequisites ?? []).find((p) => p.type === "dockerimage")?.name;
  return {
    origin: null,
    name: form.roles.length === 0 && !taken.has("taskrole") ? "taskrole" : `taskrole${n}`,
    instances: 1,
    dockerImage: typeof image === "string" ? image : undefined,
    cpu: 1,
    memoryMB: 256,
    gpu: 0,
    commands: [],
  };
}

/** The job a "Start empty" gives: valid but for its missing prerequisites and task role. */
export const EMPTY_JOB = `protocolVersion: 2
name: new-job
type: job
taskRoles: {}
`;

/** Something the page says about a field (e.g. what a conversion rendered), at its path. */
export interface FieldNote {
  path: readonly string[];
  message: string;
}

/** The notes about exactly the field at `path`. */
export function notesAt(notes: readonly FieldNote[], path: readonly string[]): FieldNote[] {
  return notes.filter((note) => note.path.length === path.length && note.path.every((segment, i) => segment === path[i]));
}

/** Rows a command box needs to show all of a command: its lines, long ones wrapped at about
 * `width` characters, at least two rows and at most twelve. */
export function commandRows(command: string, width = 64): number {
  const rows = command.split("\n").reduce((sum, line) => sum + Math.max(1, Math.ceil(line.length / width)), 0);
  return Math.min(12, Math.max(2, rows));
}
