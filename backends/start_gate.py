"""When a waiting role's commands may start: its dependencies, judged from what its peers did.

A backend places the whole gang at once; an instance of a role with `depends_on` keeps its
commands at the gate until every dependency holds. This module only judges: given what each
instance of the depended-on roles has reached, a dependency holds, still waits, or can never
hold (too many of them ended without getting there). How "ready" is found out (a TCP connection,
a command run inside) is the backend's.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from enum import StrEnum

from backends.base import RoleLaunch, StartDependency

# Exit code of an instance whose dependency never held: its wait ran past its deadline, or the
# instances it waited for ended without getting where it needed them.
DEPENDENCY_FAILED = 241  # server.jobs.exit_codes.START_DEPENDENCY_FAILED


class Verdict(StrEnum):
    HOLDS = "holds"
    WAITS = "waits"
    NEVER = "never"


@dataclass
class PeerState:
    """What one instance of a depended-on role has reached, as its backend saw it."""

    running: bool = False  # its commands started (it may have ended since)
    ready: bool = False  # it is ready now (see ReadinessCount) and has not ended
    ended: bool = False
    exit_code: int | None = None


@dataclass
class ReadinessCount:
    """Whether an instance is ready, from its readiness check's results in turn, as
    Kubernetes counts a readinessProbe: not ready until a check passes; ready from the first
    pass; not ready again only after `failure_threshold` checks in a row failed (one failure
    of a ready instance is a hiccup, not a verdict)."""

    failure_threshold: int
    ready: bool = False
    failures: int = 0  # checks failed in a row

    def record(self, passed: bool) -> bool:
        if passed:
            self.ready, self.failures = True, 0
        else:
            self.failures += 1
            if self.failures >= self.failure_threshold:
                self.ready = False
        return self.ready


def judge(dep: StartDependency, peers: list[PeerState]) -> Verdict:
    """Whether `dep` holds over the depended-on role's instances `peers`."""
    if dep.when == "running":
        reached = [p.running for p in peers]
    elif dep.when == "ready":
        reached = [p.ready for p in peers]
    else:
        reached = [p.ended and p.exit_code == 0 for p in peers]
    got = sum(reached)
    if got >= dep.instances:
        return Verdict.HOLDS
    still_possible = sum(1 for p, r in zip(peers, reached, strict=True) if not r and not p.ended)
    return Verdict.WAITS if got + still_possible >= dep.instances else Verdict.NEVER


_PHASE = {"running": "to be running", "ready": "to be ready", "succeeded": "to succeed"}


def waiting_reason(dep: StartDependency, instances_of: int) -> str:
    """`waiting for 2 of 2 ps instances to be ready`."""
    return f"waiting for {dep.instances} of {instances_of} {dep.role} instances {_PHASE[dep.when]}"


def waits_for(role: RoleLaunch, roles: dict[str, RoleLaunch]) -> str | None:
    """What an instance of `role` waits for, as one sentence, or None when it waits for none."""
    if not role.depends_on:
        return None
    parts = [
        waiting_reason(d, roles[d.role].instances if d.role in roles else d.instances)
        for d in role.depends_on
    ]
    return "; ".join(parts)


def never_reason(dep: StartDependency, instances_of: int) -> str:
    return (
        f"its commands did not start: it waited for {dep.instances} of {instances_of} "
        f"{dep.role} instances {_PHASE[dep.when]}, and too many of them ended without that"
    )


def timeout_reason(dep: StartDependency, instances_of: int, seconds: float) -> str:
    return (
        f"its commands did not start: it waited {seconds:g} s (dependencyTimeoutSeconds) for "
        f"{dep.instances} of {instances_of} {dep.role} instances {_PHASE[dep.when]}"
    )


def port_answers(host: str, port: int, timeout: float) -> bool:
    """Whether a TCP connection to host:port is accepted within `timeout` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
