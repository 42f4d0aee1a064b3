"""`paigraph market ...` (a server's marketplace, over GraphQL) and `paigraph storages ...`
(admin-defined storages, on the database directly like `paigraph users add`).

`market` talks to `--url` / PAIGRAPH_URL with `--token` / PAIGRAPH_TOKEN, through the same
public API a web frontend uses. Items are named by their ID or, where it is unambiguous, their name.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from server.cli.args import parse_params
from server.cli.help import Typer
from server.cli.output import console
from server.client.market_client import MarketClient
from server.client.remote import DEFAULT_URL, Client, RemoteError
from server.client.remote_commands import TokenOption, UrlOption
from server.client.storage_commands import storages_app

__all__ = ["market_app", "register", "storages_app"]

out = console()
err = console(stderr=True)

TYPES = ("job_template", "dockerimage", "data", "script", "storage", "output", "plugin")
SORTS = ("recent", "stars", "submits")
VISIBILITIES = ("public", "private", "groups")
IMPORTED_SUFFIXES = (".yaml", ".yml", ".json")


def _call(action: Callable[[], Any]) -> Any:
    try:
        return action()
    except RemoteError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None


def _print_errors(errors: list[dict[str, Any]], indent: str = "  ") -> None:
    for e in errors:
        where = ".".join(e["path"]) or "(document)"
        err.print(
            f"{indent}{escape(where)}: {escape(e['message'])} [dim]\\[{escape(e['code'])}][/dim]"
        )


def _choice(value: str | None, choices: tuple[str, ...], option: str) -> str | None:
    if value is None:
        return None
    if value.lower() not in choices:
        err.print(
            f"[red]error:[/red] {option} must be one of {', '.join(choices)}, got {escape(value)!r}"
        )
        raise typer.Exit(2)
    return value.lower()


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        err.print(f"[red]error:[/red] cannot read {escape(str(path))}: {escape(str(exc))}")
        raise typer.Exit(2) from None


_COLUMNS = ("ID", "NAME", "VERSION", "TYPE", "OWNER", "STARS", "SUBMITS", "SUMMARY")


def _row(item: dict[str, Any]) -> list[str]:
    summary = " ".join((item.get("summary") or "").split())
    return [
        item["id"],
        item["name"],
        item["version"],
        item["type"].lower(),
        item["owner"]["name"],
        str(item["stars"]),
        str(item["submits"]),
        summary,
    ]


def _print_items(items: list[dict[str, Any]]) -> None:
    """A table on a terminal; tab-separated lines (a header first) for other programs."""
    if not out.is_terminal:
        for cells in (list(_COLUMNS), *map(_row, items)):
            typer.echo("\t".join(cells))
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in _COLUMNS:
        # folded, never cut short: an ID or a name is only of use whole
        table.add_column(column, overflow="fold")
    for item in items:
        table.add_row(*map(escape, _row(item)))
    out.print(table)


def _publish_values(
    version: str | None,
    summary: str | None,
    tags: list[str] | None,
    categories: list[str] | None,
    visibility: str | None,
    groups: list[str] | None,
) -> dict[str, Any]:
    values: dict[str, Any] = {
        "version": version,
        "summary": summary,
        "tags": tags or None,
        "categories": categories or None,
        "visibility": visibility.upper() if visibility else None,
        "groups": groups or None,
    }
    return {k: v for k, v in values.items() if v is not None}


def _variable_values(pairs: list[str]) -> dict[str, str]:
    """`--set NAME=VALUE` pairs as text (a template variable is filled in as written)."""
    values: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            err.print(f"[red]error:[/red] --set takes NAME=VALUE, got {escape(pair)!r}")
            raise typer.Exit(2)
        values[name.strip()] = value
    return values


market_app = Typer(help="Share and reuse job templates and components.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add `market` and `storages` to the `paigraph` command."""
    app.add_typer(market_app, name="market")
    app.add_typer(storages_app, name="storages")


@market_app.command("list")
def market_list(
    type_: Annotated[
        str | None, typer.Option("--type", help=f"Only items of a type: {', '.join(TYPES)}.")
    ] = None,
    search: Annotated[
        str | None, typer.Option("--search", help="Text in the name, summary or description.")
    ] = None,
    tag: Annotated[str | None, typer.Option("--tag", help="Only items with this tag.")] = None,
    owner: Annotated[str | None, typer.Option("--owner", help="Only this user's items.")] = None,
    sort: Annotated[str, typer.Option("--sort", help="recent, stars or submits.")] = "recent",
    limit: Annotated[
        int, typer.Option("--limit", min=1, help="Show at most this many items.")
    ] = 50,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """List the marketplace items you may see: a table, or tab-separated lines when the
    output is not a terminal."""
    where = {
        "type": (_choice(type_, TYPES, "--type") or "").upper() or None,
        "search": search,
        "tag": tag,
        "owner": owner,
    }
    where = {k: v for k, v in where.items() if v is not None}
    chosen = _choice(sort, SORTS, "--sort") or "recent"
    market = MarketClient(Client(url, token or None))
    listed_items: list[dict[str, Any]] = []
    more = False

    def read() -> None:
        nonlocal more
        for item, follows in market.items(where, chosen, page=min(limit, 100)):
            listed_items.append(item)
            if len(listed_items) == limit:
                more = follows
                return

    _call(read)
    if not listed_items:
        out.print("no marketplace items match")
        return
    _print_items(listed_items)
    if more:
        err.print(f"[dim]more items match; raise --limit (it is {limit}) to see them[/dim]")


@market_app.command("show")
def market_show(
    item: Annotated[str, typer.Argument(help="The item's ID or name.")],
    version: Annotated[
        str | None, typer.Option("--version", help="A version (default: the latest).")
    ] = None,
    content: Annotated[
        bool, typer.Option("--content", help="Print only the YAML content.")
    ] = False,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Show an item: what it is, its versions, and its content."""
    market = MarketClient(Client(url, token or None))
    found = _call(lambda: market.item(item, version))
    if content:
        typer.echo(found["content"], nl=not found["content"].endswith("\n"))
        return
    out.print(f"[bold]{escape(found['name'])}[/bold] {escape(found['version'])}  ({found['id']})")
    rows = [
        ("type", found["type"].lower()),
        ("owner", found["owner"]["name"]),
        (
            "visibility",
            found["visibility"].lower()
            + (f" ({', '.join(found['groups'])})" if found["groups"] else ""),
        ),
        (
            "stars",
            f"{found['stars']}" + (" (starred by you)" if found["viewerHasStarred"] else ""),
        ),
        ("submits", str(found["submits"])),
        ("tags", ", ".join(found["tags"]) or "-"),
        (
            "versions",
            ", ".join(
                v["version"] + (" (latest)" if v["latest"] else "") for v in found["versions"]
            ),
        ),
        ("summary", found.get("summary") or "-"),
    ]
    if found["templateVariables"]:
        rows.append(("template variables", ", ".join(found["templateVariables"])))
    if found["parameters"]:
        rows.append(("parameters", ", ".join(f"{k}={v}" for k, v in found["parameters"].items())))
    for role in found["taskRoles"]:
        image = role["dockerImage"]["uri"] or [role["dockerImage"]["name"]]
        rows.append((f"task role {role['name']}", f"{role['instanceCount']} x {image[0]}"))
    for label, value in rows:
        out.print(f"  [dim]{label:<19}[/dim] {escape(value)}")
    if found.get("description"):
        out.print()
        out.print(escape(found["description"]))
    out.print()
    out.print(escape(found["content"]), end="" if found["content"].endswith("\n") else "\n")


@market_app.command("publish")
def market_publish(
    file: Annotated[Path, typer.Argument(help="A job template or a component (YAML or JSON).")],
    version: Annotated[
        str | None,
        typer.Option("--version", help="Default: the file's version, else the next number."),
    ] = None,
    summary: Annotated[str | None, typer.Option("--summary")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="A tag (repeatable).")] = None,
    category: Annotated[list[str] | None, typer.Option("--category")] = None,
    visibility: Annotated[
        str | None, typer.Option("--visibility", help="public, private or groups.")
    ] = None,
    group: Annotated[
        list[str] | None,
        typer.Option("--group", help="Share with this group (virtual cluster); repeatable."),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Publish an item, or a new version of your item of that name; print its ID."""
    values = _publish_values(
        version,
        summary,
        tag,
        category,
        _choice(visibility, VISIBILITIES, "--visibility"),
        group,
    )
    market = MarketClient(Client(url, token or None))
    result = _call(lambda: market.publish({**values, "content": _read_text(file)}))
    if result["errors"]:
        err.print(f"[red]REFUSED[/red] {escape(str(file))}")
        _print_errors(result["errors"])
        raise typer.Exit(1)
    item = result["item"]
    what = {
        "NEW_ITEM": "published",
        "NEW_VERSION": "published a new version of",
        "UNCHANGED": "already published:",
    }[result["outcome"]]
    err.print(f"{what} {escape(item['name'])} {escape(item['version'])} ({item['type'].lower()})")
    if result.get("warnings"):
        err.print("[yellow]warnings:[/yellow]")
        _print_errors(result["warnings"])
    out.print(item["id"])


@market_app.command("use")
def market_use(
    item: Annotated[str, typer.Argument(help="The item's ID or name.")],
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            "-p",
            metavar="KEY=VALUE",
            help="A template parameter or template variable: key=value.",
        ),
    ] = None,
    version: Annotated[str | None, typer.Option("--version", help="Pin a version.")] = None,
    image: Annotated[
        str | None,
        typer.Option("--image", help="The image a component's empty job runs in."),
    ] = None,
    submit: Annotated[
        bool, typer.Option("--submit", help="Submit the job and print its ID.")
    ] = False,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Print a job config made from the item, ready to submit (or submit it)."""
    market = MarketClient(Client(url, token or None))
    values: dict[str, Any] = {
        "id": _call(lambda: market.item_id(item)),
        "parameters": parse_params(param or []),
        "submit": submit,
    }
    if version is not None:
        values["version"] = version
    if image is not None:
        values["dockerImage"] = image
    result = _call(lambda: market.use(values))
    if result["errors"]:
        err.print(f"[red]REFUSED[/red] {escape(item)}")
        _print_errors(result["errors"])
        raise typer.Exit(1)
    if submit:
        out.print(result["job"]["id"])
        return
    typer.echo(result["config"], nl=not result["config"].endswith("\n"))


@market_app.command("star")
def market_star(
    item: Annotated[str, typer.Argument(help="The item's ID or name.")],
    unstar: Annotated[bool, typer.Option("--unstar", help="Take your star back.")] = False,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Star an item (or unstar it)."""
    market = MarketClient(Client(url, token or None))
    result = _call(lambda: market.star(market.item_id(item), not unstar))
    if result["errors"]:
        _print_errors(result["errors"], indent="error: ")
        raise typer.Exit(1)
    found = result["item"]
    verb = "unstarred" if unstar else "starred"
    out.print(f"{verb} {escape(found['name'])}: {found['stars']} star(s)")


@market_app.command("import")
def market_import(
    directory: Annotated[Path, typer.Argument(help="A directory of YAML / JSON items.")],
    tag: Annotated[list[str] | None, typer.Option("--tag", help="Tag every item.")] = None,
    visibility: Annotated[
        str | None, typer.Option("--visibility", help="public, private or groups.")
    ] = None,
    group: Annotated[list[str] | None, typer.Option("--group")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="NAME=VALUE",
            help="Fill in template variable NAME of every item that declares it "
            "(the items are published without it).",
        ),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Publish every job template and component in a directory and below it.

    Files the protocol engine rejects are reported with their errors and skipped; the exit
    status is 1 when any was."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from server.client.market_import import import_files  # the protocol engine: only here

    variables = _variable_values(set_ or [])
    if not directory.is_dir():
        err.print(f"[red]error:[/red] {escape(str(directory))} is not a directory")
        raise typer.Exit(2)
    files = sorted(
        p for p in directory.rglob("*") if p.is_file() and p.suffix.lower() in IMPORTED_SUFFIXES
    )
    if not files:
        err.print(f"[red]error:[/red] no .yaml, .yml or .json files in {escape(str(directory))}")
        raise typer.Exit(2)
    base = _publish_values(
        None, None, tag, None, _choice(visibility, VISIBILITIES, "--visibility"), group
    )
    market = MarketClient(Client(url, token or None))
    progress = Progress(
        TextColumn("importing"), BarColumn(), MofNCompleteColumn(), console=err, transient=True
    )
    with progress:
        task = progress.add_task("import", total=len(files))
        report = _call(
            lambda: import_files(
                market,
                files,
                base,
                out.print,
                lambda: progress.advance(task),
                variables,
            )
        )
    unused = sorted(set(variables) - report.variables_used)
    if unused:
        names = ", ".join(repr(name) for name in unused)
        err.print(
            f"[yellow]warning:[/yellow] --set {escape(names)}: no item in "
            f"{escape(str(directory))} declares such a template variable"
        )
    out.print(
        f"{report.published} published ({report.new_items} new items, "
        f"{report.new_versions} new versions), {report.unchanged} unchanged, "
        f"{len(report.rejected)} rejected, of {len(files)} files"
    )
    if report.rejected:
        raise typer.Exit(1)
