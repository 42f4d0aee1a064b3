import { describe, expect, it } from "vitest";
import {
  initialValues,
  localName,
  missingValues,
  referenceEntry,
  referenceList,
  takenNames,
  variablesFromSearch,
} from "./variables";

describe("template variables of an item in use", () => {
  it("starts from the declared defaults and asks for the rest", () => {
    const declared = [{ name: "dataPath", default: "/dataset/mnist" }, { name: "min" }];
    const values = initialValues(declared);
    expect(values).toEqual({ dataPath: "/dataset/mnist", min: "" });
    expect(missingValues(declared, values)).toEqual(["min"]);
    expect(missingValues(declared, { ...values, min: " 30 " })).toEqual([]);
  });

  it("writes seed 004's reference_prerequisites entry", () => {
    expect(referenceEntry("mnist", "mnist", { dataPath: "/dataset/mnist" })).toEqual({
      name: "mnist",
      require: [{ name: "marketplace://name/mnist", template_variables: { dataPath: "/dataset/mnist" } }],
    });
  });

  it("names the entry after the item, apart from names the job uses", () => {
    const taken = takenNames([{ name: "docker_image_0" }, { name: "mnist" }], [{ name: "mnist_2", require: [] }]);
    expect(localName("mnist", taken)).toBe("mnist_3");
    expect(localName("image net!", new Set())).toBe("image_net");
    expect(referenceList("not a list")).toEqual([]);
  });

  it("reads the values the Use link hands over", () => {
    const search = new URLSearchParams("data=x&var.dataPath=%2Fd&other=1");
    expect(variablesFromSearch(search)).toEqual({ dataPath: "/d" });
  });
});
