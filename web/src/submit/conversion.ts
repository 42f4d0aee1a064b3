// What the Submit page says about a job it opened: the server converts a draft or v1 job to
// protocol v2 (convertJob) without judging whether this cluster can run it, so any job the
// protocol can read reaches the forms; what the conversion wrote as a value instead of a
// template comes back as notes at the converted job's paths.
import type { FieldNote } from "./form";

export const DIALECT_NAMES: Record<string, string> = {
  draft: "draft dialect (protocol_version, a tasks list)",
  v1: "OpenPAI v1 JSON",
  v2: "OpenPAI protocol v2",
};

export interface Converted {
  config?: string | null;
  dialect?: string | null;
  notes: readonly FieldNote[];
}

function plural(count: number, one: string, many: string): string {
  return `${count} ${count === 1 ? one : many}`;
}

/** The sentence shown above the forms once `from` (e.g. "Imported job.yaml") was opened;
 * `failure` says why the server could not be asked. */
export function conversionNote(from: string, converted: Converted | null | undefined, failure?: string): string {
  const why = failure ? ` It could not be converted: ${failure}` : "";
  const dialect = converted?.dialect ?? null;
  if (converted?.config != null) {
    if (dialect === null || dialect === "v2") return `${from}.`;
    const name = DIALECT_NAMES[dialect] ?? dialect;
    const count = converted.notes.length;
    const kept = count === 0 ? "" : ` ${plural(count, "value", "values")} could not stay as written (see the notes).`;
    return `${from}: converted from the ${name} to protocol v2.${kept}`;
  }
  if (dialect && dialect !== "v2") {
    const name = DIALECT_NAMES[dialect] ?? dialect;
    return `${from}: a config in the ${name} with problems that keep it from being read (listed at their lines); fix them in the editor and press "Convert to protocol v2".${why}`;
  }
  return `${from}.${why}`;
}
