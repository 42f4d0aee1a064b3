import { describe, expect, it } from "vitest";
import { idReference, nameReference, useLink } from "./references";

describe("item references and the Use link", () => {
  it("names an item by name, pinned or not, and by ID", () => {
    expect(nameReference("mnist")).toBe("marketplace://name/mnist");
    expect(nameReference("mnist", "2")).toBe("marketplace://name/mnist@2");
    expect(idReference("TWFy")).toBe("marketplace://prerequisites/itemId/TWFy");
  });

  it("sends a template with its version and a dataset alone to the Submit page", () => {
    expect(useLink("JOB_TEMPLATE", "a=b", "1.0")).toBe("/submit?template=a%3Db&version=1.0");
    expect(useLink("DATA", "x", "3")).toBe("/submit?data=x");
    expect(useLink("DOCKERIMAGE", "x", "3")).toBeNull();
    // seed 004's datasets are written without a type: plugin items start a new job too
    expect(useLink("PLUGIN", "x", "3", { dataPath: "/d" })).toBe("/submit?data=x&var.dataPath=%2Fd");
  });

  it("hands a dataset's template variable values to the Submit page", () => {
    expect(useLink("DATA", "x", "3", { dataPath: "/dataset/mnist" })).toBe("/submit?data=x&var.dataPath=%2Fdataset%2Fmnist");
  });
});
