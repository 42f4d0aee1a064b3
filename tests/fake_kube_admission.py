"""What a kube-apiserver refuses before storing an object, for the fake API server.

Written from Kubernetes' documented rules:

- Pod Security admission: a namespace labelled `pod-security.kubernetes.io/enforce: <level>`
  refuses a pod that breaks the Pod Security Standards of that level (`baseline`,
  `restricted`) with 403 Forbidden, `pods "<name>" is forbidden: violates PodSecurity
  "<level>:latest": <each check that failed>`; `privileged` (or no label) admits anything.
- Sizes: the API server refuses a request body over 3 MiB (413), a ConfigMap's or Secret's
  data over 1 MiB (422 "Too long"), and etcd an object over 1.5 MiB (413).
- Names: a Service's name is a DNS-1035 label, the other objects' names are DNS-1123
  subdomains; a pod's `hostname` and `subdomain` are DNS-1123 labels; label values are at most
  63 characters of [A-Za-z0-9._-] starting and ending alphanumeric.
- RBAC: a request is allowed when a rule of the Role (in its namespace) or ClusterRole grants
  its verb on its resource; otherwise 403 `<resource> is forbidden: User "<user>" cannot
  <verb> resource "<resource>" in API group "<group>" in the namespace "<namespace>"`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ENFORCE = "pod-security.kubernetes.io/enforce"
REQUEST_LIMIT = 3 * 1024 * 1024
DATA_LIMIT = 1024 * 1024
STORED_LIMIT = 1536 * 1024

_BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
_RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
_SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


# --- Pod Security Standards ----------------------------------------------------------------------


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        *(spec.get("initContainers") or []),
        *(spec.get("containers") or []),
        *(spec.get("ephemeralContainers") or []),
    ]


def _baseline(spec: dict[str, Any]) -> list[str]:
    failed = []
    hosts = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    if hosts:
        failed.append(f"host namespaces ({', '.join(hosts)})")
    pod_context = spec.get("securityContext") or {}
    containers = _containers(spec)
    privileged = [
        c["name"] for c in containers if (c.get("securityContext") or {}).get("privileged")
    ]
    if privileged:
        failed.append(f"privileged (containers {privileged} must not set privileged=true)")
    for c in containers:
        added = set(((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or [])
        extra = sorted(added - _BASELINE_CAPABILITIES)
        if extra:
            failed.append(f"non-default capabilities (container {c['name']!r} adds {extra})")
    host_paths = [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]
    if host_paths:
        failed.append(f"hostPath volumes (volumes {host_paths})")
    for c in containers:
        ports = [p["hostPort"] for p in c.get("ports") or [] if p.get("hostPort")]
        if ports:
            failed.append(f"hostPort (container {c['name']!r} uses hostPorts {ports})")
    for where, context in [("pod", pod_context)] + [
        (f"container {c['name']!r}", c.get("securityContext") or {}) for c in containers
    ]:
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            failed.append(f"seccompProfile ({where} must not set type to Unconfined)")
        if (context.get("appArmorProfile") or {}).get("type") == "Unconfined":
            failed.append(f"appArmorProfile ({where} must not set type to Unconfined)")
        selinux = context.get("seLinuxOptions") or {}
        if selinux.get("user") or selinux.get("role"):
            failed.append(f"seLinuxOptions ({where} must not set user or role)")
        if context.get("procMount") not in (None, "Default"):
            failed.append(f"procMount ({where} must not set procMount)")
    unsafe = [s["name"] for s in pod_context.get("sysctls") or [] if s["name"] not in _SAFE_SYSCTLS]
    if unsafe:
        failed.append(f"forbidden sysctls ({', '.join(unsafe)})")
    return failed


def _restricted(spec: dict[str, Any]) -> list[str]:
    failed = []
    pod_context = spec.get("securityContext") or {}
    containers = _containers(spec)
    kinds = {v["name"]: next((k for k in v if k != "name"), "?") for v in spec.get("volumes") or []}
    bad = sorted(
        f"{name} ({kind})" for name, kind in kinds.items() if kind not in _RESTRICTED_VOLUMES
    )
    if bad:
        failed.append(f"restricted volume types (volumes {bad})")
    escalating = [
        c["name"]
        for c in containers
        if (c.get("securityContext") or {}).get("allowPrivilegeEscalation") is not False
    ]
    if escalating:
        failed.append(
            f"allowPrivilegeEscalation != false (containers {escalating} must set "
            "securityContext.allowPrivilegeEscalation=false)"
        )
    pod_non_root = pod_context.get("runAsNonRoot") is True
    maybe_root = [
        c["name"]
        for c in containers
        if (c.get("securityContext") or {}).get("runAsNonRoot") is False
        or (not pod_non_root and (c.get("securityContext") or {}).get("runAsNonRoot") is not True)
    ]
    if maybe_root:
        failed.append(
            f"runAsNonRoot != true (pod or containers {maybe_root} must set "
            "securityContext.runAsNonRoot=true)"
        )
    rooted = [
        c["name"]
        for c in containers
        if (c.get("securityContext") or {}).get("runAsUser", pod_context.get("runAsUser")) == 0
    ]
    if rooted:
        failed.append(f"runAsUser=0 (containers {rooted} must not run as user 0)")
    allowed = ("RuntimeDefault", "Localhost")
    pod_seccomp = (pod_context.get("seccompProfile") or {}).get("type")
    unconfined = [
        c["name"]
        for c in containers
        if ((c.get("securityContext") or {}).get("seccompProfile") or {}).get("type", pod_seccomp)
        not in allowed
    ]
    if unconfined:
        failed.append(
            f"seccompProfile (pod or containers {unconfined} must set "
            'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
        )
    for c in containers:
        caps = (c.get("securityContext") or {}).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            failed.append(f"unrestricted capabilities (container {c['name']!r} must drop ALL)")
        extra = sorted(set(caps.get("add") or []) - {"NET_BIND_SERVICE"})
        if extra:
            failed.append(
                f"unrestricted capabilities (container {c['name']!r} must not add {extra})"
            )
    return failed


def pod_security_violations(pod: dict[str, Any], level: str) -> list[str]:
    """The checks of `level` the pod fails (none for `privileged`)."""
    spec = pod.get("spec") or {}
    if level == "baseline":
        return _baseline(spec)
    if level == "restricted":
        return _baseline(spec) + _restricted(spec)
    return []


def pod_security_refusal(pod: dict[str, Any], labels: dict[str, str]) -> str | None:
    """The 403 message of the namespace's enforced level, None when the pod is admitted."""
    level = labels.get(ENFORCE, "privileged")
    failed = pod_security_violations(pod, level)
    if not failed:
        return None
    name = pod.get("metadata", {}).get("name", "")
    return f'pods "{name}" is forbidden: violates PodSecurity "{level}:latest": ' + ", ".join(
        failed
    )


# --- sizes and names -----------------------------------------------------------------------------


def size_refusal(resource: str, obj: dict[str, Any]) -> tuple[int, str] | None:
    """(status, message) when the object is too big to be stored."""
    if resource in ("configmaps", "secrets"):
        total = sum(len(k) + len(str(v).encode()) for k, v in (obj.get("data") or {}).items())
        total += sum(
            len(k) + len(str(v).encode()) for k, v in (obj.get("stringData") or {}).items()
        )
        total += sum(
            len(k) + len(str(v)) * 3 // 4 for k, v in (obj.get("binaryData") or {}).items()
        )
        if total > DATA_LIMIT:
            return 422, f"data: Too long: must have at most {DATA_LIMIT} bytes"
    if len(json.dumps(obj, separators=(",", ":")).encode()) > STORED_LIMIT:
        return 413, "etcdserver: request is too large"
    return None


def name_refusal(resource: str, obj: dict[str, Any]) -> str | None:
    """What breaks the naming rules, as the 422 message says it."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    problems = []
    if resource == "services":
        if len(name) > 63 or not _DNS_1035.fullmatch(name):
            problems.append(
                f"metadata.name: Invalid value: {name!r}: a DNS-1035 label must consist of lower "
                "case alphanumeric characters or '-', start with an alphabetic character, end "
                "with an alphanumeric character, and be at most 63 characters"
            )
    elif len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
        problems.append(
            f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain must "
            "consist of lower case alphanumeric characters, '-' or '.', and must start and end "
            "with an alphanumeric character (at most 253 characters)"
        )
    for value in (meta.get("labels") or {}).values():
        if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            problems.append(f"metadata.labels: Invalid value: {value!r}: not a valid label value")
    if resource == "pods":
        spec = obj.get("spec") or {}
        for field in ("hostname", "subdomain"):
            value = spec.get(field)
            if value is not None and (len(value) > 63 or not _DNS_LABEL.fullmatch(value)):
                problems.append(f"spec.{field}: Invalid value: {value!r}: not a DNS-1123 label")
    return "; ".join(problems) or None


# --- RBAC ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grant:
    group: str
    resource: str
    verb: str
    namespace: str | None  # None: a ClusterRole's rule, every namespace


class RoleRules:
    """The rules of the Roles and ClusterRoles in a set of YAML files; `namespace_as` maps the
    Role's namespace to the one the fake serves it in (the tests' namespace)."""

    def __init__(self, files: list[Path], namespace_as: dict[str, str] | None = None) -> None:
        self.grants: set[Grant] = set()
        rename = namespace_as or {}
        for file in files:
            for doc in yaml.safe_load_all(file.read_text()):
                if not doc or doc.get("kind") not in ("Role", "ClusterRole"):
                    continue
                ns = doc["metadata"].get("namespace") if doc["kind"] == "Role" else None
                ns = rename.get(ns, ns) if ns is not None else None
                for rule in doc.get("rules") or []:
                    for group in rule.get("apiGroups") or [""]:
                        for resource in rule.get("resources") or []:
                            for verb in rule.get("verbs") or []:
                                self.grants.add(Grant(group, resource, verb, ns))

    def allows(self, verb: str, group: str, resource: str, namespace: str) -> bool:
        for grant in self.grants:
            if grant.namespace not in (None, namespace):
                continue
            if grant.group not in ("*", group) or grant.resource not in ("*", resource):
                continue
            if grant.verb in ("*", verb):
                return True
        return False

    @staticmethod
    def refusal(user: str, verb: str, group: str, resource: str, namespace: str) -> str:
        return (
            f'{resource} is forbidden: User "{user}" cannot {verb} resource "{resource}" in '
            f'API group "{group}" in the namespace "{namespace}"'
        )
