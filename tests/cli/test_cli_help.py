"""`paigraph ... --help` of every command: flags as flags, values as metavars (no Python or
click type names), sentences never broken before the line is full."""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from server.cli.main import app

WIDTH = 80
runner = CliRunner(env={"COLUMNS": str(WIDTH), "NO_COLOR": "1", "TERM": "dumb"})

TYPE_NAMES = re.compile(
    r"<[\w\[\], |]+>|\b(bool|str|int|float|list\[\w+\]|Path|TEXT|INTEGER|BOOLEAN|FILENAME)\b"
)


def commands(command: Any = None, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of every command and group of `paigraph`, the root first."""
    command = command or typer.main.get_command(app)
    yield path
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from commands(sub, (*path, name))


def command_at(path: tuple[str, ...]) -> Any:
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return command


def help_of(*path: str) -> str:
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    return result.stdout


ALL = list(commands())


@pytest.mark.parametrize("path", ALL, ids=[" ".join(p) or "paigraph" for p in ALL])
def test_help_names_values_by_metavar_and_no_types(path: tuple[str, ...]) -> None:
    shown = help_of(*path)
    found = TYPE_NAMES.search(shown)
    assert found is None, f"{found.group(0)!r} in\n{shown}"


@pytest.mark.parametrize("path", ALL, ids=[" ".join(p) or "paigraph" for p in ALL])
def test_help_breaks_a_sentence_only_where_the_line_is_full(path: tuple[str, ...]) -> None:
    shown = help_of(*path)
    description = shown.split("╭", 1)[0].splitlines()
    for line, following in pairwise(description):
        if line.strip() and following.strip() and not line.lstrip().startswith("Usage:"):
            first_word = following.split()[0]
            assert len(line.rstrip()) + 1 + len(first_word) > WIDTH - 2, (
                f"broken early: {line!r} / {following!r}"
            )
    # the help texts themselves hold no line breaks inside a paragraph
    text = command_at(path).help or ""
    assert all("\n" not in p for p in text.split("\n\n")), text


def test_flags_show_as_flags_and_values_by_what_they_are() -> None:
    validate = help_of("validate")
    assert re.search(r"--json +Print one JSON report", validate)
    assert re.search(r"\* +FILES +Job configs", validate)
    serve = help_of("serve")
    assert re.search(r"--port +PORT +The port to listen on", serve)
    assert re.search(r"--db +URL +Database URL", serve)
    assert re.search(r"--help +Show this message", serve)
    assert re.search(r"--param +-p +KEY=VALUE", help_of("resolve"))
    assert re.search(r"--token +TOKEN", help_of("submit"))
    assert "--version" in help_of()
