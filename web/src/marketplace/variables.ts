// Template variables of marketplace items: the values a use gives them, starting from the
// declared defaults, and the job YAML a use writes (seed 004's `extras.reference_prerequisites`).

export interface DeclaredVariable {
  name: string;
  default?: string | null;
}

/** The values a form starts from: each declared default, else empty. */
export function initialValues(declared: readonly DeclaredVariable[]): Record<string, string> {
  return Object.fromEntries(declared.map((variable) => [variable.name, variable.default ?? ""]));
}

/** The declared variables still without a value. */
export function missingValues(declared: readonly DeclaredVariable[], values: Record<string, string>): string[] {
  return declared.filter((variable) => (values[variable.name] ?? "").trim() === "").map((variable) => variable.name);
}

/** `marketplace://name/<name>`: how seed 004 requires an item. */
export function requireReference(name: string): string {
  return `marketplace://name/${name}`;
}

/** The item's name as a name of the job's own (letters, digits, _ and -). */
export function localName(itemName: string, taken: ReadonlySet<string>): string {
  const base = itemName.replace(/[^A-Za-z0-9_-]+/g, "_").replace(/^_+|_+$/g, "") || "item";
  if (!taken.has(base)) return base;
  let n = 2;
  while (taken.has(`${base}_${n}`)) n += 1;
  return `${base}_${n}`;
}

export interface ReferencePrerequisite {
  name: string;
  require: { name: string; template_variables: Record<string, string> }[];
}

/** One `extras.reference_prerequisites` entry, as seed 004 writes it. */
export function referenceEntry(local: string, itemName: string, values: Record<string, string>): ReferencePrerequisite {
  return { name: local, require: [{ name: requireReference(itemName), template_variables: { ...values } }] };
}

/** `extras.reference_prerequisites` as a list of entries (anything else: none). */
export function referenceList(value: unknown): ReferencePrerequisite[] {
  return Array.isArray(value) ? (value.filter((entry) => entry && typeof entry === "object") as ReferencePrerequisite[]) : [];
}

/** The names the job already uses for prerequisites: its own and its reference entries'. */
export function takenNames(prerequisites: readonly { name?: unknown }[] | undefined, references: unknown): Set<string> {
  const names = new Set<string>();
  for (const p of prerequisites ?? []) if (typeof p.name === "string") names.add(p.name);
  for (const entry of referenceList(references)) if (typeof entry.name === "string") names.add(entry.name);
  return names;
}

/** Query-string parameters that hand template variable values to the Submit page. */
export const VARIABLE_PREFIX = "var.";

export function variablesFromSearch(search: URLSearchParams): Record<string, string> {
  const values: Record<string, string> = {};
  search.forEach((value, key) => {
    if (key.startsWith(VARIABLE_PREFIX)) values[key.slice(VARIABLE_PREFIX.length)] = value;
  });
  return values;
}
