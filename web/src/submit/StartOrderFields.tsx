// A role's start order on the Submit page: which roles it starts after (role, when, how many
// of its instances) and how the role itself shows it is ready (a port label or a command).
// Both live under `extras.paigraph.taskRoles.<role>` in the YAML, kept in sync like every form.
import type { JobForm, ReadinessForm, RoleForm, StartAfter } from "./form";
import { DEPENDENCY_PHASES, readinessForm, readinessValue, startAfterList } from "./form";
import { shown, type Edit } from "./Forms";

/** A typed number, decimals allowed (a period may be 0.5 s); the text itself otherwise. */
function typedNumber(text: string): unknown {
  const t = text.trim();
  if (t === "") return undefined;
  return /^\d+(\.\d+)?$/.test(t) ? Number(t) : t;
}

export function StartOrderFields({ role, index, form, edit }: { role: RoleForm; index: number; form: JobForm; edit: Edit }) {
  const deps = startAfterList(role.dependsOn);
  const others = form.roles.filter((_, i) => i !== index).map((r) => r.name);
  const readiness = readinessForm(role.readiness);
  const ports = role.ports && typeof role.ports === "object" && !Array.isArray(role.ports) ? Object.keys(role.ports) : [];
  const set = (change: (r: RoleForm) => void) =>
    edit((f) => {
      const target = f.roles[index];
      if (target) change(target);
    });
  const setDeps = (list: StartAfter[]) =>
    set((r) => {
      r.dependsOn = list.length > 0 ? list : undefined;
      if (list.length === 0) r.dependencyTimeoutSeconds = undefined;
    });
  const setReadiness = (change: Partial<ReadinessForm>) => set((r) => void (r.readiness = readinessValue({ ...readiness, ...change }, r.readiness)));
  return (
    <div className="sub" data-testid={`start-order-${role.name}`}>
      <h4>Start order</h4>
      {deps.map((dep, n) => (
        <div key={n} className="row start-after">
          <label>
            Starts after
            <select
              aria-label={`Starts after role ${n + 1}`}
              value={dep.role}
              onChange={(e) => setDeps(deps.map((d, i) => (i === n ? { ...d, role: e.target.value } : d)))}
            >
              {!others.includes(dep.role) && <option value={dep.role}>{dep.role || "(choose a role)"}</option>}
              {others.map((name) => (
                <option key={name} value={name}>
                  {name}
                </option>
              ))}
            </select>
          </label>
          <label>
            is
            <select
              aria-label={`Starts after when ${n + 1}`}
              value={dep.when}
              onChange={(e) => setDeps(deps.map((d, i) => (i === n ? { ...d, when: e.target.value } : d)))}
            >
              {DEPENDENCY_PHASES.map((phase) => (
                <option key={phase} value={phase}>
                  {phase}
                </option>
              ))}
            </select>
          </label>
          <label>
            Instances
            <input
              aria-label={`Starts after instances ${n + 1}`}
              inputMode="numeric"
              placeholder="all"
              value={shown(dep.instances)}
              onChange={(e) =>
                setDeps(
                  deps.map((d, i) => {
                    if (i !== n) return d;
                    const value = typedNumber(e.target.value);
                    const rest: StartAfter = { role: d.role, when: d.when };
                    return value === undefined ? rest : { ...rest, instances: value };
                  }),
                )
              }
            />
          </label>
          <button type="button" className="link" onClick={() => setDeps(deps.filter((_, i) => i !== n))}>
            Remove
          </button>
        </div>
      ))}
      <div className="row">
        <button
          type="button"
          disabled={others.length === 0}
          onClick={() => setDeps([...deps, { role: others.find((o) => !deps.some((d) => d.role === o)) ?? others[0] ?? "", when: "running" }])}
        >
          Add: starts after a role
        </button>
        {deps.length > 0 && (
          <label>
            Wait at most (s)
            <input
              name="dependencyTimeoutSeconds"
              inputMode="numeric"
              placeholder="600"
              value={shown(role.dependencyTimeoutSeconds)}
              onChange={(e) => set((r) => void (r.dependencyTimeoutSeconds = typedNumber(e.target.value)))}
            />
          </label>
        )}
      </div>
      <div className="row readiness">
        <label>
          Ready when
          <select
            aria-label={`Readiness of ${role.name}`}
            value={readiness.kind}
            onChange={(e) => {
              const kind = e.target.value as ReadinessForm["kind"];
              setReadiness({ kind, port: readiness.port || ports[0] || "", command: readiness.command });
            }}
          >
            <option value="none">no readiness check</option>
            <option value="port">a port answers</option>
            <option value="command">a command succeeds</option>
          </select>
        </label>
        {readiness.kind === "port" && (
          <label>
            Port label
            <select aria-label={`Readiness port of ${role.name}`} value={readiness.port} onChange={(e) => setReadiness({ port: e.target.value })}>
              {!ports.includes(readiness.port) && <option value={readiness.port}>{readiness.port || "(add a port)"}</option>}
              {ports.map((label) => (
                <option key={label} value={label}>
                  {label}
                </option>
              ))}
            </select>
          </label>
        )}
        {readiness.kind === "command" && (
          <label className="wide">
            Command (sh -c)
            <input aria-label={`Readiness command of ${role.name}`} value={readiness.command} onChange={(e) => setReadiness({ command: e.target.value })} />
          </label>
        )}
        {readiness.kind !== "none" &&
          (
            [
              ["periodSeconds", "Every (s)", "1"],
              ["timeoutSeconds", "Timeout (s)", "1"],
              ["failureThreshold", "Failures before not ready", "3"],
            ] as const
          ).map(([key, label, placeholder]) => (
            <label key={key}>
              {label}
              <input
                aria-label={`Readiness ${key} of ${role.name}`}
                inputMode="decimal"
                placeholder={placeholder}
                value={shown(readiness[key])}
                onChange={(e) => setReadiness({ [key]: typedNumber(e.target.value) })}
              />
            </label>
          ))}
      </div>
    </div>
  );
}
