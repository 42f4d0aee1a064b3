"""Where a reference was written in the user's document, in each dialect.

A JobSpec keeps no paths, so reference errors would otherwise point nowhere. Roles and
prerequisites keep their document order in a JobSpec that parsed without errors, which is all
this needs (the draft dialect also needs the raw document: its roles may sit under `job:`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from server.protocol.issues import join
from server.protocol.loader import LoadError, load_document
from server.protocol.model import Dialect, JobSpec


@dataclass(frozen=True)
class RolePaths:
    docker_image: str
    data: str
    script: str
    output: str
    _prerequisites: str
    _listed: bool  # whether the prerequisites path is a list to index into
    _first: int = 0  # the index of the role's first `prerequisites` entry in that list

    def prerequisite(self, index: int) -> str:
        if not self._listed:
            return self._prerequisites
        return join(self._prerequisites, self._first + index)


class DocumentPaths:
    def __init__(self, spec: JobSpec) -> None:
        self.dialect = spec.dialect
        self._raw: dict[str, Any] = {}
        self._base = ""
        self._prerequisites = [f"prerequisites[{i}]" for i in range(len(spec.prerequisites))]
        if spec.dialect is Dialect.DRAFT:
            self._read_draft(spec)

    def _read_draft(self, spec: JobSpec) -> None:
        try:
            raw = load_document(spec.source).data
        except LoadError:
            return
        if not isinstance(raw, dict):
            return
        paths: list[str] = []
        if "job" in raw and "tasks" not in raw and isinstance(raw["job"], dict):
            if isinstance(raw.get("prerequisites"), list):
                paths += [f"prerequisites[{i}]" for i in range(len(raw["prerequisites"]))]
            self._base, raw = "job", raw["job"]
        if isinstance(raw.get("prerequisites"), list):
            base = join(self._base, "prerequisites")
            paths += [join(base, i) for i in range(len(raw["prerequisites"]))]
        self._raw = raw
        if len(paths) == len(spec.prerequisites):
            self._prerequisites = paths

    def prerequisite(self, index: int) -> str:
        return self._prerequisites[index]

    def role(self, index: int, name: str) -> RolePaths:
        if self.dialect is Dialect.V2:
            base = f"taskRoles.{name}"
            return RolePaths(
                docker_image=join(base, "dockerImage"),
                data=join(base, "data"),
                script=join(base, "script"),
                output=join(base, "output"),
                _prerequisites=join(base, "prerequisites"),
                _listed=True,
            )
        if self.dialect is Dialect.V1:
            base = f"taskRoles[{index}]"
            return RolePaths(base, base, base, base, base, _listed=False)
        base = join(join(self._base, "tasks"), index)
        tasks = self._raw.get("tasks")
        task = tasks[index] if isinstance(tasks, list) and index < len(tasks) else {}
        task = task if isinstance(task, dict) else {}
        data = join(base, "data")
        return RolePaths(
            docker_image=join(base, "dockerimage"),
            data=join(data, 0) if isinstance(task.get("data"), list) else data,
            script=join(base, "script"),
            output=join(base, "output" if "output" in task else "storage"),
            _prerequisites=data,  # a draft task's further data names are its prerequisites
            _listed=isinstance(task.get("data"), list),
            _first=1,
        )
