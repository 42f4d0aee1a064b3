// How a job names a marketplace item, and where "Use" takes an item.
import { VARIABLE_PREFIX } from "./variables";

/** `marketplace://name/<name>`, pinned to a version when one is given. */
export function nameReference(name: string, version?: string | null): string {
  return version ? `marketplace://name/${name}@${version}` : `marketplace://name/${name}`;
}

/** `marketplace://prerequisites/itemId/<id>`: the item at its latest version. */
export function idReference(id: string): string {
  return `marketplace://prerequisites/itemId/${id}`;
}

/** The Submit page pre-filled from the item, for the kinds it can start from, with the values
 * of its template variables; else null. A dataset written as a plugin prerequisite without a
 * `type` (seed 004's `mnist`, listed as a plugin) starts a new job as a data item does. */
export function useLink(type: string, id: string, version: string, variables: Record<string, string> = {}): string | null {
  if (type === "JOB_TEMPLATE") {
    return `/submit?${new URLSearchParams({ template: id, version }).toString()}`;
  }
  if (startsANewJob(type)) {
    const search = new URLSearchParams({ data: id });
    for (const [name, value] of Object.entries(variables)) search.set(`${VARIABLE_PREFIX}${name}`, value);
    return `/submit?${search.toString()}`;
  }
  return null;
}

/** Whether "Use" on an item of this type makes an empty job that requires it. */
export function startsANewJob(type: string): boolean {
  return type === "DATA" || type === "PLUGIN";
}
