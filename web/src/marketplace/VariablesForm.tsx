// The form a use of an item with template variables shows: one field per declared variable,
// prefilled with its default; every variable needs a value.
import type { DeclaredVariable } from "./variables";

export function VariablesForm({
  itemName,
  declared,
  values,
  onChange,
}: {
  itemName: string;
  declared: readonly DeclaredVariable[];
  values: Record<string, string>;
  onChange: (name: string, value: string) => void;
}) {
  if (declared.length === 0) return null;
  return (
    <fieldset className="variables-form" data-variables-for={itemName}>
      <legend>Template variables of {itemName}</legend>
      {declared.map((variable) => (
        <label key={variable.name}>
          <code>{variable.name}</code>
          <input
            name={`variable-${variable.name}`}
            aria-label={`Template variable ${variable.name}`}
            placeholder={variable.default ?? "a value is needed"}
            value={values[variable.name] ?? ""}
            onChange={(event) => onChange(variable.name, event.target.value)}
          />
        </label>
      ))}
    </fieldset>
  );
}
