"""Global IDs and cursors: opaque to clients, checked when they come back.

A global ID is `base64("<Type>:<key>")`, so `node(id:)` can tell which table to read without
the client knowing our keys. Cursors are base64 of a small JSON list; a cursor that does not
decode is a user error naming the argument, never a server error.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any


class BadId(ValueError):
    """An ID or cursor the client sent back does not decode; the message names the argument."""


def global_id(type_name: str, key: str | int) -> str:
    return base64.urlsafe_b64encode(f"{type_name}:{key}".encode()).decode().rstrip("=")


def parse_global_id(value: str, *, argument: str = "id") -> tuple[str, str]:
    """(type name, key) of a global ID."""
    text = _decode(value, argument)
    type_name, sep, key = text.partition(":")
    if not sep or not type_name or not key:
        raise BadId(f"{argument}: {value!r} is not an ID this service gave out")
    return type_name, key


def expect_global_id(value: str, type_name: str, *, argument: str = "id") -> str:
    """The key of a global ID that must be of `type_name`."""
    found, key = parse_global_id(value, argument=argument)
    if found != type_name:
        raise BadId(f"{argument}: expected the ID of a {type_name}, got the ID of a {found}")
    return key


def cursor(*parts: Any) -> str:
    data = json.dumps(list(parts), separators=(",", ":"), default=str)
    return base64.urlsafe_b64encode(data.encode()).decode().rstrip("=")


def parse_cursor(value: str, *, argument: str = "after") -> list[Any]:
    try:
        parts = json.loads(_decode(value, argument))
    except json.JSONDecodeError:
        raise BadId(f"{argument}: {value!r} is not a cursor this service gave out") from None
    if not isinstance(parts, list):
        raise BadId(f"{argument}: {value!r} is not a cursor this service gave out")
    return parts


def _decode(value: str, argument: str) -> str:
    padded = value + "=" * (-len(value) % 4)
    try:
        return base64.urlsafe_b64decode(padded.encode("ascii")).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError):
        raise BadId(f"{argument}: {value!r} is not an ID this service gave out") from None
