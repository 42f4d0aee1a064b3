"""`paigraph --help` as a command line's help reads: flags as flags, values named by what they
are (`--port PORT`, `--db URL`), arguments in capitals, sentences whole.

typer prints Python's or click's type names and keeps a docstring's line breaks, so metavars
replace the types and each paragraph's lines are joined. Parameters are told apart by their
attributes, since typer carries its own copy of click's classes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Protocol

import typer
from typer.core import TyperCommand, TyperGroup

_PARAGRAPH = re.compile(r"\n\s*\n")


class _Param(Protocol):
    """What the help reads and sets on a parameter of either click (see the module's note)."""

    name: str | None
    metavar: str | None
    opts: list[str]
    display_type_rich: Callable[..., str | None]


def unwrapped(text: str | None) -> str | None:
    """`text` with the lines of each paragraph joined: paragraphs are separated by blank
    lines, and the help formatter wraps them to the terminal's width itself."""
    if text is None:
        return None
    paragraphs = _PARAGRAPH.split(text.strip())
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def _is_argument(param: object) -> bool:
    return getattr(param, "param_type_name", "") == "argument"


def _label(param: _Param) -> str | None:
    """What the help shows after the parameter's name: None for a flag and for an argument
    (whose name is shown already), else its metavar."""
    if _is_argument(param) or getattr(param, "is_flag", False) or getattr(param, "count", False):
        return None
    if param.metavar:
        return param.metavar
    long = [o for o in param.opts if o.startswith("--")] or param.opts
    return long[0].lstrip("-").replace("-", "_").upper()


def plain(param: _Param) -> None:
    """Make `param` show a metavar instead of a type, whichever typer formats the help."""
    label = _label(param)
    if _is_argument(param):
        param.metavar = param.metavar or (param.name or "").upper()
    elif label is not None:
        param.metavar = label
    param.display_type_rich = lambda ctx=None, **_: label


class _PlainHelp:
    """Help that shows metavars, not types, and whole sentences (mixed into click's classes)."""

    help: str | None

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self.help = unwrapped(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        params: list[Any] = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            plain(param)
        return params


class PlainCommand(_PlainHelp, TyperCommand):
    """A command whose help shows metavars, not types, and whole sentences."""


class PlainGroup(_PlainHelp, TyperGroup):
    """A group of commands whose help shows metavars, not types, and whole sentences."""


class Typer(typer.Typer):
    """typer.Typer whose groups and commands show metavars in their help."""

    def __init__(self, **options: Any) -> None:
        super().__init__(cls=PlainGroup, **options)

    def command(self, *args: Any, **options: Any) -> Callable[..., Any]:
        return super().command(*args, cls=PlainCommand, **options)
