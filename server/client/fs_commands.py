"""`paigraph fs ls | put | get | cat | mkdir | rm`: the simulated HDFS, like `hdfs dfs`.

A server on the Docker simulator keeps each user's `hdfs://host:port` file systems (and the
default one, PAI_DEFAULT_FS_URI); these commands fill and read the caller's own through the
GraphQL file operations, as a person would with `hdfs dfs` on a cluster. A location is
`hdfs://host:port/path`, or `/path` on the default file system.
"""

from __future__ import annotations

import base64
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from server.cli.help import Typer
from server.cli.output import console
from server.client.remote import DEFAULT_URL, Client, RemoteError
from server.client.remote_commands import TokenOption, UrlOption

out = console()
err = console(stderr=True)

fs_app = Typer(
    help="The simulated HDFS of the Docker simulator (your own trees), like `hdfs dfs`.",
    no_args_is_help=True,
)
PART = 512 << 10  # bytes per putFile, and per fileContent read

UserOption = Annotated[
    str | None,
    typer.Option(
        "--user", metavar="NAME", help="Admins: another user's files.", show_default=False
    ),
]

_LIST = (
    "query($uri: String!, $user: String) { fileListing(uri: $uri, user: $user) {"
    " uri directory entries { name uri directory size modifiedAt }"
    " errors { path code message } } }"
)
_READ = (
    "query($uri: String!, $offset: Float!, $user: String) {"
    " fileContent(uri: $uri, offset: $offset, user: $user) {"
    " uri contentBase64 size errors { path code message } } }"
)
_PUT = (
    "mutation($input: PutFileInput!) { putFile(input: $input) {"
    " uri errors { path code message } } }"
)
_MKDIR = (
    "mutation($input: MakeDirectoryInput!) { makeDirectory(input: $input) {"
    " uri errors { path code message } } }"
)
_REMOVE = (
    "mutation($input: RemoveFileInput!) { removeFile(input: $input) {"
    " uri errors { path code message } } }"
)


class Refused(Exception):
    """The server said no; the message is its error's."""


def register(app: typer.Typer) -> None:
    """Add `fs` to the `paigraph` command."""
    app.add_typer(fs_app, name="fs")


class Files:
    """The file operations of one server, for one user (or an admin acting for `user`)."""

    def __init__(self, client: Client, user: str | None) -> None:
        self.client = client
        self.user = user

    def _answer(self, field: str, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        payload: dict[str, Any] = self.client.execute(query, variables)[field]
        if payload["errors"]:
            raise Refused("; ".join(e["message"] for e in payload["errors"]))
        return payload

    def listing(self, uri: str) -> dict[str, Any]:
        return self._answer("fileListing", _LIST, {"uri": uri, "user": self.user})

    def read(self, uri: str) -> bytes:
        data, offset = bytearray(), 0
        while True:
            variables = {"uri": uri, "offset": offset, "user": self.user}
            part = self._answer("fileContent", _READ, variables)
            chunk = base64.b64decode(part["contentBase64"])
            data += chunk
            offset += len(chunk)
            if not chunk or offset >= int(part["size"]):
                return bytes(data)

    def write(self, uri: str, data: bytes, overwrite: bool) -> str:
        """Put `data` in parts; a file left half written (its bound reached) is removed."""
        written = ""
        for start in range(0, max(len(data), 1), PART):
            given = {
                "uri": uri,
                "contentBase64": base64.b64encode(data[start : start + PART]).decode("ascii"),
                "overwrite": overwrite,
                "append": start > 0,
                "user": self.user,
            }
            try:
                written = self._answer("putFile", _PUT, {"input": given})["uri"]
            except Refused:
                if start > 0:
                    self.remove(uri, recursive=False)
                raise
        return written

    def mkdir(self, uri: str) -> str:
        given = {"uri": uri, "user": self.user}
        return str(self._answer("makeDirectory", _MKDIR, {"input": given})["uri"])

    def remove(self, uri: str, recursive: bool) -> str:
        given = {"uri": uri, "recursive": recursive, "user": self.user}
        return str(self._answer("removeFile", _REMOVE, {"input": given})["uri"])


def _files(url: str, token: str | None, user: str | None) -> Files:
    return Files(Client(url, token or None), user)


def _fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(code)


def _joined(uri: str, name: str) -> str:
    return uri.rstrip("/") + "/" + name


@fs_app.command("ls")
def ls(
    uri: Annotated[str, typer.Argument(help="hdfs://host:port/path, or /path.")] = "/",
    recursive: Annotated[bool, typer.Option("-R", "--recursive", help="Everything under.")] = False,
    user: UserOption = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """List a directory (or a file) as `hdfs dfs -ls` does."""
    files = _files(url, token, user)

    def show(location: str) -> None:
        listed = files.listing(location)
        for entry in listed["entries"]:
            kind = "d" if entry["directory"] else "-"
            when = datetime.fromisoformat(entry["modifiedAt"]).strftime("%Y-%m-%d %H:%M")
            out.print(f"{kind} {int(entry['size']):>12} {when} {escape(entry['uri'])}")
            if recursive and entry["directory"]:
                show(entry["uri"])

    try:
        show(uri)
    except (Refused, RemoteError) as exc:
        raise _fail(str(exc)) from None


@fs_app.command("put")
def put(
    local: Annotated[Path, typer.Argument(help="A file or directory on this machine.")],
    uri: Annotated[str, typer.Argument(help="Where: hdfs://host:port/path, or /path.")],
    force: Annotated[bool, typer.Option("-f", "--force", help="Overwrite files.")] = False,
    user: UserOption = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Copy a local file or directory in (into URI when it is a directory)."""
    if not local.exists():
        raise _fail(f"{local}: no such file or directory", 2)
    files = _files(url, token, user)
    try:
        target = uri
        try:
            if files.listing(uri)["directory"]:
                target = _joined(uri, local.name)
        except Refused:
            pass  # a new name
        _put(files, local, target, force)
    except (Refused, RemoteError) as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"cannot read {exc.filename}: {exc.strerror}") from None


def _put(files: Files, local: Path, uri: str, force: bool) -> None:
    if local.is_dir():
        files.mkdir(uri)
        for child in sorted(local.iterdir()):
            _put(files, child, _joined(uri, child.name), force)
        return
    written = files.write(uri, local.read_bytes(), force)
    out.print(escape(written))


@fs_app.command("get")
def get(
    uri: Annotated[str, typer.Argument(help="hdfs://host:port/path, or /path.")],
    local: Annotated[Path, typer.Argument(help="Where on this machine.")] = Path("."),
    user: UserOption = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Copy a file or directory out (into LOCAL when it is a directory)."""
    files = _files(url, token, user)
    try:
        listed = files.listing(uri)
        name = listed["uri"].rstrip("/").rsplit("/", 1)[-1] or "root"
        target = local / name if local.is_dir() else local
        _get(files, listed, target)
    except (Refused, RemoteError) as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"cannot write {exc.filename}: {exc.strerror}") from None


def _get(files: Files, listed: dict[str, Any], target: Path) -> None:
    if not listed["directory"]:
        if target.exists():
            raise Refused(f"{target} exists")
        target.write_bytes(files.read(listed["uri"]))
        out.print(escape(str(target)))
        return
    target.mkdir(exist_ok=True)
    for entry in listed["entries"]:
        _get(files, files.listing(entry["uri"]), target / entry["name"])


@fs_app.command("cat")
def cat(
    uri: Annotated[str, typer.Argument(help="hdfs://host:port/path, or /path.")],
    user: UserOption = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Print a file."""
    try:
        data = _files(url, token, user).read(uri)
    except (Refused, RemoteError) as exc:
        raise _fail(str(exc)) from None
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


@fs_app.command("mkdir")
def mkdir(
    uri: Annotated[str, typer.Argument(help="hdfs://host:port/path, or /path.")],
    user: UserOption = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Make a directory and its parents."""
    try:
        out.print(escape(_files(url, token, user).mkdir(uri)))
    except (Refused, RemoteError) as exc:
        raise _fail(str(exc)) from None


@fs_app.command("rm")
def rm(
    uri: Annotated[str, typer.Argument(help="hdfs://host:port/path, or /path.")],
    recursive: Annotated[
        bool, typer.Option("-r", "--recursive", help="A directory and all under it.")
    ] = False,
    user: UserOption = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Remove a file, or a directory with -r."""
    try:
        out.print(f"Deleted {escape(_files(url, token, user).remove(uri, recursive))}")
    except (Refused, RemoteError) as exc:
        raise _fail(str(exc)) from None
