"""What the prerequisite store reads from: local paths under the allowed roots, the simulated
file systems and node folders, mirrors, and its content cache with its per-key locks. The
downloads (prereq_downloads) and clones (prereq_clones) build on it; `MaterialStore`
(prereqs) is all of them together.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path, PurePath
from urllib.parse import unquote, urlsplit

from simulator import ftp_fetch
from simulator.dfs import DfsError, FileSystems, is_dfs_uri
from simulator.fetch_policy import FetchPolicy
from simulator.materials import (
    DEFAULT_GIT_TIMEOUT,
    DEFAULT_HTTP_TIMEOUT,
    DEFAULT_MAX_DOWNLOAD_BYTES,
    SCHEME,
    MaterialError,
    MaterialKind,
    RepoSpec,
    Simulated,
    Source,
    UnservableMaterial,
    check_name,
    entry_name,
    is_ftp,
    make_within,
    parse_repo,
    refusal,
    repository_name,
    shown,
    symlink_within,
)
from simulator.names import safe


class MaterialSources:
    """The store's settings, where URIs are read from, and its cache."""

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

    # --- simulated locations -----------------------------------------------------------------

    def _copied_script(self, kind: MaterialKind, uris: Sequence[str]) -> bool:
        """A script on the simulated HDFS or on FTP is a folder of files, not a repository:
        copied."""
        return kind is MaterialKind.CLONE and any(is_dfs_uri(u) or is_ftp(u) for u in uris)

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
            make_within(self._node_base(owner), target)
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

    def _sources(self, name: str, uris: Sequence[str], owner: str = "") -> list[Source]:
        if not uris:
            raise UnservableMaterial(f"prerequisite {name!r}: a data prerequisite needs a URI")
        sources: list[Source] = []
        for written in uris:
            uri = self.mirrored(written)
            match = SCHEME.match(uri)
            scheme = match.group(1).lower() if match else None
            if scheme in ("http", "https"):
                parts = urlsplit(uri)
                if not parts.hostname:
                    raise UnservableMaterial(f"prerequisite {name!r}: {shown(uri)} has no host")
                segment = unquote(parts.path.rsplit("/", 1)[-1])
                sources.append(Source(uri, entry_name(segment), url=uri))
            elif scheme == "ftp":
                try:
                    location = ftp_fetch.parse(uri)
                except ValueError as exc:
                    raise UnservableMaterial(f"prerequisite {name!r}: {shown(uri)} {exc}") from None
                sources.append(Source(uri, entry_name(location.name), ftp=location))
            elif scheme == "hdfs" and self.dfs is not None:
                path = self._dfs_source(name, uri, owner)
                sources.append(Source(uri, entry_name(path.name), path=path))
            elif scheme is None and uri.startswith("/") and self._node_stand_in(uri):
                path = self._node_folder(uri, owner)
                # a job may have left a symlink in its node folder: never copy through one
                linked = symlink_within(self._node_base(owner), path)
                if linked is not None:
                    raise UnservableMaterial(
                        f"prerequisite {name!r}: {uri}: {linked.name!r} on the simulated node "
                        "is a symbolic link, which is not followed"
                    )
                sources.append(Source(uri, entry_name(path.name), path=path))
            elif scheme == "file" or (scheme is None and uri.startswith("/")):
                path = self._local(name, uri)
                sources.append(Source(uri, entry_name(path.name), path=path))
            elif scheme is None:
                raise UnservableMaterial(
                    f"prerequisite {name!r}: {shown(uri)!r} is neither a URL nor an absolute path"
                )
            else:
                raise refusal(name, MaterialKind.DOWNLOAD, scheme, self.dfs is not None)
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
        match = SCHEME.match(uri)
        if match:
            scheme = match.group(1).lower()
            if scheme == "hdfs" and self.dfs is not None:
                return self._dfs_source(name, uri, owner), Simulated.DFS
            if scheme != "file":
                raise refusal(name, MaterialKind.MOUNT, scheme, self.dfs is not None)
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
