"""What is wrong with a JSON job document, said so that a person can fix it.

JSON gets checks YAML does not need: a key written twice (which `json` would keep silently,
dropping the first value) and comments or trailing commas (JSONC, named as such). They live
apart from `loader.py`, which reads both formats and calls these when JSON fails.
"""

from __future__ import annotations

import json
import re
from typing import Any

from server.protocol.load_limits import LoadError


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict; _DuplicateKey when a key comes twice (json would keep the
    last value silently, and the user's first one would be lost without a word)."""
    data = dict(pairs)
    if len(data) != len(pairs):
        raise _DuplicateKey
    return data


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],]')


def _duplicate_key(text: str) -> LoadError:
    """The error for the first key that comes twice in one object of `text` (valid JSON),
    with its line and column."""
    objects: list[set[str] | None] = []  # per open bracket: an object's keys, None for arrays
    expect_key = False
    for token in _JSON_TOKEN.finditer(text):
        value = token.group()
        if value == "{":
            objects.append(set())
            expect_key = True
        elif value == "[":
            objects.append(None)
        elif value in "]}":
            objects.pop()
            expect_key = False
        elif value == ",":
            expect_key = bool(objects) and objects[-1] is not None
        elif expect_key and objects and objects[-1] is not None:
            key = json.loads(value)
            if key in objects[-1]:
                line = text.count("\n", 0, token.start()) + 1
                column = token.start() - text.rfind("\n", 0, token.start())
                return LoadError(
                    "json-duplicate-key",
                    f"invalid JSON at line {line}, column {column}: duplicate key {key!r} (an "
                    "object may hold each key once)",
                )
            objects[-1].add(key)
            expect_key = False
    return LoadError("json-duplicate-key", "invalid JSON: an object holds a key twice")


def _jsonc_hint(text: str) -> tuple[str, str] | None:
    """Find the comment or trailing comma that made JSON invalid, outside string literals."""
    line, col, i, n = 1, 1, 0, len(text)
    in_string = False
    last_significant = ""
    last_pos = (1, 1)
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 2
                col += 2
                continue
            if ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "/" and i + 1 < n and text[i + 1] in "/*":
            kind = "//" if text[i + 1] == "/" else "/* */"
            return (
                "json-comment",
                f"invalid JSON at line {line}, column {col}: JSON does not allow comments; "
                f"remove the {kind} comment (OpenPAI's v1 docs show commented examples, but "
                "the files themselves must be plain JSON)",
            )
        elif ch in "}]" and last_significant == ",":
            return (
                "json-trailing-comma",
                f"invalid JSON at line {last_pos[0]}, column {last_pos[1]}: "
                f"remove the trailing comma before '{ch}'",
            )
        if not in_string and not ch.isspace():
            last_significant = ch
            last_pos = (line, col)
        elif in_string and ch != '"':
            last_significant = '"'
        if ch == "\n":
            line, col = line + 1, 1
        else:
            col += 1
        i += 1
    return None
