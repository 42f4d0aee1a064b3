"""Role start order on Kubernetes: an init container holds a pod's commands until its role's
dependencies hold, as the server, watching every pod of the attempt, writes into a ConfigMap.

The pods need no API rights, and because the kubelet refreshes a mounted ConfigMap only about
once a minute, a dependency ready by a port is also checked from inside (docs/kubernetes.md).
"""

from __future__ import annotations

import math
import shlex
from typing import TYPE_CHECKING, Any

from backends.base import LaunchRequest, ReadinessCheck, RoleLaunch, StartDependency
from backends.kubernetes_isolation import container_security_context
from backends.start_gate import (
    DEPENDENCY_FAILED,
    PeerState,
    Verdict,
    judge,
    never_reason,
    timeout_reason,
    waiting_reason,
)

if TYPE_CHECKING:
    from backends.kubernetes_manifests import AttemptBuilder

START_ORDER_CONTAINER = "start-order"
ORDER_VOLUME = "start-order"
ORDER_DIR = "/usr/local/pai-start-order"
WAIT, GO, NEVER = "wait", "go", "never"  # NEVER is the server's alone: it ends the pod


def order_config_map_name(service: str) -> str:
    return f"{service}-order"


def order_key(builder: AttemptBuilder, role: str, index: int) -> str:
    """The waiting instance's key in the start-order ConfigMap: its hostname."""
    return builder.host(role, index)


def by_port(dep: StartDependency, request: LaunchRequest) -> bool:
    """Whether the init container can see `dep` hold by itself: ready on a port readiness."""
    target = next((r for r in request.roles if r.name == dep.role), None)
    return (
        dep.when == "ready"
        and target is not None
        and target.readiness is not None
        and target.readiness.port is not None
    )


def order_data(builder: AttemptBuilder) -> dict[str, str]:
    """The start-order ConfigMap's first data: every waiting instance waits."""
    return {
        order_key(builder, role.name, i): WAIT
        for role in builder.request.roles
        if role.depends_on
        for i in range(role.instances)
    }


def order_volume(builder: AttemptBuilder) -> dict[str, Any]:
    return {
        "name": ORDER_VOLUME,
        "configMap": {"name": order_config_map_name(builder.service)},
    }


def readiness_probe(check: ReadinessCheck, ports: dict[str, list[int]]) -> dict[str, Any] | None:
    """The main container's readinessProbe for the role's readiness check (None: no port)."""
    probe: dict[str, Any]
    if check.port is not None:
        numbers = ports.get(check.port)
        if not numbers:
            return None
        probe = {"tcpSocket": {"port": numbers[0]}}
    else:
        probe = {"exec": {"command": list(check.command)}}
    # Kubernetes counts whole seconds, at least one
    probe["periodSeconds"] = max(1, math.ceil(check.period_seconds))
    probe["timeoutSeconds"] = max(1, math.ceil(check.timeout_seconds))
    probe["failureThreshold"] = check.failure_threshold
    return probe


def verdict(
    role: RoleLaunch, request: LaunchRequest, peers: dict[str, list[PeerState]]
) -> tuple[str, str | None]:
    """What the start-order ConfigMap says to `role`'s waiting instances: (GO, None),
    (WAIT, None) or (NEVER, why), judged from what each depended-on role's instances reached."""
    waits = False
    for dep in role.depends_on:
        found = judge(dep, peers.get(dep.role, []))
        if found is Verdict.NEVER:
            return NEVER, never_reason(dep, request.role(dep.role).instances)
        waits = waits or found is Verdict.WAITS
    return (WAIT, None) if waits else (GO, None)


def start_order_container(
    builder: AttemptBuilder, role: RoleLaunch, index: int
) -> dict[str, Any] | None:
    """The init container of the pod of `role`'s instance `index` that waits for its
    dependencies (None: its role waits for none)."""
    request = builder.request
    if not role.depends_on:
        return None
    q = shlex.quote
    port_deps = [d for d in role.depends_on if by_port(d, request)]
    reason = "; ".join(
        timeout_reason(d, request.role(d.role).instances, role.dependency_timeout_seconds)
        for d in role.depends_on
    )
    periods = [
        r.readiness.period_seconds
        for r in request.roles
        if r.readiness is not None and any(d.role == r.name for d in port_deps)
    ]
    lines = [
        "say() { printf '%s\\n' \"[paigraph start order] $*\"; }",
        "# a TCP connection is accepted: nc -z where nc has it, else busybox's -e (runs `true`",
        "# once connected, so it returns without waiting for the server to close)",
        "answers() {",
        '  nc -z -w 1 "$1" "$2" </dev/null >/dev/null 2>&1 ||',
        '    nc -w 1 "$1" "$2" -e true </dev/null >/dev/null 2>&1',
        "}",
        f'verdict="${{PAIGRAPH_START_ORDER_DIR:-{ORDER_DIR}}}/$PAIGRAPH_START_ORDER_KEY"',
        f"deadline=$(( $(date +%s) + {int(role.dependency_timeout_seconds)} ))",
    ]
    lines += [
        f"say {q(waiting_reason(d, request.role(d.role).instances))}" for d in role.depends_on
    ]
    lines += [
        "while :; do",
        '  said=$(cat "$verdict" 2>/dev/null)',
        '  case "$said" in',
        f"    {GO}) say 'what this role waits for holds'; exit 0 ;;",
        "  esac",
    ]
    if port_deps and len(port_deps) == len(role.depends_on):
        lines.append("  held=1")
        for dep in port_deps:
            target = request.role(dep.role)
            assert target.readiness is not None and target.readiness.port is not None
            lines.append("  n=0")
            for i in range(target.instances):
                port = builder.ports[(dep.role, i)][target.readiness.port][0]
                lines.append(f"  answers {q(builder.address(dep.role, i))} {port} && n=$((n + 1))")
            lines.append(f"  [ $n -ge {dep.instances} ] || held=0")
        lines.append("  [ $held = 1 ] && { say 'what this role waits for holds'; exit 0; }")
    lines += [
        '  if [ "$(date +%s)" -ge "$deadline" ]; then',
        f"    say {q(reason)}; exit {DEPENDENCY_FAILED}",
        "  fi",
        f"  sleep {max(1, round(min(periods, default=1.0)))}",
        "done",
    ]
    return {
        "name": START_ORDER_CONTAINER,
        "image": builder.settings.init_image,
        "imagePullPolicy": builder.settings.image_pull_policy,
        "command": ["/bin/sh", "-c", "\n".join(lines) + "\n"],
        "env": [
            {"name": "PAIGRAPH_START_ORDER_KEY", "value": order_key(builder, role.name, index)}
        ],
        "volumeMounts": [{"name": ORDER_VOLUME, "mountPath": ORDER_DIR, "readOnly": True}],
        "resources": {
            "requests": {"cpu": "10m", "memory": "16Mi"},
            "limits": {"cpu": "100m", "memory": "64Mi"},
        },
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": container_security_context(builder.settings),
    }
