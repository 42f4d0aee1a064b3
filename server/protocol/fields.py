"""Typed, path-aware reading of raw config data.

Dialect readers pull every field through these helpers, which check its type and record an
error (with the field's path) instead of raising, so one pass reports every problem.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Any

from server.protocol.issues import Issues, join
from server.protocol.layout import nearest

_MISSING = object()
# Unknown keys of one mapping reported one by one; past these, one error counts the rest (a
# mapping of 45,000 stray keys would otherwise take seconds of spelling suggestions).
MAX_UNKNOWN_REPORTED = 20


def describe(value: Any) -> str:
    """A short rendering of a bad value for an error message."""
    kind = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "list",
        dict: "mapping",
        type(None): "null",
    }.get(type(value), type(value).__name__)
    if isinstance(value, (dict, list)):
        return f"a {kind}"
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{text} ({kind})"


class Fields:
    """Reads fields out of mappings, reporting problems to `issues`."""

    def __init__(self, issues: Issues) -> None:
        self.issues = issues

    # -- structure -------------------------------------------------------------------------

    def as_mapping(self, value: Any, path: str, what: str = "a mapping") -> dict[str, Any] | None:
        if isinstance(value, dict):
            return value
        self.issues.error(path, "type", f"must be {what}, got {describe(value)}")
        return None

    def as_list(self, value: Any, path: str, *, min_items: int = 0) -> list[Any] | None:
        if not isinstance(value, list):
            self.issues.error(path, "type", f"must be a list, got {describe(value)}")
            return None
        if len(value) < min_items:
            self.issues.error(
                path, "min-items", f"must have at least {min_items} item{'s' * (min_items > 1)}"
            )
            return None
        return value

    def known_keys(
        self,
        obj: dict[str, Any],
        path: str,
        allowed: Collection[str],
        hints: dict[str, str] | None = None,
    ) -> None:
        """Report the keys that this place of the document does not define (the first
        MAX_UNKNOWN_REPORTED one by one, then how many more)."""
        unknown = [key for key in obj if key not in allowed]
        for key in unknown[:MAX_UNKNOWN_REPORTED]:
            hint = (hints or {}).get(str(key))
            meant = nearest(str(key), allowed) if hint is None else None
            if meant is not None:
                hint = f"did you mean `{meant}`?"
            choices = ", ".join(sorted(allowed))
            message = f"unknown field `{key}`" + (f"; {hint}" if hint else f"; allowed: {choices}")
            self.issues.error(join(path, str(key)), "unknown-field", message)
        if len(unknown) > MAX_UNKNOWN_REPORTED:
            rest = len(unknown) - MAX_UNKNOWN_REPORTED
            self.issues.error(
                path,
                "unknown-field",
                f"and {rest} more unknown fields here; allowed: {', '.join(sorted(allowed))}",
            )

    def required(self, obj: dict[str, Any], path: str, keys: Iterable[str]) -> bool:
        ok = True
        for key in keys:
            if key not in obj:
                self.issues.error(join(path, key), "required", f"`{key}` is required")
                ok = False
        return ok

    # -- scalars ---------------------------------------------------------------------------

    def string(
        self,
        obj: dict[str, Any],
        key: str,
        path: str,
        *,
        required: bool = False,
        pattern: re.Pattern[str] | None = None,
        rule: str = "",
        max_length: int | None = None,
        allow_number: bool = False,
    ) -> str | None:
        value = obj.get(key, _MISSING)
        if value.__class__ is str and pattern is None and max_length is None:
            return value  # the common case, decided before the path is spelled out
        if (value is _MISSING or value is None) and not required:
            return None
        where = join(path, key)
        if value is _MISSING or (value is None and not required):
            if required:
                self.issues.error(where, "required", f"`{key}` is required")
            return None
        if allow_number and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            self.issues.error(where, "type", f"must be a string, got {describe(value)}")
            return None
        if max_length is not None and len(value) > max_length:
            self.issues.error(
                where, "too-long", f"must be at most {max_length} characters, got {len(value)}"
            )
            return None
        if pattern is not None and not pattern.fullmatch(value):
            self.issues.error(where, "pattern", f"{describe(value)} {rule}")
            return None
        return value

    def integer(
        self,
        obj: dict[str, Any],
        key: str,
        path: str,
        *,
        required: bool = False,
        default: int | None = None,
        allow_null: bool = False,
        numeric_strings: bool = False,
    ) -> int | None:
        """An integer field; bools, fractions and (unless allowed) numeric strings are refused."""
        value = obj.get(key, _MISSING)
        if value.__class__ is int:
            return value  # the common case, decided before the path is spelled out
        if value is _MISSING and not required:
            return default
        where = join(path, key)
        if value is _MISSING:
            if required:
                self.issues.error(where, "required", f"`{key}` is required")
            return default
        if value is None:
            if allow_null:
                return default
            self.issues.error(where, "type", "must be an integer, got null")
            return None
        if numeric_strings and isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            return int(value)
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.issues.error(where, "type", f"must be an integer, got {describe(value)}")
            return None
        return value

    def boolean(self, obj: dict[str, Any], key: str, path: str) -> bool | None:
        value = obj.get(key)
        if value is None or isinstance(value, bool):
            return value
        self.issues.error(join(path, key), "type", f"must be true or false, got {describe(value)}")
        return None

    def string_list(
        self,
        obj: dict[str, Any],
        key: str,
        path: str,
        *,
        required: bool = False,
        min_items: int = 0,
    ) -> list[str] | None:
        value = obj.get(key, _MISSING)
        where = join(path, key)
        if value is _MISSING or (value is None and not required):
            if required:
                self.issues.error(where, "required", f"`{key}` is required")
            return None
        items = self.as_list(value, where, min_items=min_items)
        if items is None:
            return None
        ok = True
        for i, item in enumerate(items):
            if not isinstance(item, str):
                self.issues.error(join(where, i), "type", f"must be a string, got {describe(item)}")
                ok = False
        return list(items) if ok else None

    def string_map(self, obj: dict[str, Any], key: str, path: str) -> dict[str, str] | None:
        """A mapping of names to scalar values, rendered as strings (environment variables)."""
        value = obj.get(key)
        if value is None:
            return {}
        mapping = self.as_mapping(value, join(path, key))
        if mapping is None:
            return None
        out: dict[str, str] = {}
        for name, item in mapping.items():
            if isinstance(item, (dict, list)):
                self.issues.error(
                    join(join(path, key), str(name)),
                    "type",
                    f"must be a scalar, got {describe(item)}",
                )
                continue
            out[str(name)] = "" if item is None else _scalar_text(item)
        return out


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
