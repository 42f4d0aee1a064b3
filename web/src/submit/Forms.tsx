// The job by form: its name, prerequisites and task roles. Each control shows what the YAML
// says and writes a change back through `edit`, which updates the YAML Document.
import type { FieldNote, JobForm, PrerequisiteForm, RoleForm, RoleField } from "./form";
import { commandRows, newRole, notesAt, PREREQUISITE_TYPES, renameRole } from "./form";
import { StartOrderFields } from "./StartOrderFields";
import { localName, referenceEntry, referenceList, takenNames } from "../marketplace/variables";
import { Picker, ReferenceDetails, type PickerItem } from "./Picker";
import { HdfsBrowser, lastSegment } from "./HdfsBrowser";

export type Edit = (change: (form: JobForm) => void) => void;

/** What an input shows for a YAML value. */
export function shown(value: unknown): string {
  if (value === undefined || value === null) return "";
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint") return String(value);
  return JSON.stringify(value);
}

/** A YAML mapping, as a record (the YAML is the user's: any value may be anything). */
function isRecord(value: unknown): value is Record<string, unknown> {
  return !!value && typeof value === "object" && !Array.isArray(value);
}

/** What a typed text means: nothing (remove the field), a number, or the text itself. */
export function typed(text: string, numeric = false): unknown {
  if (text.trim() === "") return undefined;
  if (numeric && /^-?\d+$/.test(text.trim())) return Number(text.trim());
  return text;
}

export function JobFields({ form, edit }: { form: JobForm; edit: Edit }) {
  return (
    <fieldset className="form-block">
      <legend>Job</legend>
      <label>
        Name
        <input name="job-name" value={shown(form.name)} onChange={(e) => edit((f) => void (f.name = typed(e.target.value)))} />
      </label>
      <label>
        Virtual cluster
        <input
          name="virtual-cluster"
          placeholder="default"
          value={shown(form.virtualCluster)}
          onChange={(e) => edit((f) => void (f.virtualCluster = typed(e.target.value)))}
        />
      </label>
      <label>
        Job retries
        <input
          name="job-retry-count"
          inputMode="numeric"
          placeholder="0"
          value={shown(form.jobRetryCount)}
          onChange={(e) => edit((f) => void (f.jobRetryCount = typed(e.target.value, true)))}
        />
      </label>
      <label className="wide">
        Description
        <input
          name="job-description"
          value={shown(form.description)}
          onChange={(e) => edit((f) => void (f.description = typed(e.target.value)))}
        />
      </label>
    </fieldset>
  );
}

const TYPE_TITLES: Record<string, string> = {
  dockerimage: "Docker images",
  data: "Data",
  script: "Scripts",
  output: "Outputs",
  storage: "Storages",
};

/** The job's own prerequisites, grouped by type, each editable; a new one per type. */
export function PrerequisitesForm({ form, edit }: { form: JobForm; edit: Edit }) {
  const list = form.prerequisites ?? [];
  const others = list.filter((p) => !PREREQUISITE_TYPES.includes(p.type as never));
  return (
    <fieldset className="form-block" data-testid="prerequisites-form">
      <legend>Prerequisites</legend>
      {PREREQUISITE_TYPES.map((type) => {
        const ofType = list.map((p, index) => [p, index] as const).filter(([p]) => p.type === type);
        return (
          <div key={type} className="prereq-group" data-prereq-type={type}>
            <h3>{TYPE_TITLES[type]}</h3>
            {ofType.map(([p, index]) => (
              <PrerequisiteRow key={index} prerequisite={p} index={index} edit={edit} />
            ))}
            <button
              type="button"
              onClick={() =>
                edit((f) => {
                  const taken = new Set((f.prerequisites ?? []).map((p) => p.name));
                  let n = 0;
                  while (taken.has(`${type}_${n}`)) n += 1;
                  f.prerequisites = [...(f.prerequisites ?? []), { origin: null, name: `${type}_${n}`, type, uri: type === "dockerimage" ? "" : [] }];
                })
              }
            >
              Add {type === "dockerimage" ? "docker image" : type}
            </button>
          </div>
        );
      })}
      {others.length > 0 && <p className="muted">Also: {others.map((p) => shown(p.name)).join(", ")} (edit them in the YAML).</p>}
    </fieldset>
  );
}

function PrerequisiteRow({ prerequisite, index, edit }: { prerequisite: PrerequisiteForm; index: number; edit: Edit }) {
  const set = (change: (p: PrerequisiteForm) => void) =>
    edit((f) => {
      const target = f.prerequisites?.[index];
      if (target) change(target);
    });
  const uriIsList = Array.isArray(prerequisite.uri);
  const uriText = uriIsList ? (prerequisite.uri as unknown[]).map(shown).join("\n") : shown(prerequisite.uri);
  /** A location picked on HDFS: one more line of a list, or the whole of a single URI. */
  const pickUri = (uri: string) =>
    set((p) => void (p.uri = Array.isArray(p.uri) ? [...(p.uri as unknown[]).filter((line) => shown(line) !== ""), uri] : uri));
  return (
    <div className="prereq-row" data-prereq={shown(prerequisite.name)}>
      <label>
        Name
        <input name="prereq-name" value={shown(prerequisite.name)} onChange={(e) => set((p) => void (p.name = typed(e.target.value)))} />
      </label>
      <label className="wide">
        {uriIsList ? "URIs (one a line)" : "URI"}
        {uriIsList ? (
          <textarea
            name="prereq-uri"
            rows={Math.max(1, (prerequisite.uri as unknown[]).length)}
            value={uriText}
            onChange={(e) => set((p) => void (p.uri = e.target.value.split("\n").filter((line, i, all) => line !== "" || i < all.length - 1)))}
          />
        ) : (
          <input name="prereq-uri" value={uriText} onChange={(e) => set((p) => void (p.uri = typed(e.target.value) ?? ""))} />
        )}
      </label>
      {prerequisite.type !== "dockerimage" && <HdfsBrowser label={`${shown(prerequisite.name)}'s URI`} onPick={pickUri} />}
      <button
        type="button"
        className="link"
        onClick={() => edit((f) => void (f.prerequisites = (f.prerequisites ?? []).filter((_, i) => i !== index)))}
      >
        Remove
      </button>
    </div>
  );
}

/** Every task role, and a button for one more. */
export function RolesForm({ form, edit, notes = [] }: { form: JobForm; edit: Edit; notes?: readonly FieldNote[] }) {
  const images = (form.prerequisites ?? []).filter((p) => p.type === "dockerimage").map((p) => shown(p.name));
  return (
    <fieldset className="form-block" data-testid="roles-form">
      <legend>Task roles</legend>
      <datalist id="job-images">
        {images.map((name) => (
          <option key={name} value={name} />
        ))}
      </datalist>
      {form.roles.map((role, index) => (
        <RoleFields key={index} role={role} index={index} form={form} edit={edit} notes={notes} />
      ))}
      <button type="button" onClick={() => edit((f) => void f.roles.push(newRole(f)))}>
        Add task role
      </button>
    </fieldset>
  );
}

/** What converting the job says about a field, shown beside it. */
function Notes({ notes, field }: { notes: readonly FieldNote[]; field: string }) {
  if (notes.length === 0) return null;
  return (
    <>
      {notes.map((note, n) => (
        <p key={n} className="field-note" data-note-for={field}>
          {note.message}
        </p>
      ))}
    </>
  );
}

/** The template variables an `extras.reference_prerequisites` entry gives its item, editable. */
function ReferenceVariables({ form, at, edit }: { form: JobForm; at: number; edit: Edit }) {
  const entry = referenceList(form.referencePrerequisites)[at];
  // the entry's shape is what the user wrote, whatever ReferencePrerequisite promises
  const required: unknown[] = Array.isArray(entry?.require) ? entry.require : [];
  return (
    <>
      {required.map((requirement, r) => {
        const given = isRecord(requirement) ? requirement : {};
        const values = isRecord(given.template_variables) ? given.template_variables : {};
        return (
          <fieldset key={r} className="variables-form" data-variables-for={entry?.name}>
            <legend>
              {entry?.name}: <code>{shown(given.name)}</code>
            </legend>
            {Object.entries(values).map(([name, value]) => (
              <label key={name}>
                <code>{name}</code>
                <input
                  aria-label={`Template variable ${name} of ${entry?.name}`}
                  value={shown(value)}
                  onChange={(e) =>
                    edit((f) => {
                      const list = referenceList(f.referencePrerequisites).map((item) => structuredClone(item));
                      const requires: unknown = list[at]?.require;
                      const target: unknown = Array.isArray(requires) ? requires[r] : undefined;
                      if (!isRecord(target)) return;
                      const old = isRecord(target.template_variables) ? target.template_variables : {};
                      target.template_variables = { ...old, [name]: e.target.value };
                      f.referencePrerequisites = list;
                    })
                  }
                />
              </label>
            ))}
          </fieldset>
        );
      })}
    </>
  );
}

function RoleFields({
  role,
  index,
  form,
  edit,
  notes,
}: {
  role: RoleForm;
  index: number;
  form: JobForm;
  edit: Edit;
  notes: readonly FieldNote[];
}) {
  const at = (...path: string[]) => notesAt(notes, ["taskRoles", role.name, ...path]);
  const set = (change: (r: RoleForm) => void) =>
    edit((f) => {
      const target = f.roles[index];
      if (target) change(target);
    });
  const number = (field: RoleField, label: string, placeholder?: string) => (
    <label>
      {label}
      <input
        name={field}
        inputMode="numeric"
        placeholder={placeholder}
        value={shown(role[field])}
        onChange={(e) => set((r) => void (r[field] = typed(e.target.value, true)))}
      />
    </label>
  );
  const text = (field: RoleField, label: string, list?: string) => (
    <label className="wide">
      {label}
      <input name={field} list={list} value={shown(role[field])} onChange={(e) => set((r) => void (r[field] = typed(e.target.value)))} />
    </label>
  );
  const commands = Array.isArray(role.commands) ? (role.commands as unknown[]) : [];
  const ports = role.ports && typeof role.ports === "object" && !Array.isArray(role.ports) ? (role.ports as Record<string, unknown>) : {};
  const extra = Array.isArray(role.prerequisites) ? (role.prerequisites as unknown[]) : [];
  const references = referenceList(form.referencePrerequisites);
  /** What picking an item does: its reference into the field; an item with template variables
   * is named by an `extras.reference_prerequisites` entry that gives them (seed 004's form),
   * and the role lists that entry's name among its prerequisites. */
  const pick =
    (field: "dockerImage" | "data" | "script" | "output" | "prerequisites") =>
    (reference: string, item: PickerItem, variables: Record<string, string> | null) =>
      edit((f) => {
        const target = f.roles[index];
        if (!target) return;
        const listed = Array.isArray(target.prerequisites) ? (target.prerequisites as unknown[]) : [];
        if (variables) {
          const local = localName(item.name, takenNames(f.prerequisites, f.referencePrerequisites));
          f.referencePrerequisites = [...referenceList(f.referencePrerequisites), referenceEntry(local, item.name, variables)];
          target.prerequisites = [...listed, local];
        } else if (field === "prerequisites") {
          target.prerequisites = [...listed, reference];
        } else {
          target[field] = reference;
        }
      });
  /** What picking a location on HDFS does: a prerequisite of that type with that URI, named
   * after its last segment, which the role's field names. A storage goes in the role's
   * `output`, which is how protocol v2 mounts one (a draft job's `storage` converts to it). */
  const pickHdfs = (type: "data" | "script" | "output" | "storage") => (uri: string) =>
    edit((f) => {
      const target = f.roles[index];
      if (!target) return;
      const name = localName(lastSegment(uri) || type, takenNames(f.prerequisites, f.referencePrerequisites));
      f.prerequisites = [...(f.prerequisites ?? []), { origin: null, name, type, uri: [uri] }];
      target[type === "storage" ? "output" : type] = name;
    });
  return (
    <section className="role-form" data-role-form={role.name} aria-label={`Task role ${role.name}`}>
      <div className="row">
        <label>
          Role name
          <input name="role-name" value={role.name} onChange={(e) => edit((f) => renameRole(f, index, e.target.value))} />
        </label>
        {number("instances", "Instances", "1")}
        {number("cpu", "CPU")}
        {number("memoryMB", "Memory (MB)")}
        {number("gpu", "GPU")}
        <button type="button" className="link danger-link" onClick={() => edit((f) => void f.roles.splice(index, 1))}>
          Delete role {role.name}
        </button>
      </div>
      <Notes notes={at("instances")} field="instances" />
      <div className="row">
        {number("minFailed", "Fail after (minFailedInstances)", "1")}
        {number("minSucceeded", "Succeed after (minSucceededInstances)", "all")}
        {number("taskRetryCount", "Task retries", "0")}
      </div>
      <div className="row">
        {text("dockerImage", "Docker image", "job-images")}
        <Picker type="DOCKERIMAGE" label="a docker image" onPick={pick("dockerImage")} />
      </div>
      <ReferenceDetails reference={role.dockerImage} type="DOCKERIMAGE" />
      <div className="row">
        {text("data", "Data")}
        <Picker type="DATA" label="a data set" onPick={pick("data")} />
        <HdfsBrowser label="a data set" onPick={pickHdfs("data")} />
      </div>
      <ReferenceDetails reference={role.data} type="DATA" />
      <div className="row">
        {text("script", "Script")}
        <Picker type="SCRIPT" label="a script" onPick={pick("script")} />
        <HdfsBrowser label="a script" onPick={pickHdfs("script")} />
      </div>
      <ReferenceDetails reference={role.script} type="SCRIPT" />
      <div className="row">
        {text("output", "Output")}
        <Picker type="OUTPUT" label="an output" onPick={pick("output")} />
        <HdfsBrowser label="an output" onPick={pickHdfs("output")} />
      </div>
      <ReferenceDetails reference={role.output} type="OUTPUT" />
      <div className="sub">
        <h4>Storages and other prerequisites of the role</h4>
        {extra.map((entry, n) => {
          const used = references.findIndex((reference) => reference.name === entry);
          return (
            <div key={n} className="role-prerequisite">
              <div className="row">
                <input
                  aria-label={`Role prerequisite ${n + 1}`}
                  value={shown(entry)}
                  onChange={(e) => set((r) => void (r.prerequisites = extra.map((old, i) => (i === n ? e.target.value : old))))}
                />
                <button type="button" className="link" onClick={() => set((r) => void (r.prerequisites = extra.filter((_, i) => i !== n)))}>
                  Remove
                </button>
                <ReferenceDetails reference={entry} type="STORAGE" />
              </div>
              {used >= 0 && <ReferenceVariables form={form} at={used} edit={edit} />}
            </div>
          );
        })}
        <Picker type="STORAGE" label="a storage" onPick={pick("prerequisites")} />
        {/* a dataset or hook written as a runtime plugin without a `type` (seed 004's mnist) */}
        <Picker type="PLUGIN" label="a plugin (a dataset or hook)" onPick={pick("prerequisites")} />
        <HdfsBrowser label="a storage" onPick={pickHdfs("storage")} />
      </div>
      <div className="sub">
        <h4>Ports</h4>
        {Object.entries(ports).map(([label, count], n) => (
          <div key={n} className="row">
            <input
              aria-label={`Port label ${n + 1}`}
              value={label}
              onChange={(e) => set((r) => void (r.ports = Object.fromEntries(Object.entries(ports).map(([l, c]) => (l === label ? [e.target.value, c] : [l, c])))))}
            />
            <input
              aria-label={`Port count ${n + 1}`}
              inputMode="numeric"
              value={shown(count)}
              onChange={(e) => set((r) => void (r.ports = { ...ports, [label]: typed(e.target.value, true) ?? 1 }))}
            />
            <button
              type="button"
              className="link"
              onClick={() =>
                set((r) => {
                  const rest = Object.fromEntries(Object.entries(ports).filter(([l]) => l !== label));
                  r.ports = Object.keys(rest).length > 0 ? rest : undefined;
                })
              }
            >
              Remove
            </button>
          </div>
        ))}
        <button
          type="button"
          onClick={() =>
            set((r) => {
              let n = Object.keys(ports).length;
              while (`port${n}` in ports) n += 1;
              r.ports = { ...ports, [Object.keys(ports).length === 0 ? "http" : `port${n}`]: 1 };
            })
          }
        >
          Add port
        </button>
      </div>
      <div className="sub">
        <h4>Commands</h4>
        {commands.map((command, n) => (
          <div key={n} className="row">
            <textarea
              aria-label={`Command ${n + 1}`}
              rows={commandRows(shown(command))}
              value={shown(command)}
              onChange={(e) => set((r) => void (r.commands = commands.map((old, i) => (i === n ? e.target.value : old))))}
            />
            <button type="button" className="link" onClick={() => set((r) => void (r.commands = commands.filter((_, i) => i !== n)))}>
              Remove
            </button>
            <Notes notes={at("commands", String(n))} field={`commands.${n}`} />
          </div>
        ))}
        <button type="button" onClick={() => set((r) => void (r.commands = [...commands, ""]))}>
          Add command
        </button>
      </div>
      <StartOrderFields role={role} index={index} form={form} edit={edit} />
    </section>
  );
}
