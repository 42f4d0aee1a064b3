"""v1's dataDir, outputDir and codeDir as OpenPAI's v1 runtime gave them to a job.

Variables in them are expanded before they are exported as PAI_DATA_DIR, PAI_OUTPUT_DIR and
PAI_CODE_DIR, outputDir has OpenPAI's default, and codeDir is copied into the container as
`code/` (docs/dialects.md, v1: codeDir, dataDir, outputDir).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from backends.base import DEFAULT_FS_URI, Fetch, Material
from server.jobs.not_runnable import NotRunnable
from server.protocol.model import JobSpec, PrerequisiteType

CODE = "code"  # codeDir is copied to $PAI_WORK_DIR/code
DEFAULT_FS_VARIABLE = "PAI_DEFAULT_FS_URI"
_FIELDS = (
    ("dataDir", "PAI_DATA_DIR", PrerequisiteType.DATA),
    ("outputDir", "PAI_OUTPUT_DIR", PrerequisiteType.OUTPUT),
    ("codeDir", "PAI_CODE_DIR", PrerequisiteType.SCRIPT),
)
_VARIABLE = re.compile(r"\$(?:\{(PAI_\w+)\}|(PAI_\w+))")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_COPIED = ("http", "https", "ftp", "file", "hdfs")  # hdfs: where the backend has (or simulates) one


@dataclass(frozen=True)
class V1Locations:
    """The job's PAI_*_DIR variables, and the material that copies codeDir in, if any."""

    env: dict[str, str] = field(default_factory=dict)
    code: Material | None = None
    auth_file: str | None = None  # authFile, expanded: read for the image's credentials


def job_variables(spec: JobSpec, user: str, default_fs: str = DEFAULT_FS_URI) -> dict[str, str]:
    """The variables with one value for the whole job, known before it is placed."""
    return {
        DEFAULT_FS_VARIABLE: default_fs,
        "PAI_JOB_NAME": spec.name,
        "PAI_USER_NAME": user,
        "PAI_USERNAME": user,
        "PAI_JOB_VC_NAME": spec.virtual_cluster,
        "PAI_VIRTUAL_CLUSTER": spec.virtual_cluster,
    }


def expand(value: str, variables: dict[str, str]) -> str:
    """`$PAI_X` / `${PAI_X}` replaced by its value; a name not in `variables` stays as written
    (a whole name only: `$PAI_JOB_NAME_2` is not `$PAI_JOB_NAME` followed by `_2`)."""

    def value_of(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return variables.get(name, match.group(0))

    return _VARIABLE.sub(value_of, value)


def v1_locations(spec: JobSpec, user: str, default_fs: str = DEFAULT_FS_URI) -> V1Locations:
    """dataDir, outputDir (or its default) and codeDir of a v1 job, expanded, with
    `$PAI_DEFAULT_FS_URI` the backend's default file system (`default_fs`)."""
    variables = job_variables(spec, user, default_fs)
    env: dict[str, str] = {}
    code: Material | None = None
    for key, variable, type_ in _FIELDS:
        found = spec.prerequisite("default", type_)
        value = found.uri[0] if found is not None and found.uri else ""
        if not value and key == "outputDir":
            value = f"{default_fs}/Output/{spec.name}"
        if not value:
            continue
        env[variable] = expand(value, variables)
        if key == "codeDir":
            code = _code(env[variable])
    auth_file = expand(spec.auth_file, variables) if spec.auth_file else None
    if auth_file is not None:
        _check_local("authFile", auth_file, "read")
    return V1Locations(env=env, code=code, auth_file=auth_file)


def _check_local(path: str, location: str, doing: str) -> None:
    """A location this machine can read: a local path (bare or file://) only."""
    match = _SCHEME.match(location)
    scheme = match.group(1).lower() if match else None
    if (scheme is None and location.startswith("/")) or scheme == "file":
        return
    if scheme is None:
        raise NotRunnable(path, f"{location!r} is not an absolute path")
    raise NotRunnable(
        path,
        f"{location} cannot be {doing} here: there is no {scheme} file system; give a file on "
        "this machine (under the simulator's allowed_file_roots)",
    )


def _code(location: str) -> Material:
    """codeDir copied into the container: an http(s) file, an ftp file or directory's contents,
    a local directory's contents, or (where the backend has one) a directory of the HDFS, as
    OpenPAI v1 copied it to `code/`."""
    match = _SCHEME.match(location)
    scheme = match.group(1).lower() if match else None
    if scheme is None and not location.startswith("/"):
        raise NotRunnable(
            "codeDir",
            f"{location!r} is neither a URL nor an absolute path; give an http(s) URL or a "
            "directory on this machine",
        )
    if scheme is not None and scheme not in _COPIED:
        raise NotRunnable(
            "codeDir",
            f"{location} cannot be copied into the container: there is no {scheme} file system "
            "here; give an http(s) or ftp URL, an hdfs:// directory or a directory on this machine "
            "(under the simulator's allowed_file_roots)",
        )
    return Material(name=CODE, kind=Fetch.DOWNLOAD, uris=[location], as_directory=True)
