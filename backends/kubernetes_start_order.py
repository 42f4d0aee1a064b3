"""Role start order on Kubernetes: an init container that holds a pod's commands back until the
instances its role waits for answer on their readiness port.

It runs after the gang's barrier (every peer's name resolves by then) and reaches the
depended-on instances through their DNS names under the attempt's headless Service and their
allocated ports, so the pod needs no Kubernetes API rights. What it can tell from inside the
cluster is `when: ready` on a role whose readiness is a port; `running`, `succeeded` and a
readiness command are not held back here (the protocol warns about them). Past the role's
`dependency_timeout_seconds` it exits with start_gate.DEPENDENCY_FAILED, saying why as its
last line, which Kubernetes keeps as its termination message (see kubernetes_pods).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from backends.base import LaunchRequest, RoleLaunch, StartDependency
from backends.kubernetes_isolation import container_security_context
from backends.start_gate import DEPENDENCY_FAILED, timeout_reason, waiting_reason

if TYPE_CHECKING:
    from backends.kubernetes_manifests import AttemptBuilder

START_ORDER_CONTAINER = "start-order"


def held_here(dep: StartDependency, request: LaunchRequest) -> bool:
    """Whether this backend holds a role back for `dep`: ready on a port readiness."""
    target = next((r for r in request.roles if r.name == dep.role), None)
    return (
        dep.when == "ready"
        and target is not None
        and target.readiness is not None
        and target.readiness.port is not None
    )


def start_order_container(builder: AttemptBuilder, role: RoleLaunch) -> dict[str, Any] | None:
    """The init container of `role`'s pods that waits for its dependencies (None: none held)."""
    request = builder.request
    deps = [d for d in role.depends_on if held_here(d, request)]
    if not deps:
        return None
    q = shlex.quote
    lines = [
        "say() { printf '%s\\n' \"[paigraph start order] $*\"; }",
        "# a TCP connection is accepted: nc -z where nc has it, else busybox's -e (runs `true`",
        "# once connected, so it returns without waiting for the server to close)",
        "answers() {",
        '  nc -z -w 1 "$1" "$2" </dev/null >/dev/null 2>&1 ||',
        '    nc -w 1 "$1" "$2" -e true </dev/null >/dev/null 2>&1',
        "}",
        f"deadline=$(( $(date +%s) + {int(role.dependency_timeout_seconds)} ))",
    ]
    for dep in deps:
        target = request.role(dep.role)
        assert target.readiness is not None and target.readiness.port is not None
        label = target.readiness.port
        lines += [f"say {q(waiting_reason(dep, target.instances))}", "while :; do", "  n=0"]
        for i in range(target.instances):
            port = builder.ports[(dep.role, i)][label][0]
            lines.append(f"  answers {q(builder.address(dep.role, i))} {port} && n=$((n + 1))")
        reason = timeout_reason(dep, target.instances, role.dependency_timeout_seconds)
        lines += [
            f"  [ $n -ge {dep.instances} ] && break",
            '  if [ "$(date +%s)" -ge "$deadline" ]; then',
            f"    say {q(reason)}; exit {DEPENDENCY_FAILED}",
            "  fi",
            f"  sleep {max(1, round(target.readiness.period_seconds))}",
            "done",
        ]
    lines.append("say 'what this role waits for holds'")
    return {
        "name": START_ORDER_CONTAINER,
        "image": builder.settings.init_image,
        "imagePullPolicy": builder.settings.image_pull_policy,
        "command": ["/bin/sh", "-c", "\n".join(lines) + "\n"],
        "resources": {
            "requests": {"cpu": "10m", "memory": "16Mi"},
            "limits": {"cpu": "100m", "memory": "64Mi"},
        },
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": container_security_context(builder.settings),
    }
