// The job's parameters (a template's too) with their defaults, and its secrets: a value typed
// for a parameter is sent with the job; a secret is typed into a password field, sent with the
// job and never shown back or kept.
import { shown } from "./Forms";

export function ParametersForm({
  parameters,
  secrets,
  values,
  secretValues,
  onValue,
  onSecret,
}: {
  parameters: unknown;
  secrets: unknown;
  values: Record<string, string>;
  secretValues: Record<string, string>;
  onValue: (name: string, value: string) => void;
  onSecret: (name: string, value: string) => void;
}) {
  const defaults = isObject(parameters) ? parameters : {};
  const secretNames = isObject(secrets) ? Object.keys(secrets) : [];
  const masked = typeof secrets === "string" && secrets !== "";
  const names = Object.keys(defaults);
  if (names.length === 0 && secretNames.length === 0 && !masked) return null;
  return (
    <fieldset className="form-block" data-testid="parameters-form">
      <legend>Parameters</legend>
      {names.map((name) => {
        const secret = secretNames.includes(name);
        return (
          <label key={name}>
            {name}
            <input
              name={`parameter-${name}`}
              type={secret ? "password" : "text"}
              autoComplete="off"
              placeholder={secret ? "secret" : `default: ${shown(defaults[name])}`}
              value={secret ? secretValues[name] ?? "" : values[name] ?? ""}
              onChange={(e) => (secret ? onSecret(name, e.target.value) : onValue(name, e.target.value))}
            />
          </label>
        );
      })}
      {secretNames
        .filter((name) => !names.includes(name))
        .map((name) => (
          <label key={`secret-${name}`}>
            Secret {name}
            <input
              name={`secret-${name}`}
              type="password"
              autoComplete="new-password"
              placeholder={isObject(secrets) && shown(secrets[name]) !== "" ? "(the YAML's value)" : "enter it"}
              value={secretValues[name] ?? ""}
              onChange={(e) => onSecret(name, e.target.value)}
            />
          </label>
        ))}
      {masked && (
        <p className="note">
          The secrets of this config were masked when it was stored: write their names under <code>secrets:</code> and
          enter their values here.
        </p>
      )}
      {secretNames.length > 0 && <p className="muted">Secrets are sent with the job only: never shown back, never kept in the draft.</p>}
    </fieldset>
  );
}

function isObject(value: unknown): value is Record<string, unknown> {
  return !!value && typeof value === "object" && !Array.isArray(value);
}

/** Typed parameter values as the API takes them: a number where the default is one. */
export function parameterValues(parameters: unknown, values: Record<string, string>): Record<string, unknown> | null {
  const defaults = isObject(parameters) ? parameters : {};
  const entries = Object.entries(values)
    .filter(([name, value]) => value !== "" && name in defaults)
    .map(([name, value]): [string, unknown] => {
      const old = defaults[name];
      if (typeof old === "number" && value.trim() !== "" && !Number.isNaN(Number(value))) return [name, Number(value)];
      if (typeof old === "boolean" && (value === "true" || value === "false")) return [name, value === "true"];
      return [name, value];
    });
  return entries.length > 0 ? Object.fromEntries(entries) : null;
}
