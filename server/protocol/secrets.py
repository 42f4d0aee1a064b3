"""Masking of a job's secrets in the text that is stored and shown."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

MASK = "******"
_TOP_LEVEL_SECRETS = re.compile(r"^secrets[ \t]*:.*?(?=^[^\s#]|\Z)", re.MULTILINE | re.DOTALL)


def mask_secrets(text: str, doc: dict[str, Any] | None = None) -> str:
    """The text with the top-level `secrets` replaced by a mask, everything else as written.

    Works on the text (as OpenPAI does) so comments and formatting of the rest survive. When
    the text cannot be masked that way (JSON, flow-style YAML, a secret value repeated
    elsewhere) and the parsed `doc` is given, the document is written out again with the
    secrets masked: formatting is lost, secrets are never kept.
    """
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
