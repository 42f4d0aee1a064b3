// The publish form's values and the errors the server gives back, each put at its field.
import type { Visibility } from "../gql/graphql";

export type FormField = "name" | "content" | "version" | "summary" | "description" | "tags" | "visibility" | "groups" | "form";

export interface UserErrorLike {
  path: string[];
  code: string;
  message: string;
}

/** Where an error belongs: the field its path starts with (a job to publish is the content's
 * place); anything else is about the form as a whole. Errors inside the content say where,
 * but the content's own name belongs to the name field. */
export function errorsByField(errors: UserErrorLike[]): Partial<Record<FormField, string[]>> {
  const found: Partial<Record<FormField, string[]>> = {};
  for (const error of errors) {
    const [head, ...rest] = error.path;
    let field: FormField = "form";
    let message = error.message;
    if ((head === "content" || head === "jobId") && rest.length === 1 && rest[0] === "name") {
      field = "name";
    } else if (head === "content" || head === "jobId" || head === "config") {
      field = "content";
      if (rest.length > 0) message = `${rest.join(".")}: ${error.message}`;
    } else if (["name", "version", "summary", "description", "tags", "visibility", "groups"].includes(head ?? "")) {
      field = head as FormField;
    }
    (found[field] ??= []).push(message);
  }
  return found;
}

/** Comma-separated labels as a list: trimmed, empty ones dropped. */
export function splitLabels(text: string): string[] {
  return text
    .split(",")
    .map((part) => part.trim())
    .filter((part) => part !== "");
}

export const VISIBILITIES: { value: Visibility; label: string }[] = [
  { value: "PUBLIC", label: "public: every user" },
  { value: "PRIVATE", label: "private: only me" },
  { value: "GROUPS", label: "groups: members of these virtual clusters" },
];
