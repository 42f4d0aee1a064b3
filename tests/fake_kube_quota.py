"""ResourceQuota admission for the fake API server (tests/fake_kube_api.py), as Kubernetes
documents it ("Resource Quotas"; the quota admission plugin and the pod evaluator):

- a pod is charged `pods` 1, `cpu` and `requests.cpu` its cpu request, `memory` and
  `requests.memory` its memory request, and `requests.<extended resource>` (e.g.
  `requests.nvidia.com/gpu`) its request of that resource; its request is the larger of its
  containers' sum and each init container's;
- what a namespace uses is the sum over its pods that still count: not Succeeded or Failed, and
  not past the end of a graceful deletion;
- a pod is refused with 403 when, with it, any resource a quota of its namespace limits would
  exceed the quota's hard limit: `pods "<name>" is forbidden: exceeded quota: <quota>,
  requested: <resource>=<amount>, used: ..., limited: ...`, each list naming only the exceeded
  resources, sorted; a pod with a container (or init container) that does not request a
  resource the quota limits (cpu, memory) is refused too: `failed quota: <quota>: must
  specify <resource>`;
- a quota's `status` carries `hard` (its spec's) and `used` (what the namespace uses now), as the
  quota controller keeps them.

Everything here is a pure function of the fake's objects, called with its lock held.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from tests.fake_kube_nodes import TERMINAL, pod_requests

_STANDARD = ("cpu", "memory", "ephemeral-storage")
_BYTES = ("memory", "ephemeral-storage", "requests.memory", "requests.ephemeral-storage")


def pod_usage(pod: dict[str, Any]) -> dict[str, Decimal]:
    """What the pod is charged, by quota resource name."""
    usage: dict[str, Decimal] = {"pods": Decimal(1), "count/pods": Decimal(1)}
    for name, amount in pod_requests(pod).items():
        if name == "pods":
            continue
        if name in _STANDARD:
            usage[name] = Decimal(amount)
        usage[f"requests.{name}"] = Decimal(amount)
    return usage


def counts(pod: dict[str, Any], now: datetime | None = None) -> bool:
    """Whether the pod is charged to its namespace's quota: not terminal, and not past the end
    of its graceful deletion."""
    if (pod.get("status") or {}).get("phase") in TERMINAL:
        return False
    meta = pod.get("metadata") or {}
    deleting = meta.get("deletionTimestamp")
    if deleting:
        at = datetime.strptime(deleting, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        if (now or datetime.now(UTC)) > at:
            return False
    return True


def used(pods: list[dict[str, Any]], hard: dict[str, Any]) -> dict[str, Decimal]:
    """What the pods that count use of each resource the quota limits."""
    total = {name: Decimal(0) for name in hard}
    for pod in pods:
        if not counts(pod):
            continue
        for name, amount in pod_usage(pod).items():
            if name in total:
                total[name] += amount
    return total


def quota_status(quota: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
    """The quota's status as the quota controller keeps it."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    return {
        "hard": dict(hard),
        "used": {name: _shown(name, amount) for name, amount in used(pods, hard).items()},
    }


def quota_refusal(
    pod: dict[str, Any], quotas: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> str | None:
    """The 403 message when a quota of the pod's namespace refuses it, else None. `pods` are
    the namespace's pods (before this one)."""
    name = (pod.get("metadata") or {}).get("name", "")
    wanted = pod_usage(pod)
    for quota in sorted(quotas, key=lambda q: q["metadata"]["name"]):
        quota_name = quota["metadata"]["name"]
        hard = {
            k: parse_quantity(v) for k, v in ((quota.get("spec") or {}).get("hard") or {}).items()
        }
        missing = _unspecified(pod, set(hard))
        if missing:
            return (
                f'pods "{name}" is forbidden: failed quota: {quota_name}: must specify '
                + ",".join(missing)
            )
        now = used(pods, hard)
        exceeded = sorted(k for k in hard if k in wanted and now[k] + wanted[k] > hard[k])
        if exceeded:
            requested, using, limited = (
                ",".join(f"{k}={_shown(k, amounts[k])}" for k in exceeded)
                for amounts in (wanted, now, hard)
            )
            return (
                f'pods "{name}" is forbidden: exceeded quota: {quota_name}, '
                f"requested: {requested}, used: {using}, limited: {limited}"
            )
    return None


def _unspecified(pod: dict[str, Any], limited: set[str]) -> list[str]:
    """The limited cpu and memory names some container (init containers too) of the pod does
    not request: the quota admission requires each container to say them."""
    required = limited & {"cpu", "memory", "requests.cpu", "requests.memory"}
    spec = pod.get("spec") or {}
    missing: set[str] = set()
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        asked = set((container.get("resources") or {}).get("requests") or {})
        said = {name for base in asked & {"cpu", "memory"} for name in (base, f"requests.{base}")}
        missing |= required - said
    return sorted(missing)


def _shown(resource: str, amount: Decimal) -> str:
    """A quantity as the API server prints it: bytes in binary units, cpu in milli when it is
    not whole, counts plain."""
    amount = Decimal(amount)
    if resource in _BYTES:
        for unit, size in (("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
            if amount and amount % size == 0:
                return f"{int(amount / size)}{unit}"
        return str(int(amount))
    if amount == amount.to_integral_value():
        return str(int(amount))
    return f"{int(amount * 1000)}m"
