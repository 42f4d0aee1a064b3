"""Asks for more than an unprivileged container: refused wherever a job could write them.

A job writing `privileged`, `hostNetwork`, `capAdd` ... where paigraph reads options gets an
error at that path instead of a silent "ignored", so nobody believes a job got what it asked
for (docs/security.md, What a job may touch).
"""

from __future__ import annotations

from typing import Any

from server.protocol.issues import Issues, join

MAX_SCAN_DEPTH = 16  # the loader already bounds nesting; this bounds the walk on its own

# Option names (lower case, without `_` and `-`) and what each would give the container.
_ASKS: dict[str, str] = {
    "privileged": "a privileged container",
    "capadd": "extra Linux capabilities",
    "capabilities": "extra Linux capabilities",
    "securityopt": "other security options",
    "securitycontext": "another security context",
    "allowprivilegeescalation": "privilege escalation",
    "hostnetwork": "the host's network",
    "networkmode": "another network",
    "network": "another network",
    "hostpid": "the host's processes",
    "pidmode": "the host's processes",
    "pid": "the host's processes",
    "hostipc": "the host's IPC namespace",
    "ipcmode": "the host's IPC namespace",
    "ipc": "the host's IPC namespace",
    "usernsmode": "the host's user namespace",
    "userns": "the host's user namespace",
    "uts": "the host's UTS namespace",
    "utsmode": "the host's UTS namespace",
    "devices": "host devices",
    "volumes": "host directories",
    "volumemounts": "host directories",
    "hostpath": "host directories",
    "mounts": "host directories",
    "binds": "host directories",
    "volumesfrom": "another container's mounts",
    "dockersocket": "the Docker engine's socket",
    "runtime": "another container runtime",
    "cgroupparent": "another cgroup",
    "sysctls": "kernel settings",
}
_WHY = (
    "instances run unprivileged (no-new-privileges, a fixed set of capabilities) on their "
    "job's own network, with only their prerequisites and storages mounted, and a job cannot "
    "ask for more"
)


def asked_for(key: object) -> str | None:
    """What the option named `key` would give the container, or None for a harmless name."""
    if not isinstance(key, str):
        return None
    return _ASKS.get(key.replace("_", "").replace("-", "").lower())


def _is_set(value: Any) -> bool:
    """`privileged: false`, `capAdd: []` or `hostNetwork: null` ask for nothing."""
    return value not in (None, False, "", [], {}, "false", "False", 0)


def check_options(options: dict[Any, Any], path: str, issues: Issues) -> set[Any]:
    """Report each key of one options mapping that asks for privilege; the keys reported."""
    refused = set()
    for key, value in options.items():
        what = asked_for(key)
        if what is not None and _is_set(value):
            issues.error(
                join(path, str(key)),
                "privilege-refused",
                f"`{key}` asks for {what}, which is refused: {_WHY}",
            )
            refused.add(key)
    return refused


def check_tree(value: Any, path: str, issues: Issues, depth: int = 0) -> None:
    """Report privilege asks anywhere in a free-form tree (a job's `extras`)."""
    if depth > MAX_SCAN_DEPTH:
        return
    if isinstance(value, dict):
        refused = check_options(value, path, issues)
        for key, child in value.items():
            if key not in refused:
                check_tree(child, join(path, str(key)), issues, depth + 1)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            check_tree(child, join(path, index), issues, depth + 1)
