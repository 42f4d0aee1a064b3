"""Command-line values every `paigraph` command group reads the same way: `--param key=value`
pairs and the `--db` store. Kept apart from server/cli/main.py so the command modules it registers
(market, storages, remote) import them instead of being handed them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from server.cli.output import console

if TYPE_CHECKING:
    from server.store import Store

err = console(stderr=True)


def parse_params(params: list[str]) -> dict[str, Any]:
    """`--param key=value` pairs as a mapping; a value is read as a YAML scalar (so `3` is a
    number and `true` a boolean), anything else is kept as the text given. Exit 2 when a pair
    has no `=` or no key."""
    import yaml  # here, not at the top: most commands take no --param

    values: dict[str, Any] = {}
    for item in params:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            err.print(f"[red]error:[/red] --param takes key=value, got {escape(item)!r}")
            raise typer.Exit(2)
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            value = raw
        values[key] = value if isinstance(value, (str, int, float, bool)) or value is None else raw
    return values


def open_store_or_exit(db: str | None) -> Store:
    """The store on `db`, migrated; exit 1 with the reason when the database is not usable."""
    from server.shapes.store_errors import StoreError
    from server.store import open_store

    try:
        return open_store(db)
    except StoreError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None
