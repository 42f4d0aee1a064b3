"""Taking the credentials out of text an earlier version stored with them in it.

Before credentials were lifted into secrets (server.protocol.credentials), a job config or a
published item that wrote a registry username or password as itself was stored as written,
and the resolved job kept it too. `scrubbed_document` rewrites such a text the way the engine
now writes it; `scrubbed_spec` does the same for a stored JobSpec's JSON; `scrubbed_message`
masks the values themselves in any other text of the same job (an event, a state reason).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from server.protocol.credentials import (
    CREDENTIAL_FIELDS,
    Credential,
    find_credentials,
    is_literal,
    masked_text,
    with_masked_secrets,
    with_references,
)
from server.protocol.engine import Kind, detect
from server.protocol.loader import LoadError, load_document
from server.protocol.model import Dialect
from server.protocol.secrets import MASK

MIN_MASKED = 3  # shorter values are not searched for in free text: they would mask too much


@dataclass(frozen=True)
class Scrubbed:
    text: str
    credentials: tuple[Credential, ...]  # what was found (and taken out)

    @property
    def values(self) -> set[str]:
        return {c.value for c in self.credentials}


def scrubbed_document(text: str) -> Scrubbed:
    """A stored job config or item content with every literal credential replaced by a
    reference to a secret (and, for a v2 job that declares no secrets, `secrets` masked)."""
    try:
        doc = load_document(text).data
    except LoadError:
        return Scrubbed(text, ())
    if not isinstance(doc, dict):
        return Scrubbed(text, ())
    detected = detect(doc)
    component = detected is not None and detected[0] is Kind.COMPONENT
    declared = doc.get("secrets")
    taken = {str(k) for k in declared} if isinstance(declared, dict) else set()
    credentials = find_credentials(doc, component=component, taken=taken)
    if not credentials:
        return Scrubbed(text, ())
    lifted = with_references(doc, credentials)
    out = masked_text(text, lifted, credentials, component)
    if detected == (Kind.JOB, Dialect.V2) and "secrets" not in doc:
        out = with_masked_secrets(out)
    return Scrubbed(out, tuple(credentials))


def scrubbed_spec(spec_json: str, credentials: tuple[Credential, ...]) -> tuple[str, set[str]]:
    """A stored JobSpec's JSON with every literal auth credential replaced by a reference to
    the secret the config's credential of the same value became, and the values found."""
    try:
        spec = json.loads(spec_json)
    except ValueError:
        return spec_json, set()
    named: dict[tuple[str | int, str], str] = {(c.keys[-1], c.value): c.secret for c in credentials}
    found: set[str] = set()
    for prerequisite in spec.get("prerequisites") or []:
        auth = prerequisite.get("auth") if isinstance(prerequisite, dict) else None
        if not isinstance(auth, dict):
            continue
        for field in CREDENTIAL_FIELDS:
            value = auth.get(field)
            if not isinstance(value, str) or not is_literal(value):
                continue
            found.add(value)
            name = named.get((field, value)) or f"{prerequisite.get('name', 'registry')}-{field}"
            auth[field] = f"<% $secrets.{name} %>"
    source = spec.get("source")
    if isinstance(source, str) and source:
        kept = scrubbed_document(source)
        spec["source"] = kept.text
        found |= kept.values
    if not found:
        return spec_json, set()
    return json.dumps(spec), found


def scrubbed_message(text: str | None, values: set[str]) -> str | None:
    """`text` with each of `values` (of at least MIN_MASKED characters) masked."""
    if not text:
        return text
    for value in sorted(values, key=len, reverse=True):
        if len(value) >= MIN_MASKED:
            text = text.replace(value, MASK)
    return text
