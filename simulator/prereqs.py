"""Data, script and storage prerequisites, put in place once on the host and mounted in containers.

Downloads and clones land in a content cache so that a 16-instance job fetches its data once,
and whatever this machine cannot serve is refused at launch rather than failing later. URI
forms, cache keys and locking: docs/dialects.md, docs/architecture.md and docs/security.md.
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

    Local paths are allowed only under `allowed_file_roots` and never inside `protected` (the
    simulator's own state) or onto `engine_sockets`; `mirrors` maps URL prefixes to where they are
    fetched from instead (docs/configuration.md).
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
