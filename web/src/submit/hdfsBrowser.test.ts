import { describe, expect, it } from "vitest";
import { lastSegment, parentOf } from "./HdfsBrowser";

describe("HDFS locations in the browser", () => {
  it("goes up one folder at a time and stops at a file system's root", () => {
    expect(parentOf("hdfs://nn:9000/core/cifar10_model")).toBe("hdfs://nn:9000/core");
    expect(parentOf("hdfs://nn:9000/core/")).toBe("hdfs://nn:9000/");
    expect(parentOf("hdfs://nn:9000/")).toBeNull();
    expect(parentOf("/datasets/points.csv")).toBe("/datasets");
    expect(parentOf("/")).toBeNull();
    expect(parentOf("ftp://x/y")).toBeNull();
  });

  it("names a pick after its last segment", () => {
    expect(lastSegment("hdfs://nn:9000/datasets/points.csv")).toBe("points.csv");
    expect(lastSegment("hdfs://nn:9000/core/model/")).toBe("model");
    expect(lastSegment("hdfs://nn:9000/")).toBe("");
  });
});
