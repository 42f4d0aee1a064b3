"""`{{ name }}` placeholders in YAML text, read as the marketplace's template syntax.

Plain YAML reads `mountPath: {{ mountPath }}` as a flow mapping and refuses it, so placeholders
are swapped for tokens before parsing and for their values after; the text is never changed and
a value never adds YAML structure (docs/dialects.md, Template variables).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_]\w*)\s*\}\}")


@dataclass(frozen=True)
class Masked:
    """Text with its placeholders swapped for tokens, and how to swap them back."""

    text: str
    placeholders: tuple[tuple[str, str], ...]  # per token number: (as written, variable name)
    token: re.Pattern[str]

    def restore(self, data: Any, values: Mapping[str, Any] | None = None) -> Any:
        """`data` with every token replaced: by the text of the value given for its name, else
        by the placeholder as written."""
        if not self.placeholders:
            return data
        given = {name: _text(value) for name, value in (values or {}).items()}

        def swap(match: re.Match[str]) -> str:
            written, name = self.placeholders[int(match.group(1))]
            return given.get(name, written)

        def walk(value: Any) -> Any:
            if isinstance(value, str):
                return self.token.sub(swap, value) if "tv" in value else value
            if isinstance(value, list):
                return [walk(item) for item in value]
            if isinstance(value, dict):
                return {walk(key): walk(item) for key, item in value.items()}
            return value

        return walk(data)


def mask(text: str) -> Masked:
    """`text` with each placeholder replaced by a token that YAML reads as a plain string
    wherever it stands (a value, a key, a list item, inside quotes); lines keep their numbers."""
    found: list[tuple[str, str]] = []
    if "{{" not in text:
        return Masked(text, (), re.compile(r"(?!)"))
    prefix = "tv" + secrets.token_hex(4)
    while prefix in text:
        prefix = "tv" + secrets.token_hex(4)

    def swap(match: re.Match[str]) -> str:
        found.append((match.group(0), match.group(1)))
        return f"{prefix}n{len(found) - 1}x"

    masked = PLACEHOLDER.sub(swap, text)
    return Masked(masked, tuple(found), re.compile(rf"{prefix}n(\d+)x"))


def names_in(text: str) -> list[str]:
    """The variable names the text's placeholders use, in order of first use."""
    return list(dict.fromkeys(match.group(1) for match in PLACEHOLDER.finditer(text)))


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)
