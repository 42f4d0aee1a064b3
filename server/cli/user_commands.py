"""`paigraph users list|remove|token`: the users on the database, directly (as `users add`).

Removing a user or resetting their token revokes their old tokens at once: a server on the
same database refuses them from the next request, and closes the websockets opened with them
within a second (see server/api/open_sockets.py). A removed user's jobs keep running and stay
on record under their name, and so do their marketplace items.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from server.cli.args import open_store_or_exit
from server.cli.output import console
from server.shapes.store_errors import StoreError  # plain exceptions: no database library

if TYPE_CHECKING:
    from server.shapes.values import User

out = console()
err = console(stderr=True)
_COLUMNS = ("NAME", "ADMIN", "VIRTUAL CLUSTERS", "ADDED", "REMOVED")

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="PAIGRAPH_DB",
        metavar="URL",
        help="Database URL: sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DB "
        "(default: a SQLite file in the user's data directory).",
    ),
]


def register(users_app: typer.Typer) -> None:
    @users_app.command("list")
    def users_list(
        removed: Annotated[
            bool, typer.Option("--removed", help="Also list the users who were removed.")
        ] = False,
        db: DbOption = None,
    ) -> None:
        """List the users: a table, or tab-separated lines when the output is not a terminal.

        Everyone may also submit to the virtual cluster `default`."""
        store = open_store_or_exit(db)
        try:
            users = store.list_users(removed=removed)
            rows = [_row(user, store.user_vcs(user.id)) for user in users]
        except StoreError as exc:
            _fail(exc)
        finally:
            store.close()
        if not out.is_terminal:
            for cells in (list(_COLUMNS), *rows):
                typer.echo("\t".join(cells))
            return
        table = Table(box=None, header_style="bold", pad_edge=False)
        for column in _COLUMNS:
            table.add_column(column, overflow="fold")
        for cells in rows:
            table.add_row(*map(escape, cells))
        out.print(table)

    @users_app.command("remove")
    def users_remove(
        name: Annotated[str, typer.Argument(help="The user to remove.")],
        db: DbOption = None,
    ) -> None:
        """Remove a user: their tokens stop working at once (open websockets included) and
        their virtual cluster memberships go. Their jobs keep running and stay on record under
        their name; their items stay (an admin can delete them)."""
        store = open_store_or_exit(db)
        try:
            store.remove_user(name)
        except StoreError as exc:
            _fail(exc)
        finally:
            store.close()
        err.print(f"removed user {escape(name)}; their tokens no longer work")

    @users_app.command("token")
    def users_token(
        name: Annotated[str, typer.Argument(help="The user whose token to replace.")],
        db: DbOption = None,
    ) -> None:
        """Give a user a new token in place of all their old ones (which stop working at once,
        open websockets included); print it alone on standard output."""
        store = open_store_or_exit(db)
        try:
            token = store.reset_token(name)
        except StoreError as exc:
            _fail(exc)
        finally:
            store.close()
        typer.echo(token)


def _row(user: User, vcs: list[str]) -> list[str]:
    return [
        user.name,
        "yes" if user.admin else "no",
        ", ".join(vcs) if vcs else "-",
        user.created_at.strftime("%Y-%m-%d %H:%M"),
        user.removed_at.strftime("%Y-%m-%d %H:%M") if user.removed_at else "-",
    ]


def _fail(exc: Exception) -> None:
    err.print(f"[red]error:[/red] {escape(str(exc))}")
    raise typer.Exit(1)
