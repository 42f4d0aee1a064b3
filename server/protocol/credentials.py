"""Credentials written into a document are secrets, wherever they are written.

A dockerimage's `auth` written literally is lifted into a secret of the job, its field becomes a
reference, and a warning at its path names the secret, so the credential is never stored, shown
or logged (docs/security.md, Credentials in a job).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

from server.protocol.issues import Issues, join
from server.protocol.secrets import MASK

CREDENTIAL_FIELDS = ("username", "password")
SECRET_NAME = re.compile(r"[-._a-zA-Z0-9]+")
_REFERENCE = re.compile(r"^\s*<%\s*\$secrets\.[-._a-zA-Z0-9]+\s*%>\s*$")
_FIELD_LINE = re.compile(
    r"^(?P<lead>[ \t]*(?:-[ \t]+)*)(?P<key>(?P<q>[\"']?)(?P<name>username|password)(?P=q))"
    r"(?P<sep>[ \t]*:[ \t]*)(?P<rest>\S.*?)[ \t]*$"
)


@dataclass(frozen=True)
class Credential:
    """One credential found written literally: where, the secret it becomes, its value."""

    path: str  # e.g. prerequisites[0].auth.password
    keys: tuple[str | int, ...]  # the same path as keys into the document
    secret: str
    value: str

    @property
    def reference(self) -> str:
        return f"<% $secrets.{self.secret} %>"


@dataclass(frozen=True)
class Lifted:
    """A document with its literal credentials replaced by references to secrets."""

    doc: dict[str, Any]
    text: str  # the text with each literal credential replaced by its reference
    credentials: tuple[Credential, ...]

    @property
    def secrets(self) -> dict[str, str]:
        return {c.secret: c.value for c in self.credentials}


def is_literal(value: Any) -> bool:
    """A credential value written as itself: a non-empty string that refers to no secret (and
    to nothing else: a `<% ... %>` or `$$...$$` part is rendered later, and is not a value)."""
    return (
        isinstance(value, str)
        and bool(value.strip())
        and "<%" not in value
        and not re.search(r"\$\$\w+\$\$", value)
    )


def auth_places(doc: dict[str, Any], component: bool) -> list[tuple[tuple[str | int, ...], Any]]:
    """Every prerequisite of the document (keys into it, the prerequisite) that may hold an
    `auth`: the document itself for a component, else the `prerequisites` lists of a job (the
    draft dialect's `job:` wrapper included)."""
    if component:
        return [((), doc)]
    places: list[tuple[tuple[str | int, ...], Any]] = []
    for base in ((), ("job",)):
        holder: Any = doc
        for key in base:
            holder = holder.get(key) if isinstance(holder, dict) else None
        listed = holder.get("prerequisites") if isinstance(holder, dict) else None
        if isinstance(listed, list):
            places += [((*base, "prerequisites", i), p) for i, p in enumerate(listed)]
    return places


def find_credentials(
    doc: dict[str, Any], *, component: bool, taken: set[str] | None = None
) -> list[Credential]:
    """The literal credentials of the document, each with a secret name that no secret in
    `taken` (and no other credential) has."""
    names = set(taken or ())
    found: list[Credential] = []
    for keys, prerequisite in auth_places(doc, component):
        if not isinstance(prerequisite, dict) or not isinstance(prerequisite.get("auth"), dict):
            continue
        auth = prerequisite["auth"]
        owner = prerequisite.get("name")
        stem = _stem(owner if isinstance(owner, str) else "", keys)
        for field in CREDENTIAL_FIELDS:
            value = auth.get(field)
            if not is_literal(value):
                continue
            name = _unique(f"{stem}-{field}", names)
            names.add(name)
            where = (*keys, "auth", field)
            found.append(Credential(_path(where), where, name, value))
    return found


def lift_credentials(
    doc: dict[str, Any], text: str, issues: Issues, *, component: bool, taken: set[str]
) -> Lifted:
    """The document and its text with every literal credential replaced by a reference to a
    secret of its own, and a warning at each."""
    credentials = find_credentials(doc, component=component, taken=taken)
    if not credentials:
        return Lifted(doc, text, ())
    lifted = with_references(doc, credentials)
    for credential in credentials:
        where = (
            "the job's secrets"
            if not component
            else "the secrets of every job that uses this component"
        )
        issues.warn(
            credential.path,
            "literal-credential",
            f"this {credential.keys[-1]} is a credential: it is handled as the secret "
            f"{credential.secret!r} (given to the backend only, masked wherever the config is "
            f"kept or shown). Write it as `{credential.reference}` with its value in {where}",
        )
    return Lifted(lifted, masked_text(text, lifted, credentials, component), tuple(credentials))


def with_references(doc: dict[str, Any], credentials: list[Credential]) -> dict[str, Any]:
    """A copy of `doc` with each credential's reference in place of its value."""
    lifted = copy.deepcopy(doc)
    for credential in credentials:
        _at(lifted, credential.keys[:-1])[credential.keys[-1]] = credential.reference
    return lifted


def with_masked_secrets(text: str) -> str:
    """A v2 job's text that declares no secrets, with `secrets` masked as stored configs have
    it: its lifted credentials are references to secrets whose values were not kept."""
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            return json.dumps({**doc, "secrets": MASK}, indent=2, ensure_ascii=False) + "\n"
    return text + ("" if text.endswith("\n") else "\n") + f'secrets: "{MASK}"\n'


def masked_text(
    text: str, lifted: dict[str, Any], credentials: list[Credential], component: bool
) -> str:
    """`text` with each credential's value replaced by its reference: line by line, so
    comments and formatting survive; when that cannot be done (JSON, flow style, a value on
    several lines), the lifted document written out again."""
    lines = text.splitlines(keepends=True)
    used: set[int] = set()
    for credential in credentials:
        for number, line in enumerate(lines):
            if number in used:
                continue
            match = _FIELD_LINE.match(line.rstrip("\r\n"))
            if match is None or match["name"] != credential.keys[-1]:
                continue
            if _scalar(match["rest"]) != credential.value:
                continue
            ending = line[len(line.rstrip("\r\n")) :]
            lines[number] = (
                f"{match['lead']}{match['key']}{match['sep']}"
                f"{json.dumps(credential.reference)}{ending}"
            )
            used.add(number)
            break
    masked = "".join(lines)
    if _holds_references(masked, credentials, component):
        return masked
    if text.lstrip().startswith(("{", "[")):
        return json.dumps(lifted, indent=2, ensure_ascii=False) + "\n"
    return yaml.safe_dump(lifted, sort_keys=False, allow_unicode=True)


def _holds_references(text: str, credentials: list[Credential], component: bool) -> bool:
    """Whether `text` reads back with a reference (and so no value) at every credential."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    if not isinstance(doc, dict):
        return False
    if find_credentials(doc, component=component):
        return False
    for credential in credentials:
        try:
            value = _at(doc, credential.keys)
        except (KeyError, IndexError, TypeError):
            return False
        if value != credential.reference:
            return False
    return True


def _scalar(written: str) -> Any:
    """The value of a plain or quoted YAML scalar as written after `key:` (comment allowed)."""
    try:
        return yaml.safe_load(written)
    except yaml.YAMLError:
        return None


def _at(doc: Any, keys: tuple[str | int, ...]) -> Any:
    for key in keys:
        doc = doc[key]
    return doc


def _path(keys: tuple[str | int, ...]) -> str:
    path = ""
    for key in keys:
        path = join(path, key)
    return path


def _stem(name: str, keys: tuple[str | int, ...]) -> str:
    cleaned = re.sub(r"[^-._a-zA-Z0-9]+", "-", name).strip("-.")
    if cleaned:
        return cleaned
    index = next((k for k in reversed(keys) if isinstance(k, int)), None)
    return "registry" if index is None else f"registry{index}"


def _unique(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    n = 2
    while f"{name}-{n}" in taken:
        n += 1
    return f"{name}-{n}"
