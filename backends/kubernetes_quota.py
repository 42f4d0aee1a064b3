"""A virtual cluster's capacity as a ResourceQuota on its namespace (`virtual_cluster_quota`).

A quota limits a whole namespace, so it needs `namespace_per_virtual_cluster`; a pod refused for
exceeding it is a permanent creation error, -200 (docs/kubernetes.md).
"""

from __future__ import annotations

from typing import Any

from backends.kubernetes_names import MANAGED_BY, MANAGER, OWNER, VC_ANNOTATION, label_value
from backends.kubernetes_settings import KubernetesSettings, VirtualClusterQuota

QUOTA_NAME = "paigraph-virtual-cluster"


def quota_hard(quota: VirtualClusterQuota, gpu_resource: str) -> dict[str, str]:
    """The quota's hard limits, by the names the quota admission charges pods under."""
    hard: dict[str, str] = {}
    if quota.cpu is not None:
        hard["requests.cpu"] = quota.cpu
    if quota.memory is not None:
        hard["requests.memory"] = quota.memory
    if quota.gpu is not None:
        hard[f"requests.{gpu_resource}"] = quota.gpu
    if quota.pods is not None:
        hard["pods"] = str(quota.pods)
    return hard


def quota_object(settings: KubernetesSettings, virtual_cluster: str) -> dict[str, Any]:
    """The ResourceQuota of the virtual cluster, in its namespace."""
    quota = settings.virtual_cluster_quota[virtual_cluster]
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": QUOTA_NAME,
            "namespace": settings.namespace_for(virtual_cluster),
            "labels": {MANAGED_BY: MANAGER, OWNER: label_value(settings.owner)},
            "annotations": {VC_ANNOTATION: virtual_cluster},
        },
        "spec": {"hard": quota_hard(quota, settings.gpu_resource)},
    }


def hard_patch(current: dict[str, Any], wanted: dict[str, str]) -> dict[str, Any] | None:
    """The merge patch that makes a quota's hard limits `wanted` (a limit no longer configured
    is removed), or None when they are already."""
    hard = (current.get("spec") or {}).get("hard") or {}
    if hard == wanted:
        return None
    changes: dict[str, str | None] = {k: None for k in hard if k not in wanted}
    changes.update(wanted)
    return {"spec": {"hard": changes}}
