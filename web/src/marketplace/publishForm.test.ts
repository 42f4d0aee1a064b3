import { describe, expect, it } from "vitest";
import { errorsByField, splitLabels } from "./publishForm";

describe("publish errors at their fields", () => {
  it("puts each error where its path starts, and says where inside the content", () => {
    const found = errorsByField([
      { path: ["content", "taskRoles", "main", "resourcePerInstance", "cpu"], code: "min", message: "must be at least 1" },
      { path: ["content"], code: "yaml", message: "not YAML" },
      { path: ["tags", "1"], code: "label", message: "tags '' is not allowed" },
      { path: ["groups"], code: "required", message: "name a group" },
      { path: ["jobId"], code: "not-found", message: "no job" },
      { path: ["id"], code: "forbidden", message: "not yours" },
      { path: ["content", "name"], code: "name-taken", message: "bob has that name" },
      { path: ["name"], code: "pattern", message: "bad name" },
    ]);
    expect(found.name).toEqual(["bob has that name", "bad name"]);
    expect(found.content).toEqual(["taskRoles.main.resourcePerInstance.cpu: must be at least 1", "not YAML", "no job"]);
    expect(found.tags).toEqual(["tags '' is not allowed"]);
    expect(found.groups).toEqual(["name a group"]);
    expect(found.form).toEqual(["not yours"]);
  });

  it("reads comma-separated labels", () => {
    expect(splitLabels(" gpu, vision ,,nlp ")).toEqual(["gpu", "vision", "nlp"]);
    expect(splitLabels("  ")).toEqual([]);
  });
});
