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

import os
from collections.abc import Sequence
from pathlib import Path

from simulator import local_copy
from simulator.dfs import is_dfs_uri
from simulator.materials import (
    DEFAULT_GIT_TIMEOUT,
    DEFAULT_HTTP_TIMEOUT,
    DEFAULT_MAX_DOWNLOAD_BYTES,
    MaterialError,
    MaterialKind,
    Mount,
    Progress,
    RepoSpec,
    Simulated,
    UnservableMaterial,
    check_name,
    check_storage,
    human_size,
    parse_repo,
    repository_name,
    shown,
)
from simulator.prereq_clones import Clones
from simulator.prereq_downloads import Downloads

__all__ = [
    "DEFAULT_GIT_TIMEOUT",
    "DEFAULT_HTTP_TIMEOUT",
    "DEFAULT_MAX_DOWNLOAD_BYTES",
    "MaterialError",
    "MaterialKind",
    "MaterialStore",
    "Mount",
    "Progress",
    "RepoSpec",
    "Simulated",
    "UnservableMaterial",
    "check_name",
    "check_storage",
    "parse_repo",
    "repository_name",
    "shown",
]


class MaterialStore(Downloads, Clones):
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
            raise MaterialError(f"{what}: {path} is larger than {human_size(limit)}")
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
