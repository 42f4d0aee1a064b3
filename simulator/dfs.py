"""The simulated HDFS: each user's tree of each `hdfs://host:port`, under the state directory.

Real OpenPAI jobs read and write `hdfs://` paths this machine has not got, so each file system a
job names is a bounded directory tree of the asking user (docs/architecture.md). Everything
here blocks; callers run it in a worker thread.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

from simulator.names import safe

SCHEME = "hdfs"
LIMIT_SETTING = "dfs_max_mb"  # the simulator setting that bounds each tree

# letters, digits, '.', '-' and (as placeholders such as YOUR_PAI_MASTER_IP have them) '_'
_HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]{0,251}[A-Za-z0-9_])?")
_AUTHORITY = re.compile(r"(?P<host>[^:/@\s]+)(?::(?P<port>\d{1,5}))?")


class DfsError(Exception):
    """A file operation that cannot be done; the message names the path and the reason."""


class DfsNotFound(DfsError):
    pass


class DfsFull(DfsError):
    """The write would take the tree past its bound."""


def is_dfs_uri(uri: str) -> bool:
    """Whether `uri` names a (simulated) HDFS location."""
    return uri[: len(SCHEME) + 3].lower() == f"{SCHEME}://"


def authority_of(uri: str) -> str:
    """`host:port` (lower-case host; the port as written, or none) of an `hdfs://` URI."""
    if not is_dfs_uri(uri):
        raise DfsError(f"{uri!r} is not an hdfs:// URI")
    netloc = urlsplit(uri).netloc
    match = _AUTHORITY.fullmatch(netloc)
    if not match or not _HOST.fullmatch(match["host"]):
        raise DfsError(f"{uri!r} names no file system host (write hdfs://host:port/path)")
    port = match["port"]
    if port is not None and not 0 < int(port) < 65536:
        raise DfsError(f"{uri!r}: port {port} is not a port number")
    host = match["host"].lower()
    return f"{host}:{port}" if port else host


@dataclass(frozen=True)
class DfsPath:
    """A location on a simulated file system: which one, and the absolute path in it."""

    authority: str  # host:port
    path: str  # absolute, normalised, "/" for the root

    @property
    def uri(self) -> str:
        return f"{SCHEME}://{self.authority}{self.path}"

    def parts(self) -> tuple[str, ...]:
        return PurePosixPath(self.path).parts[1:]


def parse(uri: str, default_authority: str) -> DfsPath:
    """A `hdfs://host:port/path`, `hdfs:///path` (the default file system) or bare `/path`
    (the default file system, as `hdfs dfs` reads it). `..` may not climb above the root."""
    text = uri.strip()
    if is_dfs_uri(text):
        netloc = urlsplit(text).netloc
        authority = authority_of(text) if netloc else default_authority
        raw = unquote(urlsplit(text).path) or "/"
    elif text.startswith("/"):
        authority, raw = default_authority, text
    else:
        raise DfsError(f"{uri!r} is neither an hdfs:// URI nor an absolute path")
    if "\0" in raw:
        raise DfsError(f"{uri!r} holds a NUL byte")
    parts: list[str] = []
    for part in raw.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise DfsError(f"{uri!r} climbs above the root of its file system")
            parts.pop()
            continue
        parts.append(part)
    return DfsPath(authority, "/" + "/".join(parts))


@dataclass(frozen=True)
class Entry:
    """One entry of a listing."""

    name: str
    uri: str
    directory: bool
    size: int  # bytes; for a directory, everything under it
    modified: float  # seconds since the epoch


class FileSystems:
    """Every user's simulated file systems, under `root`.

    default_authority: the host:port of the default file system (PAI_DEFAULT_FS_URI).
    max_bytes: the most one user's tree of one file system may hold.
    """

    def __init__(self, root: Path, *, default_authority: str, max_bytes: int) -> None:
        self.root = Path(root)
        self.default_authority = default_authority
        self.max_bytes = max_bytes

    @property
    def default_uri(self) -> str:
        return f"{SCHEME}://{self.default_authority}"

    # --- where things are --------------------------------------------------------------------

    def user_root(self, user: str) -> Path:
        """The folder holding every tree of `user` (what a job of theirs has mounted)."""
        return self.root / "users" / safe(user or "local")

    def tree(self, user: str, authority: str) -> Path:
        return self.user_root(user) / authority

    def parse(self, uri: str) -> DfsPath:
        return parse(uri, self.default_authority)

    def host_path(self, user: str, location: DfsPath) -> Path:
        """The host path of `location` in `user`'s tree. Symlinks a job left in the tree are
        never followed out of it: a path through one is refused."""
        tree = self.tree(user, location.authority)
        path = tree.joinpath(*location.parts())
        here = tree
        for part in location.parts():
            here = here / part
            if here.is_symlink():
                raise DfsError(f"{location.uri}: {part!r} is a symbolic link (not followed)")
        return path

    def resolve(self, user: str, uri: str) -> Path:
        return self.host_path(user, self.parse(uri))

    # --- sizes -------------------------------------------------------------------------------

    def used_bytes(self, user: str, authority: str) -> int:
        return _size(self.tree(user, authority))

    def make_room(self, user: str, authority: str, adding: int, what: str) -> None:
        """Refuse (DfsFull) a write of `adding` bytes that would take the tree past its bound."""
        used = self.used_bytes(user, authority)
        if used + adding > self.max_bytes:
            raise DfsFull(
                f"{what}: the simulated file system {SCHEME}://{authority} of user {user!r} "
                f"holds {_mb(used)} MB; {_mb(adding)} MB more would pass its bound of "
                f"{_mb(self.max_bytes)} MB (the simulator setting {LIMIT_SETTING})"
            )

    def check_within_bound(self, user: str, authority: str, what: str) -> None:
        """Refuse (DfsFull) when the tree is already past its bound (written by jobs)."""
        self.make_room(user, authority, 0, what)

    # --- operations --------------------------------------------------------------------------

    def list(self, user: str, uri: str) -> list[Entry]:
        """The entries of a directory (sorted by name), or the one entry of a file."""
        location = self.parse(uri)
        path = self.host_path(user, location)
        info = _lstat(path)
        if info is None:
            if location.path == "/":
                return []  # an empty file system
            raise DfsNotFound(f"{location.uri}: no such file or directory")
        if not stat.S_ISDIR(info.st_mode):
            return [_entry(path, location.uri, location.parts()[-1])]
        entries = []
        for child in sorted(path.iterdir(), key=lambda p: p.name):
            if child.is_symlink():
                continue
            child_uri = location.uri.rstrip("/") + "/" + child.name
            entries.append(_entry(child, child_uri, child.name))
        return entries

    def read(self, user: str, uri: str, *, offset: int = 0, length: int) -> tuple[bytes, int]:
        """At most `length` bytes of a file from `offset`, and the file's size."""
        location = self.parse(uri)
        path = self.host_path(user, location)
        info = _lstat(path)
        if info is None:
            raise DfsNotFound(f"{location.uri}: no such file")
        if not stat.S_ISREG(info.st_mode):
            raise DfsError(f"{location.uri} is a directory, not a file")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            raise DfsError(f"{location.uri}: cannot read: {exc.strerror or exc}") from None
        with os.fdopen(fd, "rb") as file:
            file.seek(max(0, offset))
            return file.read(max(0, length)), os.fstat(file.fileno()).st_size

    def write(
        self,
        user: str,
        uri: str,
        data: bytes,
        *,
        overwrite: bool = False,
        append: bool = False,
    ) -> DfsPath:
        """Write a file (its parent directories made as needed), within the tree's bound;
        `append` adds to an existing file (a large file is put in parts)."""
        location = self.parse(uri)
        if location.path == "/":
            raise DfsError(f"{location.uri} is the root directory, not a file")
        path = self.host_path(user, location)
        info = _lstat(path)
        replaced = 0
        if info is not None:
            if stat.S_ISDIR(info.st_mode):
                raise DfsError(f"{location.uri} is a directory")
            if not stat.S_ISREG(info.st_mode):
                raise DfsError(f"{location.uri} is not a regular file")
            if not (overwrite or append):
                raise DfsError(f"{location.uri} exists (overwrite it with --force)")
            replaced = 0 if append else info.st_size
        self.make_room(user, location.authority, max(0, len(data) - replaced), location.uri)
        self._parents(user, location)
        if append and info is not None:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
                with os.fdopen(fd, "ab") as file:
                    file.write(data)
            except OSError as exc:
                raise DfsError(f"{location.uri}: cannot write: {exc.strerror or exc}") from None
            return location
        temporary = path.with_name(f".{path.name}.paigraph-{os.getpid()}")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.replace(temporary, path)
        except OSError as exc:
            temporary.unlink(missing_ok=True)
            raise DfsError(f"{location.uri}: cannot write: {exc.strerror or exc}") from None
        return location

    def mkdir(self, user: str, uri: str) -> DfsPath:
        """Make a directory and its parents (`hdfs dfs -mkdir -p`)."""
        location = self.parse(uri)
        self._parents(user, location, including=True)
        return location

    def remove(self, user: str, uri: str, *, recursive: bool = False) -> DfsPath:
        """Remove a file, or a directory with `recursive` (or an empty one)."""
        location = self.parse(uri)
        if location.path == "/":
            raise DfsError(f"{location.uri} is the root of the file system; it is not removed")
        path = self.host_path(user, location)
        info = _lstat(path)
        if info is None:
            raise DfsNotFound(f"{location.uri}: no such file or directory")
        if stat.S_ISDIR(info.st_mode):
            if any(path.iterdir()) and not recursive:
                raise DfsError(f"{location.uri} is a directory that is not empty (use -r)")
            shutil.rmtree(path)
        else:
            path.unlink()
        return location

    def _parents(self, user: str, location: DfsPath, *, including: bool = False) -> None:
        """Make the directories above `location` (and it, with `including`) in the tree."""
        here = self.tree(user, location.authority)
        here.mkdir(parents=True, exist_ok=True)
        parts = location.parts() if including else location.parts()[:-1]
        for part in parts:
            here = here / part
            info = _lstat(here)
            if info is None:
                here.mkdir()
            elif not stat.S_ISDIR(info.st_mode):
                raise DfsError(f"{location.uri}: {part!r} on its way is a file, not a directory")


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None


def _entry(path: Path, uri: str, name: str) -> Entry:
    info = path.lstat()
    directory = stat.S_ISDIR(info.st_mode)
    return Entry(
        name=name,
        uri=uri,
        directory=directory,
        size=_size(path) if directory else info.st_size,
        modified=info.st_mtime,
    )


def _size(path: Path) -> int:
    """Bytes of every regular file under `path` (symlinks not followed)."""
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                info = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


def _mb(size: int) -> str:
    return f"{size / (1 << 20):.1f}".removesuffix(".0")
