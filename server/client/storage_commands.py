"""`paigraph storages ...`: admin-defined storages, on the database directly.

Unlike `paigraph market ...` (`market_commands.py`), these commands do not go through a server;
they share nothing with the marketplace commands but `market_commands.register`, which adds
both groups to `paigraph`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from server.cli.args import open_store_or_exit
from server.cli.help import Typer
from server.cli.output import console

out = console()
err = console(stderr=True)


storages_app = Typer(
    help="Storages jobs may mount (an admin's job; works on the database directly).",
    no_args_is_help=True,
)


@storages_app.command("add")
def storages_add(
    name: Annotated[str, typer.Argument(help="The storage's name, as jobs refer to it.")],
    path: Annotated[
        Path | None, typer.Option("--path", help="A host directory (absolute).")
    ] = None,
    volume: Annotated[str | None, typer.Option("--volume", help="A Docker volume.")] = None,
    read_only: Annotated[bool, typer.Option("--read-only", help="Mount it read-only.")] = False,
    user: Annotated[
        list[str] | None, typer.Option("--user", help="A user who may use it (repeatable).")
    ] = None,
    group: Annotated[
        list[str] | None,
        typer.Option(
            "--group",
            help="A group (virtual cluster) whose members may use it; `default` is "
            "everyone (repeatable).",
        ),
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db", envvar="PAIGRAPH_DB", metavar="URL", help="Database URL (as for serve)."
        ),
    ] = None,
) -> None:
    """Define a storage: a host directory or a Docker volume, and who may use it (admins
    always may)."""
    from server.shapes.accounts import check_name
    from server.shapes.store_errors import StoreError

    if (path is None) == (volume is None):
        err.print("[red]error:[/red] give exactly one of --path and --volume")
        raise typer.Exit(2)
    if path is not None and not path.is_absolute():
        err.print(f"[red]error:[/red] --path must be absolute, got {escape(str(path))}")
        raise typer.Exit(2)
    try:
        check_name(name, "storage name")
        if volume is not None:
            check_name(volume, "volume name")
        for g in group or []:
            check_name(g, "group name")
    except StoreError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    store = open_store_or_exit(db)
    try:
        unknown = [u for u in user or [] if store.user_named(u) is None]
        if unknown:
            err.print(f"[red]error:[/red] no user named {', '.join(map(repr, unknown))}")
            raise typer.Exit(1)
        added = store.add_storage(
            name,
            str(path) if path is not None else str(volume),
            is_volume=volume is not None,
            read_only=read_only,
            users=user or [],
            groups=group or [],
        )
    except StoreError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None
    finally:
        store.close()
    if path is not None and not path.is_dir():
        err.print(f"[yellow]warning:[/yellow] {escape(str(path))} is not a directory here yet")
    out.print(_describe_storage(added))


@storages_app.command("list")
def storages_list(
    db: Annotated[
        str | None,
        typer.Option(
            "--db", envvar="PAIGRAPH_DB", metavar="URL", help="Database URL (as for serve)."
        ),
    ] = None,
) -> None:
    """List the storages and who may use them."""
    store = open_store_or_exit(db)
    try:
        found = store.list_storages()
    finally:
        store.close()
    if not found:
        out.print("no storages")
    for storage in found:
        out.print(_describe_storage(storage))


def _describe_storage(storage: Any) -> str:
    where = f"volume {storage.source}" if storage.is_volume else f"host directory {storage.source}"
    mode = "read-only" if storage.read_only else "read-write"
    who = [f"user {u}" for u in storage.users] + [f"group {g}" for g in storage.groups]
    return (
        f"{escape(storage.name)}: {escape(where)} ({mode}); may be used by "
        f"{escape(', '.join(who) or 'admins only')}"
    )
