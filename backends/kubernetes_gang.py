"""An attempt's pods run all together or not at all: the gang, on Kubernetes.

Pods bound one by one let two jobs each hold half the GPUs while waiting for the other half
forever, so pods are gated (or grouped for Volcano, coscheduling or Kueue, per `gang_scheduler`)
and a barrier init container holds the commands until every peer exists (docs/kubernetes.md,
Gangs).
"""

from __future__ import annotations

import shlex
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from kubernetes.utils import parse_quantity

from backends.kubernetes_isolation import container_security_context

if TYPE_CHECKING:
    from backends.kubernetes_manifests import AttemptBuilder

GATE = "paigraph.io/gang"
BARRIER_CONTAINER = "barrier"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
POD_GROUP_API = {
    "volcano": ("scheduling.volcano.sh", "v1beta1"),
    "coscheduling": ("scheduling.x-k8s.io", "v1alpha1"),
}
_TERMINAL = ("Succeeded", "Failed")
_BARRIER_SLEEP = 2  # seconds between two looks at a peer's name


# --- the objects ---------------------------------------------------------------------------------


def decorate(pod: dict[str, Any], builder: AttemptBuilder) -> dict[str, Any]:
    """The pod with what its gang needs: the gate, the PodGroup reference or Kueue's labels,
    and the barrier before user commands."""
    settings = builder.settings
    meta, spec = pod["metadata"], pod["spec"]
    mode = settings.gang_scheduler
    group = builder.service
    if mode == "gates":
        spec["schedulingGates"] = [{"name": GATE}]
    elif mode == "volcano":
        meta.setdefault("annotations", {})[VOLCANO_GROUP_ANNOTATION] = group
        spec.setdefault("schedulerName", "volcano")
    elif mode == "coscheduling":
        meta.setdefault("labels", {})[COSCHEDULING_GROUP_LABEL] = group
    elif mode == "kueue":
        meta.setdefault("labels", {}).update(
            {KUEUE_GROUP_LABEL: group, KUEUE_QUEUE_LABEL: queue_of(builder)}
        )
        meta.setdefault("annotations", {})[KUEUE_COUNT_ANNOTATION] = str(
            builder.request.total_instances
        )
    barrier = barrier_container(builder)
    if barrier is not None:
        spec["initContainers"] = [*(spec.get("initContainers") or []), barrier]
    return pod


def queue_of(builder: AttemptBuilder) -> str:
    """The attempt's Volcano queue or Kueue LocalQueue (`gang_queue`, templates filled in)."""
    from backends.kubernetes_names import label_value

    return label_value(builder.render(builder.settings.gang_queue) or "default")


def pod_group(builder: AttemptBuilder) -> dict[str, Any] | None:
    """The attempt's PodGroup for Volcano or coscheduling (None for the other modes): all of
    its pods or none, `minResources` the sum of their requests."""
    api = POD_GROUP_API.get(builder.settings.gang_scheduler)
    if api is None:
        return None
    total: Counter[str] = Counter()
    for role in builder.request.roles:
        for index in range(role.instances):
            total.update(pod_requests(builder.pod(role.name, index, gang=False)))
    del total["pods"]
    spec: dict[str, Any] = {
        "minMember": builder.request.total_instances,
        "minResources": {k: _quantity(v) for k, v in sorted(total.items())},
    }
    if builder.settings.gang_scheduler == "volcano":
        spec["queue"] = queue_of(builder)
    else:
        spec["scheduleTimeoutSeconds"] = int(builder.settings.gang_bind_seconds)
    return {
        "apiVersion": "/".join(api),
        "kind": "PodGroup",
        "metadata": {
            "name": builder.service,
            "namespace": builder.namespace,
            "labels": builder.attempt_labels(),
            "ownerReferences": builder.owned(),
        },
        "spec": spec,
    }


def barrier_container(builder: AttemptBuilder) -> dict[str, Any] | None:
    """The init container that waits for every peer's name to resolve (None for one pod).
    The script grows with the roles, not the instances: one loop per role."""
    roles = builder.request.roles
    if builder.request.total_instances < 2:
        return None
    lines = [
        "say() { printf '%s\\n' \"[paigraph barrier] $*\"; }",
        "wait_for() {",
        '  until getent hosts "$1" >/dev/null 2>&1 || nslookup "$1" >/dev/null 2>&1; do',
        f"    sleep {_BARRIER_SLEEP}",
        "  done",
        "}",
    ]
    for role in roles:
        prefix = builder.host(role.name, 0)[:-1]
        service = builder.service
        if all(builder.host(role.name, i) == f"{prefix}{i}" for i in range(role.instances)):
            lines += [
                f"i=0; while [ $i -lt {role.instances} ]; do",
                f"  wait_for {shlex.quote(prefix)}$i.{service}; i=$((i + 1))",
                "done",
            ]
        else:
            lines += [f"wait_for {builder.address(role.name, i)}" for i in range(role.instances)]
    lines.append(f"say every peer of {builder.request.total_instances} resolves")
    return {
        "name": BARRIER_CONTAINER,
        "image": builder.settings.init_image,
        "imagePullPolicy": builder.settings.image_pull_policy,
        "command": ["/bin/sh", "-c", "\n".join(lines) + "\n"],
        "resources": {
            "requests": {"cpu": "10m", "memory": "16Mi"},
            "limits": {"cpu": "100m", "memory": "64Mi"},
        },
        "terminationMessagePolicy": "FallbackToLogsOnError",
        # hardened like every container of the pod, so the namespace's admission takes it
        "securityContext": container_security_context(builder.settings),
    }


# --- the cluster as the scheduler sees it --------------------------------------------------------


def pod_requests(pod: dict[str, Any]) -> Counter[str]:
    """A pod's effective requests (the larger of its containers' sum and each init container),
    plus one `pods` slot, as kube-scheduler counts them."""
    spec = pod.get("spec") or {}
    total: Counter[str] = Counter()
    for container in spec.get("containers") or []:
        for name, amount in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] += parse_quantity(amount)
    for init in spec.get("initContainers") or []:
        for name, amount in ((init.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total[name], parse_quantity(amount))
    for name, amount in (spec.get("overhead") or {}).items():
        total[name] += parse_quantity(amount)
    total["pods"] += 1
    return total


def host_ports(pod: dict[str, Any]) -> set[tuple[int, str]]:
    spec = pod.get("spec") or {}
    return {
        (port["hostPort"], port.get("protocol", "TCP"))
        for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
        for port in container.get("ports") or []
        if port.get("hostPort")
    }


@dataclass
class _Node:
    name: str
    free: Counter[str]
    ports: set[tuple[int, str]] = field(default_factory=set)


def _is_schedulable(node: dict[str, Any]) -> bool:
    """Whether new pods may land on the node: Ready, not cordoned, no NoSchedule/NoExecute
    taint."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    is_ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    tainted = any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or [])
    return is_ready and not tainted and not spec.get("unschedulable")


def _matches_selector(node: dict[str, Any], wanted: dict[str, str]) -> bool:
    """Whether the node carries every label of the node selector."""
    labels = node["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in wanted.items())


def _usable_node(node: dict[str, Any], wanted: dict[str, str]) -> _Node | None:
    """The node with all its allocatable room free, or None when our pods cannot go there."""
    if not _is_schedulable(node) or not _matches_selector(node, wanted):
        return None
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    free: Counter[str] = Counter({k: parse_quantity(v) for k, v in allocatable.items()})
    return _Node(node["metadata"]["name"], free)


def _charge_pod(usable: dict[str, _Node], pod: dict[str, Any]) -> None:
    """Take what a pod still running on a usable node holds (requests, host ports) from it."""
    node_name = (pod.get("spec") or {}).get("nodeName")
    phase = (pod.get("status") or {}).get("phase")
    if node_name not in usable or phase in _TERMINAL:
        return
    target = usable[node_name]
    target.free.subtract(pod_requests(pod))
    target.ports |= host_ports(pod)


@dataclass
class ClusterView:
    """The free room of every node a pod of this server could be bound to."""

    nodes: list[_Node]

    @classmethod
    def of(
        cls,
        nodes: list[dict[str, Any]],
        pods: list[dict[str, Any]],
        node_selector: dict[str, str] | None = None,
    ) -> ClusterView:
        """From Node and Pod objects (every namespace's pods: all of them use the nodes).
        Nodes that are not Ready, cordoned, tainted NoSchedule/NoExecute or not matching the
        node selector are left out."""
        wanted = node_selector or {}
        usable = {n.name: n for n in (_usable_node(node, wanted) for node in nodes) if n}
        for pod in pods:
            _charge_pod(usable, pod)
        return cls(sorted(usable.values(), key=lambda n: n.name))

    def fits(self, pods: list[dict[str, Any]]) -> tuple[bool, str]:
        """Whether every pod can be placed at once (largest first, each on the node with the
        least room left that still takes it); if not, what is missing, for the user."""
        nodes = [_Node(n.name, Counter(n.free), set(n.ports)) for n in self.nodes]
        demands = sorted(
            ((pod_requests(p), host_ports(p)) for p in pods),
            key=lambda d: tuple(-d[0][k] for k in sorted(d[0])),
        )
        for wanted, ports in demands:
            candidates = [
                n
                for n in nodes
                if all(n.free[k] >= v for k, v in wanted.items() if v > 0) and not (ports & n.ports)
            ]
            if not candidates:
                asked = ", ".join(f"{k} {_shown(k, v)}" for k, v in sorted(wanted.items()))
                most = {
                    k: max((n.free[k] for n in nodes), default=Decimal(0)) for k in sorted(wanted)
                }
                room = ", ".join(f"{k} {_shown(k, v)}" for k, v in most.items())
                return False, (
                    f"{len(pods)} pod(s) must be placed together and one of them ({asked}) "
                    f"fits on no node once the others are placed (the most any node has "
                    f"left: {room}; {len(self.nodes)} usable node(s))"
                )
            best = min(candidates, key=lambda n: tuple(n.free[k] - v for k, v in wanted.items()))
            best.free.subtract(wanted)
            best.ports |= ports
        return True, ""


def _quantity(value: Decimal | int) -> str:
    """A quantity as Kubernetes writes it (integers plain, fractions of a cpu in milli)."""
    value = Decimal(value)
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int(value * 1000)}m"


_MI = 1024**2
_GI = 1024**3
_BYTES = ("memory", "ephemeral-storage", "hugepages-")


def _shown(resource: str, value: Decimal | int) -> str:
    """An amount for people: bytes (memory, ephemeral storage, huge pages) in Gi or Mi as the
    pods ask for them, anything else as Kubernetes writes it."""
    if not resource.startswith(_BYTES):
        return _quantity(value)
    amount = Decimal(value)
    sign, amount = ("-", -amount) if amount < 0 else ("", amount)
    if amount >= _GI:
        whole = amount % _GI == 0
        return f"{sign}{amount / _GI:.0f}Gi" if whole else f"{sign}{amount / _GI:.1f}Gi"
    if amount >= _MI or amount == 0:
        whole = amount % _MI == 0
        return f"{sign}{amount / _MI:.0f}Mi" if whole else f"{sign}{amount / _MI:.1f}Mi"
    return f"{sign}{amount / 1024:.0f}Ki"
