"""Masking of a job's secrets in the text that is stored and shown."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

MASK = "******"
_REFERENCE = re.compile(r"<%\s*\$secrets\.([-._a-zA-Z0-9]+)\s*%>")
MASKED_SECRETS = re.compile(r'^secrets[ \t]*:[ \t]*"\*{6}"[ \t]*$|"secrets": "\*{6}"', re.MULTILINE)
_TOP_LEVEL_SECRETS = re.compile(r"^secrets[ \t]*:.*?(?=^[^\s#]|\Z)", re.MULTILINE | re.DOTALL)


def mask_secrets(text: str, doc: dict[str, Any] | None = None) -> str:
    """The text with the top-level `secrets` replaced by a mask, everything else as written.

    Works on the text (as OpenPAI does) so comments and formatting of the rest survive. When
    the text cannot be masked that way (JSON, flow-style YAML, a secret value repeated
    elsewhere) and the parsed `doc` is given, the document is written out again with the
    secrets masked: formatting is lost, secrets are never kept.
    """
    # Most texts have no `secrets` at all: a substring test says so faster than the pattern.
    masked = text
    if "secrets" in text:
        masked = _TOP_LEVEL_SECRETS.sub(lambda m: f'secrets: "{MASK}"\n', text)
    if not doc or "secrets" not in doc:
        return masked
    leftovers = [v for v in _scalars(doc["secrets"]) if len(v) >= 3 and v in masked]
    if masked != text and not leftovers:
        return masked
    clean = {**doc, "secrets": MASK}
    if text.lstrip().startswith(("{", "[")):
        return json.dumps(clean, indent=2, ensure_ascii=False) + "\n"
    return yaml.safe_dump(clean, sort_keys=False, allow_unicode=True)


def _scalars(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _scalars(v)]
    if isinstance(value, list):
        return [s for v in value for s in _scalars(v)]
    return [] if value is None else [str(value)]


def declare_secrets(text: str, names: list[str]) -> str:
    """A v2 job's text with its top-level `secrets` (masked or not) replaced by `names`, each
    with an empty value: what a published template says of the secrets its user supplies."""
    if text.lstrip().startswith("{"):
        doc = json.loads(text)
        doc.pop("secrets", None)
        if names:
            doc["secrets"] = dict.fromkeys(names, "")
        return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    block = "secrets:\n" if names else ""
    block += "".join(f'  {json.dumps(name)}: ""\n' for name in names)
    if _TOP_LEVEL_SECRETS.search(text):
        return _TOP_LEVEL_SECRETS.sub(lambda m: block, text, count=1)
    if not names:
        return text
    return text + ("" if text.endswith("\n") else "\n") + block


def referenced_secrets(text: str) -> list[str]:
    """The names of the secrets `text` refers to with `<% $secrets.x %>`, in order."""
    return list(dict.fromkeys(_REFERENCE.findall(text)))
