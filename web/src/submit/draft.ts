// A job being composed survives a reload: its YAML and parameter values are kept in the
// browser per signed-in user. Secrets never are: their values are blanked before saving.
import { isMap, isScalar } from "yaml";
import { parse } from "./yamlDoc";

export interface Draft {
  yaml: string;
  parameters: Record<string, string>;
  madeFrom?: string[]; // the marketplace items it was made from
}

const key = (userId: string) => `paigraph.submit.draft.${userId}`;

/** The YAML with the value of every top-level secret replaced by "". */
export function withoutSecrets(yaml: string): string {
  const parsed = parse(yaml);
  const secrets = parsed.doc.get("secrets", true);
  if (parsed.syntax) {
    // not YAML: blank the whole top-level block, as the server masks a stored config
    return `${yaml}\nZ`.replace(/^secrets[ \t]*:[\s\S]*?(?=^[^\s#])/m, 'secrets: ""\n').slice(0, -2);
  }
  if (isMap(secrets)) {
    for (const pair of secrets.items) {
      pair.value = isScalar(pair.value) && pair.value.value === "" ? pair.value : parsed.doc.createNode("");
    }
    return parsed.doc.toString();
  }
  if (secrets !== undefined && !(isScalar(secrets) && (secrets.value === "" || secrets.value === null))) {
    parsed.doc.set("secrets", "");
    return parsed.doc.toString();
  }
  return yaml;
}

export function saveDraft(userId: string, draft: Draft, secretNames: readonly string[]): void {
  const parameters = Object.fromEntries(Object.entries(draft.parameters).filter(([name]) => !secretNames.includes(name)));
  try {
    localStorage.setItem(key(userId), JSON.stringify({ yaml: withoutSecrets(draft.yaml), parameters, madeFrom: draft.madeFrom ?? [] }));
  } catch {
    // a full or disabled storage only costs the draft
  }
}

export function loadDraft(userId: string): Draft | null {
  try {
    const stored = localStorage.getItem(key(userId));
    if (!stored) return null;
    const draft = JSON.parse(stored) as Partial<Draft>;
    if (typeof draft.yaml !== "string") return null;
    const madeFrom = Array.isArray(draft.madeFrom) ? draft.madeFrom.filter((id): id is string => typeof id === "string") : [];
    return { yaml: draft.yaml, parameters: draft.parameters ?? {}, madeFrom };
  } catch {
    return null;
  }
}

export function clearDraft(userId: string): void {
  try {
    localStorage.removeItem(key(userId));
  } catch {
    // nothing kept, nothing to clear
  }
}
