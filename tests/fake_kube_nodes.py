"""Nodes, a scheduler and kubelet-like endings for the fake API server (tests/fake_kube_api.py).

Everything here is a pure function of the fake's objects (JSON as the API returns it), called
with the fake's lock held. Each behaviour follows what Kubernetes documents:

- a pod is bound only to a Ready, schedulable node without NoSchedule/NoExecute taints whose
  allocatable cpu, memory, extended resources and pod count cover the requests of the
  non-terminal pods bound to it plus this pod's (kube-scheduler's NodeResourcesFit filter);
- a pod whose `spec.schedulingGates` is not empty is never considered (Pod Scheduling
  Readiness, stable in 1.30) and carries `PodScheduled=False` with reason `SchedulingGated`;
- a `hostPort` already taken (same port, protocol and host IP) on a node excludes that node
  (the NodePorts filter);
- a pod that fits nowhere carries `PodScheduled=False`, reason `Unschedulable`, with a message
  in the scheduler's words ("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.");
- a pod's effective request is the larger of its containers' sum and each init container's
  (the resource model of init containers).
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

TERMINAL = ("Succeeded", "Failed")


def node_object(
    name: str,
    *,
    cpu: int,
    memory_mi: int,
    gpus: int = 0,
    gpu_resource: str = "nvidia.com/gpu",
    pods: int = 110,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A v1 Node as a kubelet registers it: capacity equal to allocatable, Ready."""
    allocatable = {"cpu": str(cpu), "memory": f"{memory_mi}Mi", "pods": str(pods)}
    if gpus:
        allocatable[gpu_resource] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
        },
        "spec": {},
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": f"192.168.0.{len(name) % 200 + 10}"}],
        },
    }


def pod_requests(pod: dict[str, Any]) -> Counter[str]:
    """The pod's effective requests: max(sum of containers, each init container)."""
    spec = pod.get("spec") or {}
    total: Counter[str] = Counter()
    for container in spec.get("containers") or []:
        for name, amount in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] += parse_quantity(amount)
    for init in spec.get("initContainers") or []:
        for name, amount in ((init.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total[name], parse_quantity(amount))
    total["pods"] += 1
    return total


def host_ports(pod: dict[str, Any]) -> set[tuple[int, str, str]]:
    """(port, protocol, host IP) of every hostPort the pod asks for."""
    spec = pod.get("spec") or {}
    found = set()
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                found.add((port["hostPort"], port.get("protocol", "TCP"), port.get("hostIP", "")))
    return found


def ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _blocked(node: dict[str, Any]) -> str | None:
    """Why no pod can be bound to the node, in the scheduler's words, or None."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return "node(s) were unschedulable"
    if not ready(node):
        return "node(s) had untolerated taint {node.kubernetes.io/unreachable: }"
    for taint in spec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute"):
            return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
    return None


def bound_pods(pods: list[dict[str, Any]], node: str) -> list[dict[str, Any]]:
    """The pods bound to `node` that still hold its resources (not Succeeded or Failed)."""
    return [
        p
        for p in pods
        if (p.get("spec") or {}).get("nodeName") == node
        and (p.get("status") or {}).get("phase") not in TERMINAL
    ]


def choose_node(
    pod: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> tuple[str | None, str]:
    """The first node (by name) the pod fits on, or None and the scheduler's message."""
    wanted = pod_requests(pod)
    ports = host_ports(pod)
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    reasons: Counter[str] = Counter()
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        blocked = _blocked(node)
        if blocked:
            reasons[blocked] += 1
            continue
        labels = node["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in selector.items()):
            reasons["node(s) didn't match Pod's node affinity/selector"] += 1
            continue
        on_node = bound_pods(pods, name)
        used: Counter[str] = Counter()
        taken: set[tuple[int, str, str]] = set()
        for other in on_node:
            used.update(pod_requests(other))
            taken |= host_ports(other)
        allocatable = {
            k: parse_quantity(v) for k, v in (node["status"].get("allocatable") or {}).items()
        }
        short = [
            resource
            for resource, amount in wanted.items()
            if amount > 0 and allocatable.get(resource, Decimal(0)) - used[resource] < amount
        ]
        if short:
            for resource in short:
                reasons["Too many pods" if resource == "pods" else f"Insufficient {resource}"] += 1
            continue
        if any((p, proto) in {(t[0], t[1]) for t in taken} for p, proto, _ in ports):
            reasons["node(s) didn't have free ports for the requested pod ports"] += 1
            continue
        return name, ""
    detail = ", ".join(f"{count} {why}" for why, count in sorted(reasons.items()))
    return None, f"0/{len(nodes)} nodes are available: {detail}."
