"""YAML for people to read: multi-line strings as block scalars, keys in the order given.

PyYAML writes a multi-line command as one double-quoted line full of `\\n` and `\\"`; a job
config is read and edited by people, so every string with a line break is written as a literal
block (`|`) whenever YAML can hold it that way (no trailing spaces on a line, printable text),
and quoted otherwise. What is written reads back to the same values.
"""

from __future__ import annotations

from typing import Any

import yaml

_Base: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_Base):  # type: ignore[misc, valid-type]
    """The safe dumper, with multi-line strings as literal blocks."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    """A literal block for text with line breaks; the emitter still falls back to quotes when
    a block cannot hold the text exactly."""
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def dump_yaml(document: Any) -> str:
    """`document` as block-style YAML: keys in insertion order, unicode as is, no folding."""
    return yaml.dump(
        document,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=1000,
    )
