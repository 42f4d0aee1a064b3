"""What keeps one user's job on Kubernetes away from other users and from the server.

Storages mount only the job's user's own claims, pods are hardened (seccomp, no privilege
escalation, the kept capabilities, non-root under "restricted"), and a NetworkPolicy admits only
the attempt's own pods (docs/kubernetes.md, Isolation and hardened pods).
"""

from __future__ import annotations

import re
from typing import Any

from backends.kubernetes_names import digest
from backends.kubernetes_settings import KubernetesSettings
from simulator.capabilities import KEPT_CAPABILITIES, RESTRICTED_CAPABILITIES
from simulator.prereqs import UnservableMaterial

CLAIM_PREFIX = "pg-u-"
_PLAIN_USER = re.compile(r"[a-z0-9]{1,24}")
_CLAIM_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_CLAIM_LIMIT = 253  # a PersistentVolumeClaim's name is a DNS-1123 subdomain
_NAME_PART = 63


def user_part(user: str) -> str:
    """The user's segment of a claim name: never holds '-', so the first '-' after the prefix
    ends it and no user's claim can be named by another. A user name of lower-case letters and
    digits is kept as it is; any other is cleaned and followed by a hash of the exact name."""
    if _PLAIN_USER.fullmatch(user):
        return user
    cleaned = re.sub(r"[^a-z0-9]+", "", user.lower())[:16]
    return f"{cleaned}{digest(user)}h"


def user_claim(user: str, storage: str) -> str:
    """The claim holding `user`'s storage called `storage`."""
    name = storage.lower()
    if len(name) > _NAME_PART or not _CLAIM_NAME.fullmatch(name) or name != storage:
        cleaned = re.sub(r"[^a-z0-9]+", "-", storage.lower()).strip("-")[: _NAME_PART - 8]
        name = f"{cleaned.rstrip('-')}-{digest(storage)}" if cleaned else digest(storage)
    return f"{CLAIM_PREFIX}{user_part(user)}-{name}"


def claim_of(user: str, prerequisite: str, uris: list[str]) -> str:
    """The claim a storage / output prerequisite mounts: the user's claim of the prerequisite's
    name, or the user's own claim named in full as its URI. UnservableMaterial otherwise."""
    if len(uris) > 1:
        raise UnservableMaterial(
            f"prerequisite {prerequisite!r}: a storage takes at most one URI (got {len(uris)})"
        )
    if not uris:
        return user_claim(user, prerequisite)
    claim = uris[0]
    if "://" in claim or claim.startswith("/"):
        raise UnservableMaterial(
            f"prerequisite {prerequisite!r}: {_shown(claim)} cannot be mounted on Kubernetes; "
            f"leave out the URI to mount your storage {prerequisite!r} "
            f"(claim {user_claim(user, prerequisite)})"
        )
    mine = f"{CLAIM_PREFIX}{user_part(user)}-"
    if claim.startswith(mine) and _CLAIM_NAME.fullmatch(claim) and len(claim) <= _CLAIM_LIMIT:
        return claim
    whose = "another user's claim" if claim.startswith(CLAIM_PREFIX) else "not a claim of yours"
    raise UnservableMaterial(
        f"prerequisite {prerequisite!r}: the PersistentVolumeClaim {claim!r} is {whose}; a job "
        f"mounts only its user's claims ({mine}<storage name>: leave out the URI to mount "
        f"{user_claim(user, prerequisite)}) and the storages an admin defined for it"
    )


def legacy_claim(prerequisite: str, uris: list[str]) -> str:
    """The claim an attempt made before claims were per user mounted (its URI, else its name):
    an attempt adopted after an upgrade keeps the claims it was started with."""
    return uris[0] if uris else prerequisite


def _shown(uri: str) -> str:
    return re.sub(r"(://)[^/@\s]+@", r"\1***@", uri)


# --- hardened pods -------------------------------------------------------------------------------


def pod_security_context(settings: KubernetesSettings) -> dict[str, Any]:
    """The pod's securityContext for the profile the settings ask for."""
    context: dict[str, Any] = {
        "seccompProfile": {"type": "RuntimeDefault"},
        "fsGroup": settings.fs_group,
        "fsGroupChangePolicy": "OnRootMismatch",
    }
    if settings.run_as_user is not None:
        context["runAsUser"] = settings.run_as_user
    if settings.run_as_group is not None:
        context["runAsGroup"] = settings.run_as_group
    if settings.pod_security == "restricted":
        context["runAsNonRoot"] = True
    return context


def container_security_context(settings: KubernetesSettings) -> dict[str, Any]:
    """Every container's securityContext: no privilege escalation, ALL capabilities dropped
    and the kept ones added back (only NET_BIND_SERVICE under the restricted profile)."""
    kept = RESTRICTED_CAPABILITIES if settings.pod_security == "restricted" else KEPT_CAPABILITIES
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"], "add": list(kept)},
    }


SECRET_MODE = 0o440  # owner and the pod's fsGroup read it; nobody writes it


# --- the network ---------------------------------------------------------------------------------


def network_policy(
    metadata: dict[str, Any], selector: dict[str, str], settings: KubernetesSettings
) -> dict[str, Any]:
    """A NetworkPolicy selecting the attempt's pods and letting in traffic from them only, and
    from `network_allow_from`. Egress is left open: data and scripts are downloaded from
    wherever the job says, and the cluster's DNS must answer the peers' names."""
    peers: list[dict[str, Any]] = [{"podSelector": {"matchLabels": dict(selector)}}]
    peers += [dict(p) for p in settings.network_allow_from]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata,
        "spec": {
            "podSelector": {"matchLabels": dict(selector)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": peers}],
        },
    }


def pod_security_refusal(status: int | None, message: str) -> bool:
    """Whether an API answer is the PodSecurity admission refusing a pod (403 Forbidden,
    `violates PodSecurity "<level>:<version>"`): the same pod would be refused again."""
    return status == 403 and "violates PodSecurity" in message
