"""The values of prerequisites: their kinds, what may be asked for and how it is written (a
repository and its ref, a name, a storage), the errors that refuse one, and the small path
and text helpers the store uses.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx

from simulator import ftp_fetch

Progress = Callable[[str, str], None]
"""Called with (prerequisite name, message), e.g. ("mnist", "downloading data 'mnist' (3.2 MB)")."""

DEFAULT_MAX_DOWNLOAD_BYTES = 10 * 1000**3  # per prerequisite, all of its URIs together
DEFAULT_HTTP_TIMEOUT = 60.0  # seconds without progress (connect, each read)
DEFAULT_GIT_TIMEOUT = 600.0  # seconds for each git command
PROGRESS_EVERY = 2.0  # seconds between "n% of ..." reports of one download
CHUNK = 1 << 20

_NAME = re.compile(r"[A-Za-z0-9._~-]+")
SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_SCP_LIKE = re.compile(r"[^/]+:")  # user@host:path, which git reads as ssh
FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
SHORT_SHA = re.compile(r"[0-9a-f]{4,63}")
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
class Source:
    """One URI of a data prerequisite: a remote URL or a local path, and its entry's name."""

    uri: str
    entry: str
    url: str | None = None
    path: Path | None = None
    ftp: ftp_fetch.FtpLocation | None = None


def shown(uri: str) -> str:
    """A URI safe to print: credentials in it are masked."""
    return _USERINFO.sub(r"\1***@", uri)


def human_size(size: int) -> str:
    """A byte count as people read it (`3.2 MB`), for progress and refusals."""
    if size < 1000:
        return f"{size} B"
    value = float(size)
    for unit in ("kB", "MB", "GB", "TB"):
        value /= 1000
        if value < 1000 or unit == "TB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def cache_key(*parts: object) -> str:
    """The name of a cache entry: a hash of what it was made from."""
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32]


def refusal(name: str, kind: MaterialKind, scheme: str, dfs: bool = False) -> UnservableMaterial:
    """The error refusing a URI scheme this machine cannot serve for the kind."""
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
    match = SCHEME.match(text)
    if match:
        scheme = match.group(1).lower()
        if scheme not in ("http", "https", "git", "file"):
            raise refusal(name, MaterialKind.CLONE, scheme)
        if scheme != "file" and not urlsplit(text).hostname:
            raise UnservableMaterial(f"prerequisite {name!r}: {shown(text)} has no host")
        return RepoSpec(url=text, ref=ref)
    if text.startswith("/"):
        return RepoSpec(url=text, ref=ref)  # a local path, checked against the roots later
    if _SCP_LIKE.match(text):
        raise refusal(name, MaterialKind.CLONE, "ssh")
    return RepoSpec(url=f"https://{text}", ref=ref)


def symlink_within(base: Path, target: Path) -> Path | None:
    """The first symlink on the way from `base` down to `target` (itself included), if any."""
    here = base
    for part in target.relative_to(base).parts:
        here = here / part
        if here.is_symlink():
            return here
    return None


def make_within(base: Path, target: Path) -> None:
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
    path = urlsplit(url).path if SCHEME.match(url) else url
    last = unquote(path.rstrip("/").rsplit("/", 1)[-1])
    return last[: -len(".git")] if last.endswith(".git") and len(last) > 4 else last


def is_ftp(uri: str) -> bool:
    """Whether the URI is on FTP (`ftp_fetch` copies it)."""
    match = SCHEME.match(uri)
    return match is not None and match.group(1).lower() == "ftp"


def entry_name(segment: str) -> str:
    """A directory entry name from a URL path segment or file name."""
    clean = segment.replace("/", "_").replace("\0", "_")
    return "index" if clean in ("", ".", "..") else clean


def content_length(response: httpx.Response) -> int | None:
    """The size an HTTP response announces, None when it gives none."""
    try:
        return int(response.headers["content-length"])
    except (KeyError, ValueError):
        return None


def first_error(stderr: str) -> str:
    """The line of git's output that says what went wrong."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("fatal:", "error:")):
            return shown(line)
    return shown(lines[0]) if lines else "no error output"
