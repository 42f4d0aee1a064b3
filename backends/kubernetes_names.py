"""What the Kubernetes backend's objects are called and labelled.

Users write job and role names freely (`ps_server`, `Trainer`, 60 characters...), while
Kubernetes wants DNS labels for names and hostnames and a restricted alphabet for label values.
Every name here is the user's text when it already fits, else a cleaned form with a short hash
of the original, so two different names never meet. The exact text is always kept in an
annotation: labels are for selecting, annotations tell the truth.
"""

from __future__ import annotations

import hashlib
import re

from backends.base import LaunchRequest

DOMAIN = "paigraph.io"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "paigraph"
OWNER = f"{DOMAIN}/owner"  # which paigraph server created it (one namespace, several servers)
JOB = f"{DOMAIN}/job"
ATTEMPT = f"{DOMAIN}/attempt"
ROLE = f"{DOMAIN}/role"
INDEX = f"{DOMAIN}/index"
RUN = f"{DOMAIN}/run"  # 1, then 2, 3 ... each time the instance is started again

JOB_ID_ANNOTATION = f"{DOMAIN}/job-id"
JOB_NAME_ANNOTATION = f"{DOMAIN}/job-name"  # the job's name exactly as the user wrote it
ROLE_ANNOTATION = f"{DOMAIN}/role-name"  # the role's name exactly as the user wrote it
USER_ANNOTATION = f"{DOMAIN}/user"
VC_ANNOTATION = f"{DOMAIN}/virtual-cluster"
PORTS_ANNOTATION = f"{DOMAIN}/ports"  # JSON: label -> ports of the instance
# the instance's own part of its environment (a shell file), read through the downward API
ENV_ANNOTATION = f"{DOMAIN}/env"

MAIN_CONTAINER = "main"
PREPARE_CONTAINER = "prepare"
LAUNCH_KEY = "launch.json"  # the attempt's LaunchRequest (no secrets) in its ConfigMap
COMMON_ENV_KEY = "env-common.sh"
CLAIMS_KEY = "claims.json"  # role -> prerequisite -> the claim it mounts, kept for adoption
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_HASH = 6


def digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:_HASH]


def label_value(text: str) -> str:
    """`text` as a label value (63 characters of [A-Za-z0-9._-], alphanumeric at both ends)."""
    if len(text) <= 63 and _LABEL_VALUE.fullmatch(text):
        return text
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[: 63 - _HASH - 1]
    cleaned = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned)
    return f"{cleaned}-{digest(text)}" if cleaned else digest(text)


def dns_label(text: str, limit: int = 63) -> str:
    """`text` as a DNS label of at most `limit` characters (lower case, digits and '-')."""
    if len(text) <= limit and _DNS_LABEL.fullmatch(text):
        return text
    cleaned = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    cut = cleaned[: limit - _HASH - 1].rstrip("-")
    return f"{cut}-{digest(text)}" if cut else digest(text)


def service_name(job_id: str, attempt: int) -> str:
    """The attempt's headless Service; every other object of the attempt is named after it.

    A DNS-1035 label (it starts with a letter), short enough to leave room for the suffixes.
    """
    return dns_label(f"pai-{job_id}-{attempt}", 48)


def role_hosts(request: LaunchRequest) -> dict[str, str]:
    """Each role's DNS form, so instance i of `role` is the host `<form>-<i>`.

    `ps_server` becomes `ps-server`; only roles whose forms would meet (`a_b` and `a-b`) or
    that need shortening get a hash, so the usual names stay as the user wrote them.
    """
    plain = {
        r.name: re.sub(r"[^a-z0-9]+", "-", r.name.lower()).strip("-")[:40] for r in request.roles
    }
    taken: dict[str, int] = {}
    for form in plain.values():
        taken[form] = taken.get(form, 0) + 1
    hosts = {}
    for name, form in plain.items():
        if not form or taken[form] > 1 or len(name) > 40:
            form = f"{form[:33].rstrip('-')}-{digest(name)}" if form else f"r{digest(name)}"
        hosts[name] = form.strip("-")
    return hosts


def pod_name(service: str, host: str, index: int, run: int = 1) -> str:
    name = f"{service}-{host}-{index}"
    return name if run == 1 else f"{name}-r{run}"


def config_map_name(service: str) -> str:
    return f"{service}-runtime"


def extra_config_map_name(service: str, number: int) -> str:
    """Part `number` (from 1) of a large attempt's shared environment."""
    return f"{service}-runtime-{number}"


def secret_name(service: str) -> str:
    return f"{service}-secrets"


def ssh_secret_name(service: str) -> str:
    return f"{service}-ssh"


def network_policy_name(service: str) -> str:
    return service


def registry_secret_name(service: str, number: int) -> str:
    return f"{service}-registry-{number}"


def entrypoint_key(host: str) -> str:
    return f"entrypoint-{host}.sh"


def owner_selector(owner: str) -> str:
    """The label selector of everything one paigraph server made."""
    return f"{MANAGED_BY}={MANAGER},{OWNER}={label_value(owner)}"
