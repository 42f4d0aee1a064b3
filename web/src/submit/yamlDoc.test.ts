import { describe, expect, it } from "vitest";
import { parse, placeOf, writeIn } from "./yamlDoc";

const TEXT = `protocolVersion: 2
name: j
prerequisites:
  - name: box
    type: dockerimage
taskRoles:
  worker:
    instances: 2
    resourcePerInstance: {cpu: -1, memoryMB: 256}
    commands:
      - echo one
      - 3
`;

describe("placeOf", () => {
  const parsed = parse(TEXT);
  it("finds a field inside a flow map", () => {
    expect(placeOf(parsed, ["taskRoles", "worker", "resourcePerInstance", "cpu"])).toMatchObject({ line: 9, exact: true });
  });
  it("finds a list item", () => {
    expect(placeOf(parsed, ["taskRoles", "worker", "commands", "1"])).toMatchObject({ line: 12, exact: true });
  });
  it("puts a missing field at its parent", () => {
    expect(placeOf(parsed, ["prerequisites", "0", "uri"])).toMatchObject({ line: 4, exact: false });
    expect(placeOf(parsed, ["taskRoles", "worker", "resourcePerInstance", "gpu"])).toMatchObject({ line: 9, exact: false });
  });
  it("falls back to line 1 when nothing of the path is written", () => {
    expect(placeOf(parsed, ["type"])).toMatchObject({ line: 1, exact: false });
  });
  it("reports a syntax error with its line", () => {
    expect(parse("a: 1\nb: [\n").syntax?.line).toBeGreaterThan(1);
  });
});

describe("writeIn", () => {
  it("keeps a scalar's comment when its value changes", () => {
    const parsed = parse("a: 1 # one\n");
    writeIn(parsed.doc, ["a"], 2);
    expect(parsed.doc.toString()).toBe("a: 2 # one\n");
  });
  it("writes what it adds to an empty flow map in block style", () => {
    const parsed = parse("t: {}\n");
    writeIn(parsed.doc, ["t", "r"], { i: 1 });
    expect(parsed.doc.toString()).toBe("t:\n  r:\n    i: 1\n");
  });
});
