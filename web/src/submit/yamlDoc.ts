// The YAML text of the Submit page as a `yaml` Document: where a problem's path is in the text,
// and edits that keep the author's comments and layout (block style for what the forms add).
import { isMap, isPair, isScalar, isSeq, LineCounter, parseDocument, type Document, type Node } from "yaml";

export interface Parsed {
  doc: Document;
  lines: LineCounter;
  /** The first syntax error, if the text is not YAML. */
  syntax: { message: string; line: number } | null;
}

export function parse(text: string): Parsed {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, keepSourceTokens: false, uniqueKeys: false });
  const first = doc.errors[0];
  const syntax = first ? { message: first.message.split("\n")[0] ?? first.message, line: first.linePos?.[0]?.line ?? 1 } : null;
  return { doc, lines, syntax };
}

/** Where a problem is: the line (1-based) and the character offsets of the node its path names.
 * A path to a field that is not written (e.g. a required one) points at the nearest written
 * ancestor, since that is where the field belongs; `exact` says whether the node itself exists. */
export interface Place {
  line: number;
  from: number;
  to: number;
  exact: boolean;
}

export function placeOf(parsed: Parsed, path: readonly string[]): Place {
  const { doc, lines } = parsed;
  let node: unknown = doc.contents;
  let best: [number, number] | null = null;
  let exact = true;
  for (const segment of path) {
    if (isMap(node)) {
      const pair = node.items.find((item) => isPair(item) && isScalar(item.key) && String(item.key.value) === segment);
      if (!pair) {
        exact = false;
        break;
      }
      const key = pair.key as Node;
      const value = pair.value as Node | null;
      // a scalar is marked with its key; a collection by its key alone, not its whole block
      if (key.range) best = [key.range[0], isScalar(value) && value.range ? value.range[1] : key.range[1]];
      node = pair.value;
    } else if (isSeq(node) && /^\d+$/.test(segment)) {
      const item = node.items[Number(segment)] as Node | undefined;
      if (!item) {
        exact = false;
        break;
      }
      if (item.range) best = [item.range[0], isScalar(item) ? item.range[1] : item.range[0] + 1];
      node = item;
    } else {
      exact = false;
      break;
    }
  }
  if (!best) return { line: 1, from: 0, to: 0, exact: path.length === 0 };
  const [from, to] = best;
  return { line: lines.linePos(from).line, from, to: Math.max(from, to), exact };
}

/** The plain value at `path` (undefined when absent). */
export function valueAt(doc: Document, path: readonly (string | number)[]): unknown {
  const found = path.length === 0 ? doc.contents : doc.getIn(path, true);
  if (found === undefined || found === null) return undefined;
  if (isScalar(found)) return found.value;
  return (found as { toJSON(): unknown }).toJSON();
}

/** Deep equality of plain YAML values (maps compared without regard to key order). */
export function sameValue(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => sameValue(x, b[i]));
  }
  if (a && b && typeof a === "object" && typeof b === "object") {
    const ka = Object.keys(a);
    const kb = Object.keys(b);
    return (
      ka.length === kb.length &&
      ka.every((k) => sameValue((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]))
    );
  }
  return false;
}

/** Make every empty flow collection on the way to `path` block-style, so that what a form adds
 * under `taskRoles: {}` is written as ordinary indented YAML. */
function blockOnTheWay(doc: Document, path: readonly (string | number)[]): void {
  let node: unknown = doc.contents;
  for (const segment of path) {
    if ((isMap(node) || isSeq(node)) && node.flow && node.items.length === 0) node.flow = false;
    if (!isMap(node) && !isSeq(node)) return;
    node = node.get(segment, true);
  }
  if ((isMap(node) || isSeq(node)) && node.flow && node.items.length === 0) node.flow = false;
}

/** Write `value` at `path` unless it is already what is there; undefined removes the field. */
export function writeIn(doc: Document, path: readonly (string | number)[], value: unknown): void {
  const current = valueAt(doc, path);
  if (value === undefined) {
    if (current !== undefined || doc.hasIn(path)) doc.deleteIn(path);
    return;
  }
  if (current !== undefined && sameValue(current, value)) return;
  blockOnTheWay(doc, path.slice(0, -1));
  const existing = doc.getIn(path, true);
  if (isScalar(existing) && typeof existing.value === typeof value && typeof value !== "object") {
    existing.value = value; // keeps the scalar's comment and quoting style
    return;
  }
  if (doc.contents === null) doc.contents = doc.createNode({}) as never;
  doc.setIn(path, doc.createNode(value));
}
