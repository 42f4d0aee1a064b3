"""Data, script and storage prerequisites, put in place once on the host and mounted in containers.

A 16-instance job must not download its data 16 times, so downloads and clones land in a content
cache on the host, keyed by what was asked for, and every instance bind-mounts the same directory
read-only at /work/<name>/. Storage is a persistent read-write directory. Whatever this machine
cannot serve (hdfs, nfs, s3, ssh, local paths outside the allowed roots) is refused by `check()`
at launch, before anything is placed, so a job is refused instead of failing later.

What a URI may be, per kind:

- download (data): `http(s)://...`, `ftp://[user[:password]@]host[:port]/path`, `file:///abs/path`
  or a bare `/abs/path` (under the allowed roots). Each URI becomes one entry of the mounted
  directory, named after the last segment of its path (`index` when that is empty); a local or
  FTP directory is copied as a directory of that name (`ftp_fetch`).
- clone (script): `REPO`, `REPO@REF` or `REPO#REF`, where REPO is `https://`, `http://`, `git://`,
  `file://` (allowed roots), a bare `/abs/path` (allowed roots), or scheme-less `host/path`
  (meaning https). REF is a commit (full or abbreviated), a tag or a branch; use `#` for a ref
  that contains `/`. Without a ref, the repository's HEAD at launch time is used. A prerequisite
  whose `uri` is one string is one repository checked out at /work/<name>/ itself; one whose
  `uri` is a list (the seed's form) has each repository checked out at
  /work/<name>/<repository name>/ (the last segment of its path without `.git`, as `git clone`
  names it), so two repositories of one name are refused. A script on FTP is no repository:
  it is copied as data is, one directory becoming /work/<name>/ itself.
- mount (storage / output): nothing (a persistent directory of the job's owner,
  `<storage_dir>/users/<owner>/<name>`), a bare storage name (`<storage_dir>/users/<owner>/<that
  name>`, so one user's prerequisites and jobs can share one; another user's of the same name is
  another directory), or a local directory `file:///abs/path` / `/abs/path` under the allowed
  roots, which exists already and is mounted read-only: the allowed roots are for reading.

Local sources are read without following links: from the allowed root down, each component is
opened relative to its parent's descriptor with O_NOFOLLOW (`local_copy`), so a folder swapped for
a symlink after the check is refused instead of followed, and symlinks inside a copied tree are
kept as symlinks.

Cache keys: a download is keyed by its URIs plus, for local sources, the size, modification time
and inode of every file (and the text of every symlink), so an edited or replaced local file gives
a new entry; the entry is published under the key of what the copy actually read, so a source
changed during the copy never fills the key of what was there before. A remote URL is fetched once
and kept until the cache directory is cleared. Local sources are copied, not linked, so an entry
never changes once made; mount large local data sets as storage instead. A clone is keyed by
repository and resolved commit. Fetches of one key are serialised by a per-key thread lock and an
fcntl lock file (so separate processes sharing a cache also fetch once) and published by renaming a
temporary directory into place: an entry either exists complete or not at all.

Everything here blocks; async callers run it in a worker thread (`asyncio.to_thread`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import astuple, dataclass
from enum import StrEnum
from pathlib import Path, PurePath
from urllib.parse import unquote, urlsplit

import httpx

from simulator import ftp_fetch, local_copy
from simulator.dfs import DfsError, FileSystems, is_dfs_uri
from simulator.fetch_policy import BlockedAddress, FetchPolicy, GuardedTransport
from simulator.names import safe

Progress = Callable[[str, str], None]
"""Called with (prerequisite name, message), e.g. ("mnist", "downloading data 'mnist' (3.2 MB)")."""

DEFAULT_MAX_DOWNLOAD_BYTES = 10 * 1000**3  # per prerequisite, all of its URIs together
DEFAULT_HTTP_TIMEOUT = 60.0  # seconds without progress (connect, each read)
DEFAULT_GIT_TIMEOUT = 600.0  # seconds for each git command
_PROGRESS_EVERY = 2.0  # seconds between "n% of ..." reports of one download
_CHUNK = 1 << 20

_NAME = re.compile(r"[A-Za-z0-9._~-]+")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_SCP_LIKE = re.compile(r"[^/]+:")  # user@host:path, which git reads as ssh
_FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_SHORT_SHA = re.compile(r"[0-9a-f]{4,63}")
_USERINFO = re.compile(r"(://)[^/\s]*@")  # up to the last @ of the authority, as urlsplit reads it


class MaterialKind(StrEnum):
    """How a prerequisite gets into the container (same values as backends.base.Fetch)."""

    DOWNLOAD = "download"
    CLONE = "clone"
    MOUNT = "mount"


_SUPPORTED = {
    MaterialKind.DOWNLOAD: "http, https, ftp, file",
    MaterialKind.CLONE: "http, https, git, file, ftp (copied)",
    MaterialKind.MOUNT: "file, or a storage name",
}


class Simulated(StrEnum):
    """What stands in for a location this machine does not have."""

    DFS = "dfs"  # an hdfs:// location: a directory of the user's simulated file system
    NODE = "node"  # a node's own path (/mnt/...): a folder of the user's simulated node disk


@dataclass(frozen=True)
class Mount:
    """A host directory to bind-mount at /work/<name>/ in every instance of the role."""

    host_path: Path
    read_only: bool
    # a node path stands in for itself: mounted at that path in the container as well
    also_at: str | None = None


@dataclass(frozen=True)
class RepoSpec:
    """A script prerequisite's repository as git will be given it, and the ref asked for."""

    url: str
    ref: str | None


class MaterialError(Exception):
    """A prerequisite could not be put in place; the message names it and says why."""


class UnservableMaterial(MaterialError):
    """The prerequisite can never be served here (scheme, path outside the roots, bad URI list)."""


@dataclass(frozen=True)
class _Source:
    """One URI of a data prerequisite: a remote URL or a local path, and its entry's name."""

    uri: str
    entry: str
    url: str | None = None
    path: Path | None = None
    ftp: ftp_fetch.FtpLocation | None = None


def shown(uri: str) -> str:
    """A URI safe to print: credentials in it are masked."""
    return _USERINFO.sub(r"\1***@", uri)


def _human(size: int) -> str:
    if size < 1000:
        return f"{size} B"
    value = float(size)
    for unit in ("kB", "MB", "GB", "TB"):
        value /= 1000
        if value < 1000 or unit == "TB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32]


def _refuse(name: str, kind: MaterialKind, scheme: str, dfs: bool = False) -> UnservableMaterial:
    supported = _SUPPORTED[kind] + (", hdfs (simulated)" if dfs else "")
    return UnservableMaterial(
        f"prerequisite {name!r}: scheme {scheme!r} cannot be served by the local simulator "
        f"(supported: {supported})"
    )


def check_name(name: str, what: str = "prerequisite name") -> None:
    """Names become directory names (/work/<name>/, <storage_dir>/<name>), so keep them plain."""
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise UnservableMaterial(
            f"{what} {name!r} cannot be used as a directory name "
            "(letters, digits and . _ ~ - only, not '.' or '..')"
        )


_VOLUME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]+")


def check_storage(name: str, source: str, *, volume: bool) -> None:
    """An admin-defined storage must name an existing host directory or a valid volume name:
    refused at launch, before anything is placed, rather than failing each container's start."""
    if volume:
        if not _VOLUME.fullmatch(source):
            raise UnservableMaterial(
                f"storage {name!r}: {source!r} is not a Docker volume name "
                "(a letter or digit, then letters, digits and _ . -)"
            )
        return
    path = Path(source)
    if not path.is_absolute():
        raise UnservableMaterial(f"storage {name!r}: {source!r} is not an absolute host path")
    if not path.is_dir():
        raise UnservableMaterial(
            f"storage {name!r}: the host directory {source} does not exist on this machine"
        )


def parse_repo(name: str, spec: str) -> RepoSpec:
    """Split `repo@ref` / `repo#ref` and turn `host/path` into https; ssh is refused."""
    text = spec.strip()
    ref: str | None = None
    if "#" in text:
        text, ref = text.split("#", 1)
    else:
        head, at, tail = text.rpartition("@")
        if at and head and tail and "/" not in tail and ":" not in tail:
            text, ref = head, tail
    if ref is not None and (not ref or ref.startswith("-") or any(c.isspace() for c in ref)):
        raise UnservableMaterial(
            f"prerequisite {name!r}: {ref!r} in {shown(spec)} is not a git ref"
        )
    if not text:
        raise UnservableMaterial(f"prerequisite {name!r}: {spec!r} names no repository")
    match = _SCHEME.match(text)
    if match:
        scheme = match.group(1).lower()
        if scheme not in ("http", "https", "git", "file"):
            raise _refuse(name, MaterialKind.CLONE, scheme)
        if scheme != "file" and not urlsplit(text).hostname:
            raise UnservableMaterial(f"prerequisite {name!r}: {shown(text)} has no host")
        return RepoSpec(url=text, ref=ref)
    if text.startswith("/"):
        return RepoSpec(url=text, ref=ref)  # a local path, checked against the roots later
    if _SCP_LIKE.match(text):
        raise _refuse(name, MaterialKind.CLONE, "ssh")
    return RepoSpec(url=f"https://{text}", ref=ref)


class MaterialStore:
    """Puts prerequisites in place on the host and says what to mount where.

    cache_dir: where downloads and clones are kept (created when missing); safe to share between
        processes on one machine.
    storage_dir: parent of the persistent read-write directories of storage / output prerequisites.
    allowed_file_roots: the only host directories `file://` URIs and bare paths may point into
        (after symlinks are resolved); empty means local paths are refused. Whatever lies under
        `protected` (the simulator's state: logs, caches, every user's storages) stays refused
        even inside an allowed root.
    engine_sockets: the Docker engine's sockets; a local path that is one of them or holds one
        is refused even inside an allowed root (a container that reaches it owns the machine).
    http_timeout: seconds an HTTP connect or read may stall before the download fails.
    git_timeout: seconds each git command may take.
    max_download_bytes: the most one data prerequisite may bring into the cache (all its URIs).
    fetch_policy: the non-public addresses downloads may reach (default: none).
    dfs: the simulated file systems `hdfs://` URIs name (None: hdfs is refused).
    node_dir: where each user's simulated node folders are kept: a bare path outside the
        allowed roots (`/mnt/output`) is then `<node_dir>/users/<owner>/mnt/output`, instead
        of being refused (None: refused).
    mirrors: URL prefixes fetched from somewhere else (`https://github.com/` ->
        `file:///srv/git-mirror/`), for a machine that cannot reach the original: a data URL or
        script repository starting with a key is fetched from the value followed by the rest,
        which then passes the same checks (allowed roots, fetch policy) as if written so. The
        longest matching prefix wins; the job still names, and is told, its original URIs. A key
        may end in a script's `@ref` (`https://github.com/org/repo@<commit>`): that pinned
        checkout is then the mirror's HEAD, for a copy that holds only the pinned tree.
    """

    def __init__(
        self,
        cache_dir: Path,
        *,
        storage_dir: Path,
        allowed_file_roots: Sequence[Path] = (),
        protected: Sequence[Path] = (),
        engine_sockets: Sequence[Path] = (),
        http_timeout: float = DEFAULT_HTTP_TIMEOUT,
        git_timeout: float = DEFAULT_GIT_TIMEOUT,
        max_download_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES,
        fetch_policy: FetchPolicy | None = None,
        dfs: FileSystems | None = None,
        node_dir: Path | None = None,
        mirrors: Mapping[str, str] | None = None,
    ) -> None:
        self.mirrors = sorted((mirrors or {}).items(), key=lambda item: -len(item[0]))
        self.cache_dir = Path(cache_dir).resolve()
        self.storage_dir = Path(storage_dir).resolve()
        self.dfs = dfs
        self.node_dir = Path(node_dir).resolve() if node_dir is not None else None
        self.allowed_file_roots = tuple(Path(r).resolve() for r in allowed_file_roots)
        self.protected = (
            self.cache_dir,
            self.storage_dir,
            *([dfs.root.resolve()] if dfs is not None else []),
            *([self.node_dir] if self.node_dir is not None else []),
            *(Path(p).resolve() for p in protected),
        )
        self.engine_sockets = tuple(Path(p).resolve() for p in engine_sockets)
        self.http_timeout = http_timeout
        self.git_timeout = git_timeout
        self.max_download_bytes = max_download_bytes
        self.fetch_policy = fetch_policy or FetchPolicy()
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    # --- the two entry points ----------------------------------------------------------------

    def check(
        self,
        name: str,
        kind: MaterialKind | str,
        uris: Sequence[str],
        *,
        owner: str = "",
        per_repository: bool = False,
    ) -> None:
        """Refuse, without touching the network or disk, what can never be served here."""
        kind = MaterialKind(kind)
        check_name(name)
        if self._node_mounted(kind, uris):
            return
        if kind is MaterialKind.DOWNLOAD or self._copied_script(kind, uris):
            self._sources(name, uris, owner)
        elif kind is MaterialKind.CLONE:
            if per_repository:
                self._repos(name, uris)
            else:
                self._repo(name, uris)
        else:
            self._mount_target(name, uris, owner)

    def materialize(
        self,
        name: str,
        kind: MaterialKind | str,
        uris: Sequence[str],
        *,
        owner: str = "",
        read_only: bool = False,
        per_repository: bool = False,
        as_directory: bool = False,
        progress: Progress | None = None,
    ) -> Mount:
        """Fetch (or reuse) the prerequisite and return the host directory to mount.

        Downloads, clones and directories under the allowed roots are always mounted read-only;
        `read_only` applies to the storages of `owner` (the job's user), which are theirs alone.
        `per_repository` (a script whose `uri` is a list) puts each repository in a directory of
        its name inside the one mounted. `as_directory` (a v1 codeDir) makes a local directory
        given as the one URI the mounted directory itself rather than an entry in it.
        """
        kind = MaterialKind(kind)
        check_name(name)
        report = progress or (lambda _name, _message: None)
        if self._node_mounted(kind, uris):  # the node's folder itself, as on the node
            folder = self._node_folder(uris[0], owner)
            self._node_directory(name, folder, owner)
            return Mount(folder, read_only=True, also_at=self._node_path(uris[0]))
        if self._copied_script(kind, uris):  # a script on the simulated HDFS is copied in
            kind, as_directory = MaterialKind.DOWNLOAD, True
        if kind is MaterialKind.DOWNLOAD:
            whole = as_directory and len(uris) == 1
            path = self._materialize_download(name, uris, report, whole, owner)
            return Mount(path, read_only=True)
        if kind is MaterialKind.CLONE and per_repository:
            return Mount(self._materialize_repositories(name, uris, report), read_only=True)
        if kind is MaterialKind.CLONE:
            return Mount(self._materialize_clone(name, uris, report), read_only=True)
        target, simulated = self._mount_target(name, uris, owner)
        if simulated is Simulated.DFS:
            return Mount(self._dfs_directory(name, uris[0], owner), read_only=read_only)
        if simulated is Simulated.NODE:
            self._node_directory(name, target, owner)
            return Mount(target, read_only=read_only, also_at=self._node_path(uris[0]))
        if not target.is_relative_to(self.storage_dir):
            if not target.is_dir():
                raise MaterialError(f"prerequisite {name!r}: {target} is not a directory")
            return Mount(target, read_only=True)
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            raise MaterialError(f"prerequisite {name!r}: {target} exists and is not a directory")
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MaterialError(f"prerequisite {name!r}: cannot create {target}: {exc}") from exc
        return Mount(target, read_only=read_only)

    def read_local_text(self, what: str, uri: str, limit: int = 64 << 10) -> str:
        """A small text file named by a `file://` URI or bare path under the allowed roots (a
        v1 authFile); `what` names it in errors."""
        path = self._local(what, uri)
        try:
            fd = local_copy.open_beneath(*self._beneath(path))
            try:
                data = local_copy.read_file(fd, path, limit)
            finally:
                os.close(fd)
        except local_copy.CopyRefused as exc:
            raise MaterialError(f"{what}: {exc}") from None
        except OSError as exc:
            raise MaterialError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
        if len(data) > limit:
            raise MaterialError(f"{what}: {path} is larger than {_human(limit)}")
        return data.decode("utf-8", errors="replace")

    def still_where_checked(self, mount: Mount) -> bool:
        """Whether the directory about to be mounted is still the one checked: its path has no
        symlink (Docker would follow one swapped in since the check) and still resolves inside
        an allowed root or the storage directory."""
        path = mount.host_path
        if Path(os.path.realpath(path)) != path or not path.is_dir():
            return False
        if path.is_relative_to(self.storage_dir) or path.is_relative_to(self.cache_dir):
            return True
        if self.dfs is not None and path.is_relative_to(self.dfs.root.resolve()):
            return True
        if self.node_dir is not None and path.is_relative_to(self.node_dir):
            return True
        return self._allowed(path)

    def simulated(self, kind: MaterialKind | str, uris: Sequence[str]) -> list[Simulated]:
        """What each URI would be simulated by here (None-free: the URIs that are not are left
        out), for the warnings a job gets; checks nothing."""
        found = []
        for uri in uris:
            if is_dfs_uri(uri) and self.dfs is not None:
                found.append(Simulated.DFS)
            elif uri.startswith("/") and self._node_stand_in(uri):
                found.append(Simulated.NODE)
        return found

    # --- simulated locations -----------------------------------------------------------------

    def _copied_script(self, kind: MaterialKind, uris: Sequence[str]) -> bool:
        """A script on the simulated HDFS or on FTP is a folder of files, not a repository:
        copied."""
        return kind is MaterialKind.CLONE and any(is_dfs_uri(u) or _is_ftp(u) for u in uris)

    def _node_mounted(self, kind: MaterialKind, uris: Sequence[str]) -> bool:
        """Data or a script that is one node path (/mnt/confignfs/code): the user's simulated
        node folder of that path is mounted read-only (made empty when missing, as a fresh
        node's disk would be), at /work/<name>/ and at the path, instead of being copied."""
        return (
            kind is not MaterialKind.MOUNT
            and len(uris) == 1
            and uris[0].startswith("/")
            and self._node_stand_in(uris[0])
        )

    def _node_stand_in(self, uri: str) -> bool:
        """Whether a bare absolute path is a node's path (outside the allowed roots) that a
        simulated node folder stands in for."""
        if self.node_dir is None:
            return False
        path = Path(os.path.normpath(uri))
        if path == Path("/"):
            return False  # the root is no node folder: refused as a local path
        return not any(path.is_relative_to(root) for root in self.allowed_file_roots)

    def _fill_hint(self, uri: str) -> str:
        """How a user fills the simulated location a missing data source names."""
        if is_dfs_uri(uri) and self.dfs is not None:
            return f" (put it on the simulated file system with: paigraph fs put FILE {uri})"
        if uri.startswith("/") and self._node_stand_in(uri):
            return (
                " on the simulated node (its folder is kept per user; a job whose output is "
                f"{uri} fills it)"
            )
        return ""

    @staticmethod
    def _node_path(uri: str) -> str:
        return os.path.normpath(uri)

    def _node_base(self, owner: str) -> Path:
        assert self.node_dir is not None
        return self.node_dir / "users" / safe(owner or "local")

    def _node_folder(self, uri: str, owner: str) -> Path:
        return self._node_base(owner).joinpath(*Path(self._node_path(uri)).parts[1:])

    def _node_directory(self, name: str, target: Path, owner: str) -> None:
        try:
            _make_within(self._node_base(owner), target)
        except OSError as exc:
            raise MaterialError(f"prerequisite {name!r}: cannot create {target}: {exc}") from exc

    def _dfs_source(self, name: str, uri: str, owner: str) -> Path:
        assert self.dfs is not None
        try:
            return self.dfs.resolve(owner, uri)
        except DfsError as exc:
            raise UnservableMaterial(f"prerequisite {name!r}: {exc}") from None

    def _dfs_directory(self, name: str, uri: str, owner: str) -> Path:
        """The directory of a storage on the simulated HDFS, made when missing; a tree past
        its bound is refused (its user frees room with `paigraph fs rm`)."""
        assert self.dfs is not None
        try:
            location = self.dfs.parse(uri)
            self.dfs.check_within_bound(owner, location.authority, f"prerequisite {name!r}")
            self.dfs.mkdir(owner, uri)
            return self.dfs.host_path(owner, location)
        except DfsError as exc:
            raise MaterialError(f"prerequisite {name!r}: {exc}") from None

    # --- reading URIs ------------------------------------------------------------------------

    def _local(self, name: str, uri: str) -> Path:
        """A `file://` URI or bare absolute path, resolved and checked against the roots."""
        if uri.startswith("/"):
            raw = uri
        else:
            parts = urlsplit(uri)
            if parts.netloc not in ("", "localhost"):
                raise UnservableMaterial(
                    f"prerequisite {name!r}: {uri} names host {parts.netloc!r}; "
                    "file:// URIs must name a path on this machine (file:///path)"
                )
            raw = unquote(parts.path)
        if not raw.startswith("/"):
            raise UnservableMaterial(f"prerequisite {name!r}: {uri} is not an absolute path")
        try:
            path = Path(raw).resolve()
        except OSError as exc:  # a link on the way changed while it was being resolved
            raise UnservableMaterial(
                f"prerequisite {name!r}: {raw} cannot be resolved: {exc.strerror or exc}"
            ) from None
        if not self.allowed_file_roots:
            raise UnservableMaterial(
                f"prerequisite {name!r}: {path} is a local path, and no allowed roots are "
                "configured for local paths"
            )
        if not any(path.is_relative_to(root) for root in self.allowed_file_roots):
            roots = ", ".join(str(r) for r in self.allowed_file_roots)
            raise UnservableMaterial(
                f"prerequisite {name!r}: {path} is outside the allowed roots ({roots})"
            )
        exposed = next((s for s in self.engine_sockets if s.is_relative_to(path)), None)
        if exposed is not None:
            raise UnservableMaterial(
                f"prerequisite {name!r}: {path} is or holds the Docker engine's socket "
                f"{exposed}, which no job may reach even under an allowed root"
            )
        if not self._allowed(path):
            raise UnservableMaterial(
                f"prerequisite {name!r}: {path} is in the simulator's own state directory, "
                "which jobs may not read even under an allowed root"
            )
        return path

    def _beneath(self, path: Path) -> tuple[Path, PurePath]:
        """The outermost root holding the checked path (an allowed root, the simulated HDFS's or
        the simulated node folders', which jobs write), and the path within it: every component
        below the root is opened without following links."""
        roots = [*self.allowed_file_roots]
        if self.dfs is not None:
            roots.append(self.dfs.root.resolve())
        if self.node_dir is not None:
            roots.append(self.node_dir)
        root = min((r for r in roots if path.is_relative_to(r)), key=lambda r: len(r.parts))
        return root, path.relative_to(root)

    def mirrored(self, uri: str) -> str:
        """Where `uri` is fetched from: behind the longest mirror prefix it starts with, if any."""
        for prefix, replacement in self.mirrors:
            if uri.startswith(prefix):
                return replacement + uri[len(prefix) :]
        return uri

    def _allowed(self, path: Path) -> bool:
        """Inside an allowed root and outside everything protected."""
        return any(path.is_relative_to(root) for root in self.allowed_file_roots) and not any(
            path.is_relative_to(p) or p.is_relative_to(path) for p in self.protected
        )

    def _sources(self, name: str, uris: Sequence[str], owner: str = "") -> list[_Source]:
        if not uris:
            raise UnservableMaterial(f"prerequisite {name!r}: a data prerequisite needs a URI")
        sources: list[_Source] = []
        for written in uris:
            uri = self.mirrored(written)
            match = _SCHEME.match(uri)
            scheme = match.group(1).lower() if match else None
            if scheme in ("http", "https"):
                parts = urlsplit(uri)
                if not parts.hostname:
                    raise UnservableMaterial(f"prerequisite {name!r}: {shown(uri)} has no host")
                segment = unquote(parts.path.rsplit("/", 1)[-1])
                sources.append(_Source(uri, _entry_name(segment), url=uri))
            elif scheme == "ftp":
                try:
                    location = ftp_fetch.parse(uri)
                except ValueError as exc:
                    raise UnservableMaterial(f"prerequisite {name!r}: {shown(uri)} {exc}") from None
                sources.append(_Source(uri, _entry_name(location.name), ftp=location))
            elif scheme == "hdfs" and self.dfs is not None:
                path = self._dfs_source(name, uri, owner)
                sources.append(_Source(uri, _entry_name(path.name), path=path))
            elif scheme is None and uri.startswith("/") and self._node_stand_in(uri):
                path = self._node_folder(uri, owner)
                # a job may have left a symlink in its node folder: never copy through one
                linked = _symlink_within(self._node_base(owner), path)
                if linked is not None:
                    raise UnservableMaterial(
                        f"prerequisite {name!r}: {uri}: {linked.name!r} on the simulated node "
                        "is a symbolic link, which is not followed"
                    )
                sources.append(_Source(uri, _entry_name(path.name), path=path))
            elif scheme == "file" or (scheme is None and uri.startswith("/")):
                path = self._local(name, uri)
                sources.append(_Source(uri, _entry_name(path.name), path=path))
            elif scheme is None:
                raise UnservableMaterial(
                    f"prerequisite {name!r}: {shown(uri)!r} is neither a URL nor an absolute path"
                )
            else:
                raise _refuse(name, MaterialKind.DOWNLOAD, scheme, self.dfs is not None)
        seen: dict[str, str] = {}
        for source in sources:
            if source.entry in seen:
                raise UnservableMaterial(
                    f"prerequisite {name!r}: {shown(seen[source.entry])} and {shown(source.uri)} "
                    f"would both be saved as {source.entry!r}"
                )
            seen[source.entry] = source.uri
        return sources

    def _repo(self, name: str, uris: Sequence[str]) -> RepoSpec:
        if len(uris) != 1:
            raise UnservableMaterial(
                f"prerequisite {name!r}: a script prerequisite takes exactly one repository "
                f"(got {len(uris)})"
            )
        written = uris[0].strip()
        spec = parse_repo(name, self.mirrored(written))
        if self.mirrored(written) == written:  # e.g. `host/path`, which means https
            spec = RepoSpec(url=self.mirrored(spec.url), ref=spec.ref)
        if spec.url.startswith("/") or spec.url.lower().startswith("file://"):
            spec = RepoSpec(url=self._local(name, spec.url).as_uri(), ref=spec.ref)
        return spec

    def _repos(self, name: str, uris: Sequence[str]) -> list[tuple[str, RepoSpec]]:
        """(directory name, repository) of each entry of a script's `uri` list."""
        if not uris:
            raise UnservableMaterial(
                f"prerequisite {name!r}: a script prerequisite needs at least one repository"
            )
        found: dict[str, tuple[str, RepoSpec]] = {}
        for uri in uris:
            spec = self._repo(name, [uri])
            directory = repository_name(spec.url)
            check_name(directory, f"prerequisite {name!r}: repository name")
            if directory in found:
                raise UnservableMaterial(
                    f"prerequisite {name!r}: {shown(found[directory][0])} and {shown(uri)} "
                    f"would both be checked out at {name}/{directory}"
                )
            found[directory] = (uri, spec)
        return [(directory, spec) for directory, (_, spec) in found.items()]

    def _mount_target(
        self, name: str, uris: Sequence[str], owner: str
    ) -> tuple[Path, Simulated | None]:
        """The host directory a storage / output is, and what it simulates, if anything."""
        if len(uris) > 1:
            raise UnservableMaterial(
                f"prerequisite {name!r}: a storage prerequisite takes at most one URI "
                f"(got {len(uris)})"
            )
        mine = self.storage_dir / "users" / safe(owner or "local")
        if not uris:
            return mine / name, None
        uri = uris[0]
        match = _SCHEME.match(uri)
        if match:
            scheme = match.group(1).lower()
            if scheme == "hdfs" and self.dfs is not None:
                return self._dfs_source(name, uri, owner), Simulated.DFS
            if scheme != "file":
                raise _refuse(name, MaterialKind.MOUNT, scheme, self.dfs is not None)
            return self._local(name, uri), None
        if uri.startswith("/"):
            if self._node_stand_in(uri):
                return self._node_folder(uri, owner), Simulated.NODE
            return self._local(name, uri), None
        check_name(uri, f"prerequisite {name!r}: storage name")
        return mine / uri, None

    # --- the cache ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def _exclusive(self, key: str, on_wait: Callable[[], None]) -> Iterator[None]:
        """Hold the key against other threads (thread lock) and other processes (lock file)."""
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        waited = False
        if not lock.acquire(blocking=False):
            on_wait()
            waited = True
            lock.acquire()
        try:
            locks = self.cache_dir / ".locks"
            locks.mkdir(parents=True, exist_ok=True)
            fd = os.open(locks / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if not waited:
                        on_wait()
                    fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)
        finally:
            lock.release()

    def _cached(
        self,
        name: str,
        kind: MaterialKind,
        key: str,
        fill: Callable[[Path], str | None],
        on_wait: Callable[[], None],
        on_hit: Callable[[], None],
    ) -> Path:
        """The entry for key, filled once by `fill(temp_dir)` and renamed into place.

        `fill` may return another key: what it read was not what the key was made from (a local
        file changed between the look and the copy), so the entry is kept under the key of what
        was read, never under one that promises other content."""
        final = self.cache_dir / kind.value / key
        if final.is_dir():
            on_hit()
            return final
        try:
            with self._exclusive(key, on_wait):
                if final.is_dir():
                    on_hit()
                    return final
                scratch = self.cache_dir / ".tmp"
                scratch.mkdir(parents=True, exist_ok=True)
                for stale in scratch.glob(f"{key}.*"):  # left by a process that died mid-fetch
                    shutil.rmtree(stale, ignore_errors=True)
                final.parent.mkdir(parents=True, exist_ok=True)
                work = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=scratch))
                try:
                    work.chmod(0o755)  # readable by whatever user the container runs as
                    read = fill(work)
                    if read is not None and read != key:
                        final = self.cache_dir / kind.value / read
                    try:
                        work.rename(final)
                    except OSError:
                        if not final.is_dir():
                            raise
                        # made meanwhile by a fetch that read the same content: use that one
                finally:
                    shutil.rmtree(work, ignore_errors=True)
        except OSError as exc:  # a full disk, an unwritable cache directory ...
            raise MaterialError(
                f"prerequisite {name!r}: cannot write the cache under {self.cache_dir}: {exc}"
            ) from exc
        return final

    # --- data --------------------------------------------------------------------------------

    def _materialize_download(
        self, name: str, uris: Sequence[str], report: Progress, whole: bool = False, owner: str = ""
    ) -> Path:
        sources = self._sources(name, uris, owner)
        looked = [self._scan(name, s.path) if s.path else None for s in sources]
        first = looked[0]
        # a script's one FTP directory is the mounted directory itself, as a local one is
        contents = whole and len(sources) == 1 and sources[0].ftp is not None
        whole = whole and bool(first and first[0].kind == "dir")
        marks = ["whole"] if whole else ["contents"] if contents else []
        # the host paths are in the key: one user's hdfs://h/x is not another's
        where = [str(s.path) if s.path else None for s in sources]

        def key_of(stamps: Sequence[list[local_copy.Entry] | None]) -> str:
            data = [None if s is None else [astuple(e) for e in s] for s in stamps]
            return _key(MaterialKind.DOWNLOAD.value, list(uris), where, data, *marks)

        noun = f"data {name!r}"

        def fill(work: Path) -> str:
            budget = [self.max_download_bytes]
            read: list[list[local_copy.Entry] | None] = []
            with httpx.Client(
                transport=GuardedTransport(self.fetch_policy),  # every hop's address checked
                timeout=self.http_timeout,
                follow_redirects=True,
                headers={"Accept-Encoding": "identity"},  # the bytes as published
            ) as client:
                for source in sources:
                    target = work if whole else work / source.entry
                    if source.url is not None:
                        self._fetch_url(client, name, source.url, target, budget, report)
                        read.append(None)
                    elif source.ftp is not None:
                        self._fetch_ftp(name, source, work, contents, budget, report)
                        read.append(None)
                    else:
                        assert source.path is not None
                        read.append(self._copy_local(name, source, target, budget, report))
            report(name, f"{noun} is ready ({_human(self.max_download_bytes - budget[0])})")
            return key_of(read)

        return self._cached(
            name,
            MaterialKind.DOWNLOAD,
            key_of(looked),
            fill,
            on_wait=lambda: report(name, f"waiting for another download of {noun}"),
            on_hit=lambda: report(name, f"{noun} is cached"),
        )

    def _scan(self, name: str, path: Path) -> list[local_copy.Entry]:
        """What a copy of the local path would read now ([] when it does not exist: the copy
        says so), looked at without following links."""
        try:
            fd = local_copy.open_beneath(*self._beneath(path))
        except local_copy.Missing:
            return []
        except local_copy.CopyRefused as exc:
            raise MaterialError(f"prerequisite {name!r}: {exc}") from None
        except OSError as exc:
            raise MaterialError(f"prerequisite {name!r}: cannot read {path}: {exc}") from None
        try:
            return local_copy.scan(fd, path)
        except local_copy.CopyRefused as exc:
            raise MaterialError(f"prerequisite {name!r}: {exc}") from None
        except OSError as exc:
            raise MaterialError(f"prerequisite {name!r}: cannot read {path}: {exc}") from None
        finally:
            os.close(fd)

    def _fetch_url(
        self,
        client: httpx.Client,
        name: str,
        url: str,
        target: Path,
        budget: list[int],
        report: Progress,
    ) -> None:
        where = f"prerequisite {name!r}: {shown(url)}"
        try:
            with client.stream("GET", url) as response:
                if response.status_code >= 400:
                    raise MaterialError(
                        f"{where} returned HTTP {response.status_code} {response.reason_phrase}"
                    )
                length = _content_length(response)
                if length is not None and length > budget[0]:
                    raise MaterialError(self._too_big(where, length, budget))
                size = f" ({_human(length)})" if length is not None else ""
                report(name, f"downloading data {name!r}{size} from {shown(url)}")
                received = 0
                last = time.monotonic()
                with target.open("xb") as out:
                    for chunk in response.iter_raw(_CHUNK):
                        received += len(chunk)
                        if received > budget[0]:
                            raise MaterialError(self._too_big(where, None, budget))
                        out.write(chunk)
                        if time.monotonic() - last >= _PROGRESS_EVERY:
                            last = time.monotonic()
                            done = f"{_human(received)}"
                            if length:
                                done = f"{received * 100 // length}% of {_human(length)}"
                            report(name, f"downloading data {name!r}: {done}")
                budget[0] -= received
        except BlockedAddress as exc:
            raise MaterialError(f"{where}: refused: {exc}") from None
        except httpx.ConnectError as exc:
            raise MaterialError(f"{where}: could not connect: {exc}") from exc
        except httpx.TimeoutException as exc:
            raise MaterialError(
                f"{where}: no progress for {self.http_timeout:g} s ({type(exc).__name__})"
            ) from exc
        except httpx.HTTPError as exc:
            raise MaterialError(f"{where}: download failed: {exc}") from exc

    def _fetch_ftp(
        self,
        name: str,
        source: _Source,
        folder: Path,
        contents: bool,
        budget: list[int],
        report: Progress,
    ) -> None:
        """An `ftp://` file or tree, through the fetch policy; failures worded as HTTP's are."""
        assert source.ftp is not None
        url = shown(source.uri)
        where = f"prerequisite {name!r}: {url}"
        last = [time.monotonic()]

        def started(what: str, size: int | None) -> None:
            amount = f" ({_human(size)})" if size is not None else f" (a {what})"
            report(name, f"downloading data {name!r}{amount} from {url}")

        def progress(received: int, size: int | None) -> None:
            if time.monotonic() - last[0] >= _PROGRESS_EVERY:
                last[0] = time.monotonic()
                done = f"{received * 100 // size}% of {_human(size)}" if size else _human(received)
                report(name, f"downloading data {name!r}: {done}")

        try:
            received = ftp_fetch.fetch(
                source.ftp,
                folder,
                source.entry,
                contents=contents,
                policy=self.fetch_policy,
                timeout=self.http_timeout,
                limit=budget[0],
                progress=progress,
                on_start=started,
            )
        except BlockedAddress as exc:
            raise MaterialError(f"{where}: refused: {exc}") from None
        except ftp_fetch.OverLimit as exc:
            raise MaterialError(self._too_big(where, exc.size, budget)) from None
        except ftp_fetch.NotFound as exc:
            raise MaterialError(f"{where} {exc}") from None
        except ftp_fetch.FtpFetchError as exc:
            raise MaterialError(f"{where}: {exc}") from None
        budget[0] -= received

    def _too_big(self, where: str, size: int | None, budget: list[int]) -> str:
        """Over the cap: say how big (when known), counting what earlier URIs brought."""
        before = self.max_download_bytes - budget[0]
        if size is None:
            amount = "goes"
        elif before:
            amount = f"brings it to {_human(before + size)},"
        else:
            amount = f"is {_human(size)},"
        return (
            f"{where} {amount} over the download limit of {_human(self.max_download_bytes)} "
            "per prerequisite"
        )

    def _copy_local(
        self, name: str, given: _Source, target: Path, budget: list[int], report: Progress
    ) -> list[local_copy.Entry]:
        """Copy the checked local path, reached from its root without following a link; returns
        what was read."""
        assert given.path is not None
        source = given.path
        uri = given.uri
        simulated = is_dfs_uri(uri) or (uri.startswith("/") and self._node_stand_in(uri))
        shown = uri if simulated else str(source)
        where = f"prerequisite {name!r}: {shown}"
        try:
            fd = local_copy.open_beneath(*self._beneath(source))
        except local_copy.Missing:
            raise MaterialError(f"{where} does not exist{self._fill_hint(uri)}") from None
        except local_copy.CopyRefused as exc:
            raise MaterialError(f"prerequisite {name!r}: {exc}") from None
        except OSError as exc:
            raise MaterialError(f"{where} could not be copied: {exc}") from exc
        try:
            size = sum(entry.size for entry in local_copy.scan(fd, source))
            if size > budget[0]:
                raise MaterialError(self._too_big(where, size, budget))
            report(name, f"copying data {name!r} ({_human(size)}) from {shown}")
            read, copied = local_copy.copy(fd, source, target, budget[0])
        except local_copy.OverLimit:
            raise MaterialError(self._too_big(where, None, budget)) from None
        except local_copy.CopyRefused as exc:
            raise MaterialError(f"prerequisite {name!r}: {exc}") from None
        except OSError as exc:
            raise MaterialError(f"{where} could not be copied: {exc}") from exc
        finally:
            os.close(fd)
        budget[0] -= copied
        return read

    # --- scripts -----------------------------------------------------------------------------

    def _materialize_clone(self, name: str, uris: Sequence[str], report: Progress) -> Path:
        spec = self._repo(name, uris)
        commit = self._resolve(name, spec)
        key = _key(MaterialKind.CLONE.value, spec.url, commit)
        noun = f"script {name!r}"

        def fill(work: Path) -> None:
            report(name, f"cloning {noun} from {shown(spec.url)} at {commit[:12]}")
            self._checkout(name, spec, commit, work)
            report(name, f"{noun} is ready at {commit[:12]}")

        return self._cached(
            name,
            MaterialKind.CLONE,
            key,
            fill,
            on_wait=lambda: report(name, f"waiting for another clone of {noun}"),
            on_hit=lambda: report(name, f"{noun} is cached at {commit[:12]}"),
        )

    def _materialize_repositories(self, name: str, uris: Sequence[str], report: Progress) -> Path:
        """Each repository of the list at its commit, in a directory of its name; the whole is
        cached under the list of (repository, commit), so a new commit of one gives a new entry."""
        repos = [
            (directory, spec, self._resolve(name, spec))
            for directory, spec in self._repos(name, uris)
        ]
        key = _key("repositories", [(d, s.url, c) for d, s, c in repos])
        noun = f"script {name!r}"
        at = ", ".join(f"{d} at {c[:12]}" for d, _, c in repos)

        def fill(work: Path) -> None:
            for directory, spec, commit in repos:
                report(name, f"cloning {noun} from {shown(spec.url)} at {commit[:12]}")
                target = work / directory
                target.mkdir(mode=0o755)
                self._checkout(name, spec, commit, target)
            report(name, f"{noun} is ready ({at})")

        return self._cached(
            name,
            MaterialKind.CLONE,
            key,
            fill,
            on_wait=lambda: report(name, f"waiting for another clone of {noun}"),
            on_hit=lambda: report(name, f"{noun} is cached ({at})"),
        )

    def _check_remote(self, name: str, spec: RepoSpec) -> None:
        """Refuse a repository on an address the fetch policy does not allow, as downloads are.

        git resolves the name again itself, so a name whose answers change between the two
        lookups could still slip through; git is also told never to follow a redirect.
        """
        parts = urlsplit(spec.url)
        if parts.scheme.lower() == "file" or not parts.hostname:
            return
        default_port = {"https": 443, "http": 80, "git": 9418}.get(parts.scheme.lower(), 443)
        try:
            self.fetch_policy.addresses(parts.hostname, parts.port or default_port)
        except BlockedAddress as exc:
            raise MaterialError(f"prerequisite {name!r}: {shown(spec.url)}: {exc}") from None
        except OSError as exc:
            raise MaterialError(
                f"prerequisite {name!r}: {shown(spec.url)}: cannot resolve {parts.hostname}: {exc}"
            ) from None

    def _git(self, name: str, spec: RepoSpec, *args: str, doing: str) -> str:
        self._check_remote(name, spec)
        env = {k: v for k, v in os.environ.items() if k not in ("GIT_ASKPASS", "SSH_ASKPASS")}
        env.update(GIT_TERMINAL_PROMPT="0", GIT_ALLOW_PROTOCOL="http:https:git:file", LC_ALL="C")
        try:
            done = subprocess.run(
                [
                    "git",
                    "-c",
                    "advice.detachedHead=false",
                    "-c",
                    "http.followRedirects=false",
                    *args,
                ],
                capture_output=True,
                text=True,
                timeout=self.git_timeout,
                env=env,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except FileNotFoundError as exc:
            raise MaterialError(f"prerequisite {name!r}: the git command is not installed") from exc
        except subprocess.TimeoutExpired as exc:
            raise MaterialError(
                f"prerequisite {name!r}: git could not {doing} {shown(spec.url)} "
                f"within {self.git_timeout:g} s"
            ) from exc
        if done.returncode != 0:
            raise MaterialError(
                f"prerequisite {name!r}: git could not {doing} {shown(spec.url)}: "
                f"{_first_error(done.stderr)}"
            )
        return done.stdout

    def _resolve(self, name: str, spec: RepoSpec) -> str:
        """The commit to check out: given, or what the ref (HEAD when none) names right now."""
        ref = spec.ref
        if ref is not None and _FULL_SHA.fullmatch(ref.lower()):
            return ref.lower()
        patterns = ["HEAD"] if ref is None else [ref, f"{ref}^{{}}"]
        out = self._git(name, spec, "ls-remote", "--", spec.url, *patterns, doing="list")
        found = {}
        for line in out.splitlines():
            sha, _, refname = line.partition("\t")
            found[refname] = sha
        if ref is None:
            if "HEAD" in found:
                return found["HEAD"]
            raise MaterialError(f"prerequisite {name!r}: {shown(spec.url)} has no HEAD commit")
        for candidate in (
            f"{ref}^{{}}",
            ref,
            f"refs/tags/{ref}^{{}}",
            f"refs/tags/{ref}",
            f"refs/heads/{ref}",
        ):
            if candidate in found:
                return found[candidate]
        if _SHORT_SHA.fullmatch(ref.lower()):
            return ref.lower()  # an abbreviated commit; found in the full clone
        raise MaterialError(
            f"prerequisite {name!r}: {shown(spec.url)} has no branch, tag or commit {ref!r}"
        )

    def _checkout(self, name: str, spec: RepoSpec, commit: str, work: Path) -> None:
        """A shallow fetch of a full commit id where the server allows it, else a full clone."""

        def in_work(doing: str, *args: str) -> None:
            self._git(name, spec, "-C", str(work), *args, doing=doing)

        if _FULL_SHA.fullmatch(commit):
            in_work("prepare a clone of", "init", "--quiet")
            try:
                in_work("fetch", "fetch", "--quiet", "--depth", "1", "--", spec.url, commit)
            except MaterialError:
                shutil.rmtree(work / ".git", ignore_errors=True)  # try a full clone instead
            else:
                in_work("check out", "checkout", "--quiet", "--detach", commit)
                return
        clone = ("clone", "--quiet", "--no-checkout", "--", spec.url, str(work))
        self._git(name, spec, *clone, doing="clone")
        try:
            in_work("find", "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
        except MaterialError as exc:
            raise MaterialError(
                f"prerequisite {name!r}: {shown(spec.url)} has no commit {commit!r}"
            ) from exc
        in_work("check out", "checkout", "--quiet", "--detach", commit)
        in_work("forget the origin of", "remote", "remove", "origin")  # may hold a token


# --- small pieces ----------------------------------------------------------------------------


def _symlink_within(base: Path, target: Path) -> Path | None:
    """The first symlink on the way from `base` down to `target` (itself included), if any."""
    here = base
    for part in target.relative_to(base).parts:
        here = here / part
        if here.is_symlink():
            return here
    return None


def _make_within(base: Path, target: Path) -> None:
    """Make `target` and its parents below `base`, never through a symlink a job left there."""
    base.mkdir(parents=True, exist_ok=True)
    here = base
    for part in target.relative_to(base).parts:
        here = here / part
        if here.is_symlink():
            raise OSError(f"{here} is a symbolic link")
        if not here.exists():
            here.mkdir()
        elif not here.is_dir():
            raise OSError(f"{here} is not a directory")


def repository_name(url: str) -> str:
    """The directory `git clone URL` would make: the last path segment without `.git`."""
    path = urlsplit(url).path if _SCHEME.match(url) else url
    last = unquote(path.rstrip("/").rsplit("/", 1)[-1])
    return last[: -len(".git")] if last.endswith(".git") and len(last) > 4 else last


def _is_ftp(uri: str) -> bool:
    match = _SCHEME.match(uri)
    return match is not None and match.group(1).lower() == "ftp"


def _entry_name(segment: str) -> str:
    """A directory entry name from a URL path segment or file name."""
    clean = segment.replace("/", "_").replace("\0", "_")
    return "index" if clean in ("", ".", "..") else clean


def _content_length(response: httpx.Response) -> int | None:
    try:
        return int(response.headers["content-length"])
    except (KeyError, ValueError):
        return None


def _first_error(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("fatal:", "error:")):
            return shown(line)
    return shown(lines[0]) if lines else "no error output"
