"""What a GraphQL request must look like before strawberry reads it.

A POST body is a JSON object {"query": "...", "variables": {...}, "operationName": "..."}; a
GET carries `variables` as JSON text. Anything else (a bare number, bytes that are not UTF-8,
arrays nested a million deep, `variables` that are not an object) is the client's mistake:
it gets 400 with a sentence naming the problem, and the server logs nothing, where a parser
left to itself would raise (RecursionError, UnicodeDecodeError, AttributeError) into a 500.
"""

from __future__ import annotations

from typing import Any

import orjson

from server.api.limits import MAX_JSON_DEPTH


class BadRequest(Exception):
    """The request is not a GraphQL request this server can read; the message says why."""


_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "true or false"}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "a number"
    return _KINDS.get(type(value), type(value).__name__)


def parse_json(raw: bytes | str, what: str) -> Any:
    """`raw` as JSON nested at most MAX_JSON_DEPTH deep; BadRequest naming `what` (e.g. "the
    request body") and the problem. orjson parses without recursing in Python and refuses
    nesting past 1,024 levels itself; the depth is then measured without recursion too."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRequest(
                f"{what} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                "send JSON encoded as UTF-8"
            ) from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc):
            raise _too_deep(what) from None
        raise BadRequest(f"{what} is not valid JSON: {exc}") from None
    if _deeper_than(data, MAX_JSON_DEPTH):
        raise _too_deep(what)
    return data


def _too_deep(what: str) -> BadRequest:
    return BadRequest(
        f"{what} nests JSON more than {MAX_JSON_DEPTH} levels deep; a GraphQL request never "
        "needs that"
    )


def _deeper_than(data: Any, limit: int) -> bool:
    """Whether arrays and objects in `data` nest more than `limit` levels (walked with a list,
    not by recursion: the value may be nested a thousand levels)."""
    stack: list[tuple[Any, int]] = [(data, 1)] if isinstance(data, dict | list) else []
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def check_request(data: Any) -> None:
    """BadRequest unless `data` has the shape of one GraphQL request."""
    if not isinstance(data, dict):
        raise BadRequest(
            'the request body must be a JSON object such as {"query": "...", "variables": {}}, '
            f"not {_kind(data)}"
        )
    for key, allowed in (("query", (str,)), ("operationName", (str,))):
        if data.get(key) is not None and not isinstance(data[key], allowed):
            raise BadRequest(f"`{key}` must be a string, not {_kind(data[key])}")
    check_variables(data.get("variables"))


def check_variables(variables: Any) -> None:
    """BadRequest unless `variables` is an object or null."""
    if variables is not None and not isinstance(variables, dict):
        raise BadRequest(f"`variables` must be a JSON object or null, not {_kind(variables)}")
