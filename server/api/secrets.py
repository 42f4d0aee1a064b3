"""The stored config as clients may see it: never with a secret in it.

The protocol masks the top-level `secrets:` block of a config by its text, which keeps the
user's formatting but finds only the block (YAML) style. A config written as JSON or in YAML
flow style keeps its secrets there, so every config is checked again on the way out: when its
`secrets` are not the mask, the document is written anew with them masked (formatting of
such a config is not kept; its content is).
"""

from __future__ import annotations

import json

import yaml

from server.protocol.loader import LoadError, load_document
from server.protocol.secrets import MASK

UNREADABLE = "# the stored config cannot be read back, so it is not shown\n"


def shown_config(text: str) -> str:
    if "secrets" not in text:
        return text
    try:
        loaded = load_document(text)
    except LoadError:
        return UNREADABLE
    data = loaded.data
    if not isinstance(data, dict) or data.get("secrets", MASK) == MASK:
        return text
    data = {**data, "secrets": MASK}
    if loaded.format == "json":
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
