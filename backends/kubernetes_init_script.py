"""What a pod's init container runs before the job's commands: the check that the instance's
host ports are free on its node, and the download of data and clone of scripts; also the
checks that refuse, before anything is created, a prerequisite it could not fetch.
"""

from __future__ import annotations

import re
import shlex
from urllib.parse import urlsplit

from backends.base import WORK_DIR, Fetch, Material
from backends.kubernetes_ports import duplicates
from simulator.prereqs import UnservableMaterial, check_name, parse_repo, repository_name

PORT_IN_USE_EXIT = 10  # the init container's exit code for a port already in use


def download_entries(material: Material) -> list[tuple[str, str]]:
    """(file name, URL) of each URI of a data prerequisite; only http(s) is fetched here."""
    if not material.uris:
        raise UnservableMaterial(f"prerequisite {material.name!r}: a data prerequisite needs a URI")
    entries: dict[str, str] = {}
    for uri in material.uris:
        parts = urlsplit(uri)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise UnservableMaterial(
                f"prerequisite {material.name!r}: {shown_uri(uri)} cannot be fetched on Kubernetes "
                "(data is downloaded by an init container over http or https; mount anything "
                "else as a storage)"
            )
        entry = parts.path.rsplit("/", 1)[-1] or "index"
        if entry in entries:
            raise UnservableMaterial(
                f"prerequisite {material.name!r}: {shown_uri(entries[entry])} and {shown_uri(uri)} "
                f"would both be saved as {entry!r}"
            )
        entries[entry] = uri
    return list(entries.items())


def repositories(material: Material) -> list[tuple[str, str, str | None]]:
    """(directory under the work dir, url, ref) of each repository of a script prerequisite:
    one at <name>/, or each of a list at <name>/<repository name>/."""
    if not material.per_repository:
        if len(material.uris) != 1:
            raise UnservableMaterial(
                f"prerequisite {material.name!r}: a script prerequisite takes exactly one "
                f"repository (got {len(material.uris)})"
            )
        return [(material.name, *_repo(material, material.uris[0]))]
    if not material.uris:
        raise UnservableMaterial(
            f"prerequisite {material.name!r}: a script prerequisite needs at least one repository"
        )
    found: dict[str, tuple[str, str, str | None]] = {}
    for uri in material.uris:
        url, ref = _repo(material, uri)
        directory = repository_name(url)
        check_name(directory, f"prerequisite {material.name!r}: repository name")
        if directory in found:
            raise UnservableMaterial(
                f"prerequisite {material.name!r}: {shown_uri(found[directory][1])} and "
                f"{shown_uri(url)} would both be checked out at {material.name}/{directory}"
            )
        found[directory] = (f"{material.name}/{directory}", url, ref)
    return list(found.values())


def _repo(material: Material, uri: str) -> tuple[str, str | None]:
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", uri.strip())
    if scheme and scheme.group(1).lower() not in ("http", "https", "git"):
        raise UnservableMaterial(
            f"prerequisite {material.name!r}: {shown_uri(uri)} cannot be cloned on "
            "Kubernetes (the init container clones http, https and git repositories)"
        )
    spec = parse_repo(material.name, uri)
    if spec.url.startswith("/") or spec.url.lower().startswith("file:"):
        raise UnservableMaterial(
            f"prerequisite {material.name!r}: {spec.url} is a path on this machine, which the "
            "cluster's nodes do not have; use an http(s) or git repository"
        )
    return spec.url, spec.ref


def shown_uri(uri: str) -> str:
    """The URI with its credentials masked, for messages."""
    return re.sub(r"(://)[^/@\s]+@", r"\1***@", uri)


def port_check_lines(ports: dict[str, list[int]]) -> list[str]:
    """Fail with PORT_IN_USE_EXIT when a port of the instance is taken on its node."""
    lines = [
        "in_use() {",
        "  hex=$(printf '%04X' \"$1\")",
        "  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null"
        ' | grep -Eq "^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:[0-9A-F]+ 0A "',
        "}",
    ]
    for port in duplicates(ports):
        lines.append(
            f"say 'port {port} was hashed twice for this instance: address already in use'"
            f"; exit {PORT_IN_USE_EXIT}"
        )
    every = " ".join(str(p) for p in sorted({p for group in ports.values() for p in group}))
    lines += [
        f"for port in {every}; do",
        '  if in_use "$port"; then',
        f'    say "port $port: address already in use on node $NODE_NAME"; exit {PORT_IN_USE_EXIT}',
        "  fi",
        "done",
    ]
    return lines


def fetch_lines(material: Material) -> list[str]:
    """The shell lines that put a data or script prerequisite in place, failing the pod when
    they cannot."""
    q = shlex.quote
    target = f"{WORK_DIR}/{material.name}"
    if material.kind is Fetch.DOWNLOAD:
        lines = [f"say {q(f'data {material.name}: downloading into {target}')}", f"cd {q(target)}"]
        for entry, url in download_entries(material):
            failed = f"data {material.name}: cannot download {shown_uri(url)}"
            lines.append(f"wget -q -O {q(entry)} {q(url)} || {{ say {q(failed)}; exit 1; }}")
        return lines
    lines = []
    for directory, url, ref in repositories(material):
        target = f"{WORK_DIR}/{directory}"
        failed = f"script {material.name}: cannot clone {shown_uri(url)}"
        lines += [
            f"say {q(f'script {material.name}: cloning {shown_uri(url)} into {target}')}",
            f"git clone -q {q(url)} {q(target)} || {{ say {q(failed)}; exit 1; }}",
        ]
        if ref:
            missing = f"script {material.name}: {shown_uri(url)} has no ref {ref}"
            lines.append(
                f"git -C {q(target)} checkout -q {q(ref)} || {{ say {q(missing)}; exit 1; }}"
            )
    return lines


def optional_fetch_lines(material: Material) -> list[str]:
    """A fetch with failurePolicy: ignore: when it fails, the instance starts without it."""
    note = (
        f"warning: prerequisite {material.name} could not be fetched; its failurePolicy is "
        "ignore, so the instance starts without it"
    )
    return ["(", *fetch_lines(material), f") || say {shlex.quote(note)}"]
