"""Storages a resolved role mounts: `requireStorages` of the prerequisites it uses, merged with
the job's own `extras.storages` and with an output that names an admin-defined storage.

Storages are named and defined by an admin (a host directory or a volume, read-only or
read-write, and who may use it). Asking for one nobody defined, or one the viewer may not use,
is an error with its own code; each definition is copied into the resolved role so a job
resumed later mounts what it was resolved with.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from backends.base import WORK_DIR
from server.marketplace.components import Code
from server.marketplace.lookup import StorageAccess, StorageDefinition, StorageMode, Viewer
from server.protocol.issues import Issue, Severity, join
from server.protocol.model import Prerequisite, StorageMount

log = logging.getLogger(__name__)

DEFAULT_MOUNT_ROOT = "/mnt"  # OpenPAI mounts a storage at /mnt/<name> unless told otherwise
_BARE_NAME = re.compile(r"[A-Za-z0-9._~-]+")


@dataclass(frozen=True)
class StorageAsk:
    """One storage asked for, where it was asked (a path into the job) and by whom."""

    name: str
    mount_path: str
    path: str
    asked_by: str


def job_storages(extras: dict[str, Any], issues: list[Issue]) -> list[StorageAsk]:
    """The job's `extras.storages` (OpenPAI's `[{name, mountPath?}]`), for every role."""
    raw = extras.get("storages")
    where = "extras.storages"
    if raw is None:
        return []
    if not isinstance(raw, list):
        issues.append(Issue(where, "type", "must be a list of {name, mountPath} mappings"))
        return []
    if not raw:
        issues.append(
            Issue(
                where,
                "no-default-storages",
                "an empty list means the user's default storages in OpenPAI; this server has "
                "none, so nothing is mounted: name each storage",
                Severity.WARNING,
            )
        )
    asks: list[StorageAsk] = []
    for i, entry in enumerate(raw):
        path = join(where, i)
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            issues.append(Issue(path, "type", "must be a mapping with a `name` (and `mountPath`)"))
            continue
        mount = entry.get("mountPath")
        if mount is not None and (not isinstance(mount, str) or not mount.startswith("/")):
            issues.append(Issue(join(path, "mountPath"), "path", "must be an absolute path"))
            continue
        asks.append(
            StorageAsk(
                name=entry["name"],
                mount_path=mount or f"{DEFAULT_MOUNT_ROOT}/{entry['name']}",
                path=path,
                asked_by="the job's extras.storages",
            )
        )
    return asks


def required_storages(prerequisite: Prerequisite, path: str, local: bool) -> list[StorageAsk]:
    """A prerequisite's `requireStorages`; `path` is its own (local) or the reference's."""
    return [
        StorageAsk(
            name=s.name,
            mount_path=s.mount_path or f"{DEFAULT_MOUNT_ROOT}/{s.name}",
            path=join(join(path, "requireStorages"), i) if local else path,
            asked_by=f"prerequisite {prerequisite.name!r}",
        )
        for i, s in enumerate(prerequisite.require_storages)
    ]


def output_storage_name(output: Prerequisite) -> str | None:
    """The storage an output / storage prerequisite names: its bare-name uri, else its own name
    when it has no uri (a path or URL is no admin-defined storage)."""
    if not output.uri:
        return output.name
    if len(output.uri) == 1 and _BARE_NAME.fullmatch(output.uri[0]):
        return output.uri[0]
    return None


class StorageMerger:
    """Checks storages against the admin's definitions and the viewer's permissions, once each."""

    def __init__(self, access: StorageAccess, viewer: Viewer, issues: list[Issue]) -> None:
        self.access = access
        self.viewer = viewer
        self.issues = issues
        self._definitions: dict[str, StorageDefinition | None] = {}
        self._allowed: dict[str, bool] = {}
        self._failed: set[str] = set()  # storages whose definition or permission could not be read
        self._reported: set[tuple[str, str, str]] = set()

    def mounts(
        self, asks: Iterable[StorageAsk], output: tuple[Prerequisite, str] | None
    ) -> list[StorageMount]:
        """The role's storages: `asks`, and its output (prerequisite, path) when it names an
        admin-defined storage (mounted at <workdir>/<output name> in place of a directory of
        the simulator's own)."""
        found: list[StorageMount] = []
        at: dict[str, tuple[str, str]] = {}  # mount path -> (storage, path asked)
        wanted = list(asks)
        if output is not None:
            prerequisite, path = output
            name = output_storage_name(prerequisite)
            if name is not None and self._definition(name, path) is not None:
                wanted.insert(
                    0,
                    StorageAsk(
                        name=name,
                        mount_path=f"{WORK_DIR}/{prerequisite.name}",
                        path=path,
                        asked_by=f"output {prerequisite.name!r}",
                    ),
                )
        for ask in wanted:
            mount = self._mount(ask)
            if mount is None:
                continue
            if ask.mount_path in at:
                other, other_path = at[ask.mount_path]
                if other != ask.name:
                    self._error(
                        ask.path,
                        Code.STORAGE_CONFLICT,
                        f"storage {ask.name!r} ({ask.asked_by}) and storage {other!r} (at "
                        f"{other_path or 'the job'}) would both be mounted at {ask.mount_path}",
                        ask.name,
                    )
                continue
            at[ask.mount_path] = (ask.name, ask.path)
            found.append(mount)
        return found

    def _mount(self, ask: StorageAsk) -> StorageMount | None:
        definition = self._definition(ask.name, ask.path)
        if ask.name in self._failed:
            return None
        if definition is None:
            self._error(
                ask.path,
                Code.STORAGE_UNDEFINED,
                f"storage {ask.name!r} ({ask.asked_by}) is not defined on this server: an admin "
                "must define it before a job can mount it",
                ask.name,
            )
            return None
        allowed = self._may_use(ask.name, ask.path)
        if ask.name in self._failed:
            return None
        if not allowed:
            self._error(
                ask.path,
                Code.STORAGE_FORBIDDEN,
                f"no permission to use storage {ask.name!r} ({ask.asked_by}); ask an admin to "
                "grant it to you or to one of your groups",
                ask.name,
            )
            return None
        return StorageMount(
            name=definition.name,
            source=definition.source,
            volume=definition.is_volume,
            read_only=definition.mode is StorageMode.READ_ONLY,
            mount_path=ask.mount_path,
        )

    def _definition(self, name: str, path: str) -> StorageDefinition | None:
        if name not in self._definitions:
            try:
                self._definitions[name] = self.access.storage(name)
            except Exception as exc:  # the store behind it failed
                self._unavailable(name, path, exc)
                self._definitions[name] = None
        return self._definitions[name]

    def _may_use(self, name: str, path: str) -> bool:
        if name not in self._allowed:
            try:
                self._allowed[name] = bool(self.access.may_use(name, self.viewer))
            except Exception as exc:
                self._unavailable(name, path, exc)
                self._allowed[name] = False
        return self._allowed[name]

    def _unavailable(self, name: str, path: str, exc: Exception) -> None:
        log.warning("reading the definition of storage %s failed: %r", name, exc)
        self._failed.add(name)
        self._error(
            path,
            Code.STORAGE_UNAVAILABLE,
            f"the storage definitions cannot be read to check storage {name!r} "
            f"({type(exc).__name__}); try again later",
            name,
        )

    def _error(self, path: str, code: Code, message: str, name: str) -> None:
        key = (path, code.value, name)
        if key not in self._reported:
            self._reported.add(key)
            self.issues.append(Issue(path, code.value, message))
