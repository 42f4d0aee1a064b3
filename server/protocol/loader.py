"""Turn untrusted config text into plain Python data, or say exactly why not.

Job configs come from users, web forms and URLs, so this is the hostile-input boundary:
a size limit, binary garbage, multi-document streams, YAML alias bombs, nesting deep enough
to crash a recursive parser, JSON with comments. Each gets one clear error, fast, and never a
stack trace. YAML goes through libyaml (PyYAML's C loader) for speed.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

import yaml

from server.protocol.json_loading import _duplicate_key, _DuplicateKey, _jsonc_hint, _unique_keys
from server.protocol.load_limits import (
    DEFAULT_MAX_BYTES,
    MAX_DEPTH,
    MAX_NODES,
    MAX_VALUES,
    LoadError,
    _check_data_depth,
    _check_encodable,
    _huge_number,
    _too_deep,
    _too_many_values,
)
from server.protocol.placeholders import mask

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_VALUES",
    "LoadError",
    "Loaded",
    "load_document",
]

# libyaml's composer recurses once per nesting level; this bound keeps it far from the C stack.
_SAFE_COMPOSE_DEPTH = 5000

if TYPE_CHECKING:
    _BaseLoader = yaml.SafeLoader
else:
    _BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR_TAG = "tag:yaml.org,2002:str"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MAP_TAG = "tag:yaml.org,2002:map"
# Tags whose values `_build` makes itself (through the constructor's own function, memoised):
# anything else (merge keys, sets, timestamps, binary) goes through PyYAML's constructor.
_PLAIN_SCALAR_TAGS = frozenset(
    {
        "tag:yaml.org,2002:null",
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
    }
)
_MEMO_SIZE = 4096  # distinct scalars remembered (tags, values): job configs repeat a few hundred
_MEMO_TEXT = 256  # longer texts are not remembered: they rarely come back, and could be large
_resolved: dict[str, str] = {}
_SCALAR_NODE = yaml.ScalarNode
_SEQUENCE_NODE = yaml.SequenceNode
_scalars: dict[tuple[str, str], Any] = {}


class _Loader(_BaseLoader):
    """libyaml's safe loader with the implicit tag of a plain scalar memoised by its text.

    The resolver matches a plain scalar against PyYAML's regular expressions, from Python, for
    every value libyaml composes: a third of the loader's time on a job config, where the same
    few hundred words (keys, `true`, small numbers) come back in every document. The tag
    depends on the text alone (this loader has no path resolvers), so the memo answers the same.
    """

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is _SCALAR_NODE:
            if not implicit[0]:
                return _STR_TAG
            tag = _resolved.get(value)
            if tag is None:
                tag = super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]
                if len(_resolved) < _MEMO_SIZE and len(value) <= _MEMO_TEXT:
                    _resolved[value] = tag
            return tag
        return _SEQ_TAG if kind is _SEQUENCE_NODE else _MAP_TAG

    # The composer calls these two around every node to follow path resolvers, which this
    # loader has none of (PyYAML's own return at once, but each is a call of a Python method
    # per node). C callables that take the same arguments and do nothing cost far less.
    descend_resolver = operator.is_  # type: ignore[assignment]  # (parent, index): ignored
    ascend_resolver = tuple  # type: ignore[assignment]  # (): ignored


@dataclass(frozen=True, slots=True)
class Loaded:
    data: Any
    format: str  # "yaml" or "json"
    text: str  # the document as decoded (byte order mark removed)
    # No string in `data` (keys included) can hold a NUL: each was read from the text, which
    # holds none, through no escape that makes one (see `_nul_free`). False when unsure.
    nul_free: bool = False


def load_document(
    raw: str | bytes,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    variables: Mapping[str, Any] | None = None,
) -> Loaded:
    """Parse one YAML or JSON document. Raises LoadError with a user-facing message.

    YAML is read as a template: a `{{ name }}` placeholder stands for a value wherever it is
    written, and becomes the text of `variables[name]` when given, else stays as written
    (see placeholders.py)."""
    text = _decode(raw, max_bytes)
    stripped = text.lstrip()
    if not stripped or (
        stripped[0] == "#"  # else its first line holds more than a comment
        and all(line.lstrip().startswith("#") for line in stripped.splitlines() if line)
    ):
        raise LoadError("empty-document", "the document is empty: expected a job or a component")
    if stripped[0] in "{[":
        data, literal = _load_json(text)
        return Loaded(data, "json", text, literal and _nul_free(text))
    data, literal = _load_yaml(text, variables)
    return Loaded(data, "yaml", text, literal and not variables and _nul_free(text))


# The escapes that write a NUL: YAML's double-quoted \0, \x00, \u0000 and \U00000000, and
# JSON's \u0000 (an escaped backslash before a zero only makes this look twice).
_NUL_ESCAPE = re.compile(r"\\(?:0|x00|u0000|U00000000)")


def _nul_free(text: str) -> bool:
    """Whether data read from `text` as written (no binary, no variables) holds no NUL: the
    text itself holds none (`_decode`), so only an escape can make one."""
    return "\\" not in text or _NUL_ESCAPE.search(text) is None


def _decode(raw: str | bytes, max_bytes: int) -> str:
    # Text decoded from UTF-8 bytes, and text that encodes as it is, are known to be valid:
    # only other text is checked for lone surrogates (after the size and NUL checks, as ever).
    valid = True
    if isinstance(raw, bytes):
        size = len(raw)
    else:
        try:
            size = len(raw.encode("utf-8"))
        except UnicodeEncodeError:
            size, valid = len(raw.encode("utf-8", "surrogatepass")), False
    if size > max_bytes:
        raise LoadError(
            "too-large",
            f"the document is {size} bytes; the limit is {max_bytes} bytes",
        )
    if isinstance(raw, bytes):
        if b"\x00" in raw:
            raise LoadError("binary", "the document is binary data, not YAML or JSON text")
        try:
            raw = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise LoadError(
                "not-utf8",
                f"the document is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                f"{exc.start})",
            ) from None
    if "\x00" in raw:
        raise LoadError("binary", "the document is binary data, not YAML or JSON text")
    if not valid:
        _check_encodable(raw)
    return raw


# ---------------------------------------------------------------------------- JSON


def _load_json(text: str) -> tuple[Any, bool]:
    """The data, and whether its strings are all written in the text (see `_load_yaml`)."""
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise _too_deep() from None
    except _DuplicateKey:
        raise _duplicate_key(text) from None
    except json.JSONDecodeError as exc:
        hint = _jsonc_hint(text)
        if hint:
            raise LoadError(hint[0], hint[1]) from None
        try:  # a YAML flow mapping also starts with "{"
            return _load_yaml(text)
        except LoadError:
            pass
        raise LoadError(
            "json-syntax",
            f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
        ) from None
    except ValueError:  # the only one json raises past syntax: an over-long integer
        raise _huge_number() from None
    # Each value begins at a character of its own, and each level of nesting at a bracket:
    # a text with few enough of both cannot cross either limit.
    if len(text) > MAX_VALUES or text.count("[") + text.count("{") >= MAX_DEPTH:
        _check_data_depth(data)
    if "\\u" in text:  # only a "\ud800" escape decodes to a surrogate: the text holds none
        _check_encodable(json.dumps(data, ensure_ascii=False))
    return data, True


# ---------------------------------------------------------------------------- YAML


def _load_yaml(text: str, variables: Mapping[str, Any] | None = None) -> tuple[Any, bool]:
    """The data, and whether every string in it (keys too) is a scalar of the text as written
    or a placeholder's value: false when a constructor made one (binary data)."""
    masked = mask(text)
    try:
        data, literal = _load_masked_yaml(masked.text)
        return masked.restore(data, variables), literal
    except LoadError as exc:
        hint = _quote_hint(text, exc.line) if exc.issue.code == "yaml-syntax" else ""
        if not hint:
            raise
        raise LoadError(exc.issue.code, exc.issue.message + hint, exc.line) from None


def _quote_hint(text: str, line: int | None) -> str:
    """What to try where the YAML itself is wrong: quoting the value on that line."""
    lines = text.splitlines()
    if line is None or not 0 < line <= len(lines):
        return ""  # not a parser's stop (a tab, an unsupported feature): quoting is no help
    written = lines[line - 1].strip()
    item = written.startswith("- ")
    body = written.removeprefix("- ").split(" #")[0].strip()
    key, colon, value = body.partition(": ")
    if not colon or not re.fullmatch(r"[\w.$-]+", key):
        key, value = "", body  # a list item as a whole
    value = value.strip()
    if not value or value.startswith(("'", '"')) or not (item or key):
        return ""
    quote = "'" if '"' in value else '"'
    lead = "- " if item else ""
    written_key = f"{key}: " if key else ""
    quoted = f"{lead}{written_key}{quote}{value}{quote}"
    return f"; if `{value}` is one value, put it in quotes: {quoted}"


def _load_masked_yaml(text: str) -> tuple[Any, bool]:
    # Both bounds count characters of the text, so a text short enough cannot cross either:
    # the common config skips splitting its lines (no line is longer than the text).
    brackets = text.count("[") + text.count("{")
    if len(text) + brackets > _SAFE_COMPOSE_DEPTH and _nesting_bound(text) > _SAFE_COMPOSE_DEPTH:
        _check_event_depth(text)
    if len(text) >= MAX_VALUES and _values_bound(text) > MAX_VALUES:
        _check_value_count(text)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise LoadError(
                "empty-document", "the document is empty: expected a job or a component"
            )
        try:  # the common document: checked as it is built, in one walk
            return _build(loader, node, 1, set()), True
        except (_Unusual, ValueError):
            pass
        # Anything else is checked first, alone, so it gets the error it always got (the first
        # found in `_check_tree`'s order, an over-long integer only after), then constructed.
        needs_plain, _ = _check_tree(node)
        data = loader.construct_document(node)
        return (_plain(data) if needs_plain else data), False
    except yaml.composer.ComposerError as exc:
        if "expected a single document" in str(exc):
            raise LoadError(
                "multiple-documents",
                "the file holds more than one YAML document (a '---' separator); a job "
                "config must be a single document",
            ) from None
        raise _yaml_error(exc) from None
    except yaml.YAMLError as exc:
        raise _tab_error(text, exc) or _yaml_error(exc) from None
    except RecursionError:
        raise _too_deep() from None
    except ValueError:  # the only one libyaml's constructors raise: an over-long integer
        raise _huge_number() from None
    finally:
        loader.dispose()


class _Unusual(Exception):
    """A document `_build` leaves to `_check_tree` and PyYAML's constructor."""


def _build(loader: yaml.SafeLoader, node: yaml.Node, depth: int, built: set[int]) -> Any:
    """The data of a tree of plain mappings (string keys, each once), lists and scalars, as
    PyYAML's constructor makes it, without its per-node dispatch and two-step collections.

    _Unusual for anything else: another tag, a key given twice, a collection reached twice (an
    alias: `built` holds the ids of the collections built so far), or nesting that comes near
    the limit (recursive, so the depth is bounded here, before `_check_tree` has looked)."""
    cls = node.__class__
    if cls is _SCALAR_NODE:
        tag = node.tag
        if tag == _STR_TAG:
            return node.value
        if tag not in _PLAIN_SCALAR_TAGS:
            raise _Unusual
        key = (tag, node.value)
        try:
            return _scalars[key]
        except KeyError:
            pass
        value = loader.yaml_constructors[tag](loader, node)  # immutable: safe to share
        if len(_scalars) < _MEMO_SIZE and len(node.value) <= _MEMO_TEXT:
            _scalars[key] = value
        return value
    if depth >= MAX_DEPTH or id(node) in built:
        raise _Unusual
    built.add(id(node))
    depth += 1
    if cls is yaml.MappingNode:
        if node.tag != _MAP_TAG:
            raise _Unusual
        data: dict[str, Any] = {}
        pairs = node.value
        for key_node, value_node in pairs:
            if key_node.__class__ is not _SCALAR_NODE or key_node.tag != _STR_TAG:
                raise _Unusual  # a merge key, or one that is not a string
            data[key_node.value] = _build(loader, value_node, depth, built)
        if len(data) != len(pairs):
            raise _Unusual  # a key given twice: `_check_tree` says where
        return data
    if cls is _SEQUENCE_NODE and node.tag == _SEQ_TAG:
        return [_build(loader, item, depth, built) for item in node.value]
    raise _Unusual


def _tab_error(text: str, exc: yaml.YAMLError) -> LoadError | None:
    """A tab in the indentation of the line the parser stopped at (or of the line before) is
    what broke the document: say so, with that line, instead of the parser's words."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return None
    lines = text.splitlines()[: exc.problem_mark.line + 1]
    for number in range(len(lines), max(0, len(lines) - 2), -1):
        line = lines[number - 1]
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if "\t" in indent:
            return LoadError(
                "yaml-syntax",
                f"line {number} uses a tab; YAML indents with spaces: replace the tab with "
                "spaces, as many as the lines around it use",
            )
    return None


def _yaml_error(exc: yaml.YAMLError) -> LoadError:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        what = exc.problem or "invalid YAML"
        context = f" ({exc.context})" if exc.context else ""
        return LoadError(
            "yaml-syntax",
            f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {what}{context}",
            mark.line + 1,
        )
    return LoadError("yaml-syntax", f"invalid YAML: {exc}")


def _nesting_bound(text: str) -> int:
    """A cheap bound on nesting: block nesting needs a wider line, flow nesting a bracket."""
    longest = max(map(len, text.splitlines()), default=0)
    return longest + text.count("[") + text.count("{")


def _values_bound(text: str) -> int:
    """A cheap bound on the values a YAML text holds: each begins a line or follows one of
    these characters (a flow separator or bracket, a key's colon, an item's dash, a `?`)."""
    return 1 + sum(text.count(mark) for mark in ("\n", ",", "[", "{", ":", "-", "?"))


def _check_value_count(text: str) -> None:
    """Count the values with libyaml's event parser, stopping as soon as there are too many."""
    count = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionStartEvent)):
                count += 1
                if count > MAX_VALUES:
                    raise _too_many_values()
    except yaml.YAMLError as exc:
        raise _tab_error(text, exc) or _yaml_error(exc) from None


def _check_event_depth(text: str) -> None:
    """Measure nesting with libyaml's iterative event parser before anything recurses."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise _too_deep()
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError as exc:
        raise _yaml_error(exc) from None


def _check_tree(root: yaml.Node) -> tuple[bool, bool]:
    """The fast path of `_check_node_graph` for documents whose collections are not shared.

    Visits each collection once and never pushes scalars; the first collection reached twice
    (an alias) hands the whole document to `_check_node_graph`. Returns what it returns, and
    whether a collection is shared (then PyYAML's constructor builds it once, for both places).
    """
    if root.__class__ is yaml.ScalarNode:  # collections never push their scalars
        return root.tag in _NON_JSON_TAGS, False
    needs_plain = False
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if id(node) in seen:
            return _check_node_graph(root), True
        seen.add(id(node))
        if depth > MAX_DEPTH:
            raise _too_deep()
        leaves = False
        if node.__class__ is yaml.MappingNode:
            pairs = node.value
            if len(pairs) > 1 and len(
                {k.value for k, _ in pairs if k.__class__ is yaml.ScalarNode}
            ) < len(pairs):
                _check_unique_keys(node)  # some keys look alike (or are no scalars): look closer
            for key, value in node.value:
                if key.tag not in _KEY_TAGS:
                    needs_plain = True
                for part in (key, value):
                    if part.__class__ is yaml.ScalarNode:
                        leaves = True
                        if part.tag in _NON_JSON_TAGS:
                            needs_plain = True
                    else:
                        stack.append((part, depth + 1))
        else:  # a sequence
            for item in node.value:
                if item.__class__ is yaml.ScalarNode:
                    leaves = True
                    if item.tag in _NON_JSON_TAGS:
                        needs_plain = True
                else:
                    stack.append((item, depth + 1))
        if leaves and depth + 1 > MAX_DEPTH:
            raise _too_deep()
    return needs_plain, False


def _check_node_graph(root: yaml.Node) -> bool:
    """Reject documents nested too deeply, recursive aliases, and alias bombs.

    Walks the composed node graph once (iteratively, memoised per node), computing for each
    node how many values it expands to and how deep it reaches once aliases are expanded.
    Returns whether the constructed data needs `_plain` (a non-string key, a date, binary),
    so the common document is not walked a second time.
    """
    needs_plain = False
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if not children_done:
            if key in size:
                continue
            if key in in_progress:
                raise LoadError(
                    "recursive-alias", "the document refers to itself through a YAML alias"
                )
            in_progress.add(key)
            if isinstance(node, yaml.MappingNode):
                _check_unique_keys(node)
            if not needs_plain:
                needs_plain = _needs_plain(node)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node) if id(child) not in size)
            continue
        in_progress.discard(key)
        total, deepest = 1, 0
        for child in _children(node):
            child_key = id(child)
            if child_key not in size:
                raise LoadError(
                    "recursive-alias", "the document refers to itself through a YAML alias"
                )
            total += size[child_key]
            deepest = max(deepest, height[child_key])
        if total > MAX_NODES:
            raise LoadError(
                "alias-bomb",
                f"the document expands to more than {MAX_NODES} values through YAML "
                "aliases (&anchor / *alias); refusing to expand it",
            )
        if deepest + 1 > MAX_DEPTH:
            raise _too_deep()
        size[key] = total
        height[key] = deepest + 1
    return needs_plain


_KEY_TAGS = frozenset({_STR_TAG, "tag:yaml.org,2002:merge"})
_NON_JSON_TAGS = frozenset({"tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:binary"})


def _needs_plain(node: yaml.Node) -> bool:
    """Whether this node constructs to something JSON cannot hold as it is."""
    if isinstance(node, yaml.MappingNode):
        return any(k.tag not in _KEY_TAGS for k, _ in node.value)
    return node.tag in _NON_JSON_TAGS


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _check_unique_keys(node: yaml.MappingNode) -> None:
    """A key given twice in one mapping is an error, as in JSON (and in OpenPAI's js-yaml):
    PyYAML would keep the last value and drop the first without a word. Keys merged in with
    `<<` may be overridden; that is what merging is for. Keys are compared as written, since
    every key becomes a string."""
    seen: set[str] = set()
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
            continue
        identity = key.value  # 1 and '1' too: both become the key "1"
        if identity in seen:
            mark = key.start_mark
            raise LoadError(
                "yaml-duplicate-key",
                f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: duplicate key "
                f"{key.value!r} (a mapping may hold each key once)",
            )
        seen.add(identity)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        items: list[yaml.Node] = node.value  # the stubs type a node's value as Any
        return items
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _plain(value: Any) -> Any:
    """JSON-shaped data: string keys, dates as ISO text, so every later step can rely on it."""
    if isinstance(value, dict):
        return {_key(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (date, datetime)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return "null" if key is None else str(key)
