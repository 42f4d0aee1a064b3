"""The bounds a job document must keep, and the error it gets for crossing one.

Both readers in `loader.py` (YAML and JSON) apply the same limits and raise the same
`LoadError`; they live in a module of their own so that `json_loading.py` can raise it too
without importing the loader. `server.protocol.loader` re-exports the public names.
"""

from __future__ import annotations

from typing import Any

from server.protocol.issues import Issue

DEFAULT_MAX_BYTES = 1024 * 1024
MAX_DEPTH = 64
MAX_NODES = 200_000
# Values a YAML document may hold as written (scalars, collections, aliases). Building them is
# PyYAML's Python code, about a second per 100,000 on a busy machine; a real config holds a few
# thousand. Counted before anything is built, so a 1 MiB list of one-letter items is refused
# in a fraction of a second instead of taking seconds.
MAX_VALUES = 25_000


class LoadError(Exception):
    def __init__(self, code: str, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.issue = Issue("", code, message)
        self.line = line  # the line the YAML parser stopped at, when it says


def _check_encodable(text: str) -> None:
    """Text from an API may carry lone surrogates, which no UTF-8 consumer can take."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise LoadError(
            "not-utf8",
            f"the document holds an invalid character (a lone surrogate) at offset {exc.start}",
        ) from None


def _check_data_depth(data: Any) -> None:
    """Nesting and the number of values of parsed JSON, by the same limits as YAML's."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    count = 0
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise _too_many_values()
        if depth > MAX_DEPTH:
            raise _too_deep()
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def _huge_number() -> LoadError:
    return LoadError("huge-number", "a number in the document has thousands of digits")


def _too_many_values() -> LoadError:
    return LoadError(
        "too-many-values",
        f"the document holds more than {MAX_VALUES} values (scalars, lists, mappings, "
        "counted as written); a job config needs far fewer: is it data rather than a job?",
    )


def _too_deep() -> LoadError:
    return LoadError(
        "too-deep",
        f"the document is nested more than {MAX_DEPTH} levels deep; job configs never need that",
    )
