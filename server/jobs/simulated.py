"""Warnings for what the backend simulates rather than gives as the job asked.

The simulator runs jobs written for a real cluster: an `hdfs://` storage becomes a folder of
the user's simulated file system, `/mnt/output` a simulated node folder. The job runs, and the
user is told so, at the place in their document that asked for it (the prerequisite's `uri`,
v1's `codeDir` ...), with the code `simulated`.
"""

from __future__ import annotations

from backends.base import LaunchNote, LaunchRequest, NotesLaunches
from server.jobs.launch import default_fs_of
from server.jobs.v1_locations import CODE
from server.marketplace.document_paths import DocumentPaths
from server.protocol.issues import Issue, Severity
from server.protocol.model import Dialect, JobSpec, PrerequisiteType
from simulator.dfs import is_dfs_uri

SIMULATED = "simulated"
_V1_DIRS = (
    ("PAI_DATA_DIR", "dataDir", PrerequisiteType.DATA),
    ("PAI_OUTPUT_DIR", "outputDir", PrerequisiteType.OUTPUT),
)


def simulation_warnings(spec: JobSpec, request: LaunchRequest, backend: object) -> list[Issue]:
    """One warning per thing of `request` the backend says it simulates, at its path in the
    user's document; none for a backend that simulates nothing."""
    if not isinstance(backend, NotesLaunches):
        return []
    notes = backend.launch_notes(request)
    warnings = [_at_its_path(spec, note) for note in notes]
    if spec.dialect is Dialect.V1 and default_fs_of(backend):
        for variable, field, type_ in _V1_DIRS:
            location = request.env.get(variable, "")
            written = spec.prerequisite("default", type_)  # not outputDir's default
            if written is not None and written.uri and is_dfs_uri(location):
                warnings.append(
                    Issue(
                        field,
                        SIMULATED,
                        f"{location} is on a simulated HDFS: the job's user's own tree of that "
                        "file system on this machine; the job reads and writes it through the "
                        "`hdfs` stand-in on its PATH, and `paigraph fs` fills and reads it",
                        Severity.WARNING,
                    )
                )
    return warnings


def _at_its_path(spec: JobSpec, note: LaunchNote) -> Issue:
    path = note.path if note.path is not None else _path(spec, note.material)
    return Issue(path, note.code, note.message, Severity.WARNING)


def _path(spec: JobSpec, material: str | None) -> str:
    """Where the prerequisite named `material` was written: its `uri` (v1: the field)."""
    if material is None:
        return ""
    if spec.dialect is Dialect.V1:  # its one material is codeDir's copy
        return "codeDir" if material == CODE else ""
    paths = DocumentPaths(spec)
    for index, prerequisite in enumerate(spec.prerequisites):
        if prerequisite.name == material and prerequisite.type is not PrerequisiteType.DOCKERIMAGE:
            return f"{paths.prerequisite(index)}.uri"
    return "prerequisites"
