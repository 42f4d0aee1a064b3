"""The simulated HDFS through GraphQL: list, read, write, make directories and remove.

Lets a person fill and read the `hdfs://` trees jobs on the simulator use, as `hdfs dfs`
would; each acts on the viewer's own trees (an admin may name a `user`), and contents travel
as base64 in parts of at most READ_LIMIT / WRITE_LIMIT bytes, within the body limit.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from datetime import UTC, datetime
from functools import partial
from typing import TypeVar

import strawberry

from server.api.context import Info
from server.api.graph_types import UserError
from server.api.mutation_field import mutation
from simulator.dfs import DfsError, DfsFull, DfsNotFound, FileSystems

READ_LIMIT = 512 << 10  # bytes of a file one `fileContent` returns
WRITE_LIMIT = 512 << 10  # bytes one `putFile` takes (base64 makes it 4/3 of that)

T = TypeVar("T")


@strawberry.type(description="A file or directory of a simulated file system.")
class FileEntry:
    name: str
    uri: str = strawberry.field(description="hdfs://host:port/path")
    directory: bool
    size: float = strawberry.field(description="Bytes (of everything under it, for a directory).")
    modified_at: datetime


@strawberry.type
class FileListingPayload:
    uri: str | None = strawberry.field(description="The location listed, as hdfs://host:port/path.")
    directory: bool = strawberry.field(description="Whether `uri` is a directory (else a file).")
    entries: list[FileEntry]
    errors: list[UserError]


@strawberry.type
class FileContentPayload:
    uri: str | None
    content_base64: str | None = strawberry.field(
        description="At most 512 KiB of the file from `offset`, base64."
    )
    offset: float
    size: float | None = strawberry.field(description="The whole file's size in bytes.")
    errors: list[UserError]


@strawberry.type
class FilePayload:
    uri: str | None = strawberry.field(
        description="The location changed, as hdfs://host:port/path."
    )
    errors: list[UserError]


@strawberry.input
class PutFileInput:
    uri: str = strawberry.field(description="hdfs://host:port/path, or /path on the default one.")
    content_base64: str = strawberry.field(description="The bytes, base64; at most 512 KiB.")
    overwrite: bool = False
    append: bool = strawberry.field(
        default=False, description="Add to the file (a large file is put in parts)."
    )
    user: str | None = strawberry.field(default=None, description="Admins: another user's.")


@strawberry.input
class MakeDirectoryInput:
    uri: str
    user: str | None = None


@strawberry.input
class RemoveFileInput:
    uri: str
    recursive: bool = False
    user: str | None = None


class _Refused(Exception):
    def __init__(self, path: str, code: str, message: str) -> None:
        super().__init__(message)
        self.error = UserError(path=[path], code=code, message=message)


def _file_systems(info: Info) -> FileSystems:
    found = getattr(info.context.runtime.backend, "file_systems", None)
    if not isinstance(found, FileSystems):
        raise _Refused(
            "uri",
            "unavailable",
            "this server's backend keeps no simulated file system (only the Docker simulator "
            "does; on Kubernetes, hdfs:// locations are mapped to storages by the operator)",
        )
    return found


def _owner(info: Info, user: str | None) -> str:
    """Whose trees: the viewer's, or (admins only) the named user's."""
    viewer = info.context.viewer
    if user is None or user == viewer.name:
        return viewer.name
    if not viewer.admin:
        raise _Refused(
            "user", "forbidden", f"only an admin may reach the files of another user ({user!r})"
        )
    return user


async def _run(info: Info, user: str | None, work: partial[T]) -> T:
    """`work(file_systems, owner)` in a worker thread; its DfsError becomes a _Refused."""
    systems = _file_systems(info)
    owner = _owner(info, user)
    try:
        return await asyncio.to_thread(work, systems, owner)
    except DfsNotFound as exc:
        raise _Refused("uri", "not-found", str(exc)) from None
    except DfsFull as exc:
        raise _Refused("uri", "full", str(exc)) from None
    except DfsError as exc:
        raise _Refused("uri", "invalid", str(exc)) from None
    except OSError as exc:
        raise _Refused("uri", "failed", f"the file operation failed: {exc}") from None


def _list(systems: FileSystems, owner: str, uri: str) -> tuple[str, bool, list[FileEntry]]:
    location = systems.parse(uri)
    directory = location.path == "/" or systems.host_path(owner, location).is_dir()
    entries = [
        FileEntry(
            name=e.name,
            uri=e.uri,
            directory=e.directory,
            size=float(e.size),
            modified_at=datetime.fromtimestamp(e.modified, UTC),
        )
        for e in systems.list(owner, uri)
    ]
    return location.uri, directory, entries


def _read(
    systems: FileSystems, owner: str, uri: str, offset: int, length: int
) -> tuple[str, bytes, int]:
    data, size = systems.read(owner, uri, offset=offset, length=length)
    return systems.parse(uri).uri, data, size


def _write(systems: FileSystems, owner: str, given: PutFileInput, data: bytes) -> str:
    written = systems.write(owner, given.uri, data, overwrite=given.overwrite, append=given.append)
    return written.uri


def _mkdir(systems: FileSystems, owner: str, uri: str) -> str:
    return systems.mkdir(owner, uri).uri


def _remove(systems: FileSystems, owner: str, uri: str, recursive: bool) -> str:
    return systems.remove(owner, uri, recursive=recursive).uri


@strawberry.type
class Query:
    @strawberry.field(
        description="The entries of a directory (or the one of a file) of the viewer's simulated "
        "file system (the Docker simulator's HDFS); `uri` is hdfs://host:port/path or /path on "
        "the default one. Admins may name another `user`."
    )
    async def file_listing(
        self, info: Info, uri: str = "/", user: str | None = None
    ) -> FileListingPayload:
        try:
            listed, directory, entries = await _run(info, user, partial(_list, uri=uri))
        except _Refused as refused:
            return FileListingPayload(uri=None, directory=False, entries=[], errors=[refused.error])
        return FileListingPayload(uri=listed, directory=directory, entries=entries, errors=[])

    @strawberry.field(
        description="Part of a file of the viewer's simulated file system: at most 512 KiB "
        "from `offset` (read the rest with a larger offset)."
    )
    async def file_content(
        self, info: Info, uri: str, offset: float = 0, user: str | None = None
    ) -> FileContentPayload:
        try:
            found, data, size = await _run(
                info, user, partial(_read, uri=uri, offset=int(offset), length=READ_LIMIT)
            )
        except _Refused as refused:
            return FileContentPayload(
                uri=None, content_base64=None, offset=offset, size=None, errors=[refused.error]
            )
        return FileContentPayload(
            uri=found,
            content_base64=base64.b64encode(data).decode("ascii"),
            offset=offset,
            size=float(size),
            errors=[],
        )


@strawberry.type
class Mutation:
    @mutation(
        description="Write a file of the viewer's simulated file system (parents made as "
        "needed), within its bound (the simulator setting dfs_max_mb)."
    )
    async def put_file(self, info: Info, input: PutFileInput) -> FilePayload:
        try:
            data = base64.b64decode(input.content_base64, validate=True)
        except (binascii.Error, ValueError):
            error = UserError(path=["contentBase64"], code="invalid", message="not base64")
            return FilePayload(uri=None, errors=[error])
        if len(data) > WRITE_LIMIT:
            error = UserError(
                path=["contentBase64"],
                code="too-large",
                message=f"one putFile takes at most {WRITE_LIMIT} bytes; put a larger file "
                "in parts (append: true)",
            )
            return FilePayload(uri=None, errors=[error])
        try:
            written = await _run(info, input.user, partial(_write, given=input, data=data))
        except _Refused as refused:
            return FilePayload(uri=None, errors=[refused.error])
        return FilePayload(uri=written, errors=[])

    @mutation(description="Make a directory (and its parents) of the viewer's file system.")
    async def make_directory(self, info: Info, input: MakeDirectoryInput) -> FilePayload:
        try:
            made = await _run(info, input.user, partial(_mkdir, uri=input.uri))
        except _Refused as refused:
            return FilePayload(uri=None, errors=[refused.error])
        return FilePayload(uri=made, errors=[])

    @mutation(
        description="Remove a file, or a directory (`recursive` when it is not empty), of the "
        "viewer's simulated file system."
    )
    async def remove_file(self, info: Info, input: RemoveFileInput) -> FilePayload:
        try:
            removed = await _run(
                info, input.user, partial(_remove, uri=input.uri, recursive=input.recursive)
            )
        except _Refused as refused:
            return FilePayload(uri=None, errors=[refused.error])
        return FilePayload(uri=removed, errors=[])
