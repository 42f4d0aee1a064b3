// The role form's start order: read from and written back to extras.paigraph.taskRoles, kept
// in step with renames and deletions, without touching what it does not edit.
import { describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { applyForm, readForm, readinessForm, readinessValue, renameRole } from "./form";
import { parse } from "./yamlDoc";

const JOB = `protocolVersion: 2
name: order
type: job
prerequisites:
  - {name: image, type: dockerimage, uri: busybox}
taskRoles:
  ps:
    instances: 2
    dockerImage: image
    resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0, ports: {grpc: 1}}
    commands: [serve]
    completion: {minSucceededInstances: -1}
  worker:
    dockerImage: image
    resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}
    commands: [train]
extras:
  keep: me # not ours
  paigraph:
    taskRoles:
      ps:
        readiness: {command: [test, -e, /tmp/up], failureThreshold: 5}
      worker:
        dependsOn: [{role: ps, when: ready}]
`;

/** The parsed YAML, as far as these tests read it. */
interface Written {
  taskRoles: Record<string, unknown>;
  extras: { keep?: string; paigraph: { taskRoles: { ps: { readiness: { command: unknown } } } } };
}

function edited(text: string, change: (form: ReturnType<typeof readForm>) => void): { text: string; value: Written } {
  const parsed = parse(text);
  const form = readForm(parsed.doc);
  change(form);
  applyForm(parsed.doc, form);
  const out = parsed.doc.toString();
  return { text: out, value: parseYaml(out) as Written };
}

describe("start order in the role form", () => {
  it("reads each role's dependsOn and readiness from extras.paigraph", () => {
    const form = readForm(parse(JOB).doc);
    const [ps, worker] = form.roles;
    expect(worker?.dependsOn).toEqual([{ role: "ps", when: "ready" }]);
    expect(readinessForm(ps?.readiness)).toEqual({ kind: "command", port: "", command: "test -e /tmp/up", failureThreshold: 5 });
  });

  it("writes a new dependency and readiness where the protocol reads them", () => {
    const { value } = edited(JOB, (form) => {
      const [ps, worker] = form.roles;
      worker!.dependsOn = [{ role: "ps", when: "running", instances: 1 }];
      worker!.dependencyTimeoutSeconds = 30;
      ps!.readiness = readinessValue({ ...readinessForm(ps!.readiness), kind: "port", port: "grpc", periodSeconds: 0.5 });
    });
    expect(value.extras.paigraph.taskRoles).toEqual({
      ps: { readiness: { port: "grpc", failureThreshold: 5, periodSeconds: 0.5 } },
      worker: { dependsOn: [{ role: "ps", when: "running", instances: 1 }], dependencyTimeoutSeconds: 30 },
    });
    expect(value.extras.keep).toBe("me");
  });

  it("keeps a command written as words while its text is unchanged, else writes sh -c", () => {
    const kept = edited(JOB, (form) => {
      const ps = form.roles[0]!;
      ps.readiness = readinessValue({ ...readinessForm(ps.readiness), failureThreshold: 2 }, ps.readiness);
    });
    expect(kept.value.extras.paigraph.taskRoles.ps.readiness).toEqual({ command: ["test", "-e", "/tmp/up"], failureThreshold: 2 });
    const typed = edited(JOB, (form) => {
      const ps = form.roles[0]!;
      ps.readiness = readinessValue({ ...readinessForm(ps.readiness), command: "nc -z localhost 80" }, ps.readiness);
    });
    expect(typed.value.extras.paigraph.taskRoles.ps.readiness.command).toEqual(["sh", "-c", "nc -z localhost 80"]);
  });

  it("moves a renamed role's entry and the dependencies that name it", () => {
    const { value } = edited(JOB, (form) => renameRole(form, 0, "server"));
    expect(Object.keys(value.taskRoles)).toEqual(["server", "worker"]);
    expect(value.extras.paigraph.taskRoles).toEqual({
      server: { readiness: { command: ["test", "-e", "/tmp/up"], failureThreshold: 5 } },
      worker: { dependsOn: [{ role: "server", when: "ready" }] },
    });
  });

  it("removes what is left empty, and only that", () => {
    const { value } = edited(JOB, (form) => {
      form.roles[0]!.readiness = undefined;
      form.roles[1]!.dependsOn = undefined;
    });
    expect(value.extras).toEqual({ keep: "me" });
    const deleted = edited(JOB, (form) => void form.roles.splice(1, 1));
    expect(deleted.value.extras.paigraph.taskRoles).toEqual({
      ps: { readiness: { command: ["test", "-e", "/tmp/up"], failureThreshold: 5 } },
    });
  });

  it("leaves a job without start order as it was", () => {
    const plain = JOB.slice(0, JOB.indexOf("extras:"));
    const { text, value } = edited(plain, () => {});
    expect(value).toEqual(parseYaml(plain));
    expect(text).not.toContain("extras");
  });
});
