"""What every object of a Kubernetes attempt is built from: its names, labels and ports, the
environment its instances share and their own parts, its claims and secrets' values, and the
checks that refuse a launch the cluster could never run.

`AttemptBuilder` (kubernetes_manifests) builds the objects on top of this, and the pods
through `PodSpec` (kubernetes_pod_spec).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from backends.base import (
    WORK_DIR,
    Fetch,
    ImageAuth,
    LaunchRefused,
    LaunchRequest,
    Material,
    Placement,
    RoleLaunch,
)
from backends.entrypoint import RUNTIME_DIR
from backends.kubernetes_init_script import download_entries, repositories, shown_uri
from backends.kubernetes_isolation import claim_of, legacy_claim
from backends.kubernetes_names import (
    ATTEMPT,
    JOB,
    JOB_ID_ANNOTATION,
    JOB_NAME_ANNOTATION,
    MANAGED_BY,
    MANAGER,
    OWNER,
    USER_ANNOTATION,
    VC_ANNOTATION,
    label_value,
    pod_name,
    registry_secret_name,
    role_hosts,
    service_name,
)
from backends.kubernetes_ports import instance_ports
from backends.kubernetes_settings import KubernetesSettings
from backends.runtime_env import instance_variables, runtime_env, shell_env_file
from backends.secrets_env import SECRET_KEY, SECRET_REF, with_secret_references
from backends.ssh_access import ssh_files
from simulator.dfs import DfsError, is_dfs_uri, parse
from simulator.prereqs import UnservableMaterial, check_name

PLACEHOLDER_UID = "<uid of the Service, set by the cluster when it is created>"
SECRETS_DIR = f"{RUNTIME_DIR}/secrets"
POD_IP_VARIABLES = ("PAI_CONTAINER_HOST_IP", "PAI_CURRENT_CONTAINER_IP")
ENV_PART_BYTES = 768 * 1024  # of the shared environment per ConfigMap (the API allows 1 MiB)
DOCKER_HUB = "https://index.docker.io/v1/"

_PVC_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_TEMPLATE = re.compile(r"\{(group|count|queue|job|user)\}")


@dataclass
class AttemptBase:
    """What the objects of an attempt are built from; LaunchRefused on construction when it
    can never run."""

    request: LaunchRequest
    settings: KubernetesSettings
    namespace: str
    # role -> prerequisite -> claim, of an attempt made earlier (read back from its ConfigMap):
    # the claims it keeps; a prerequisite it has no record of mounts what it did before
    # claims were per user (its URI, else its name)
    claims: dict[str, dict[str, str]] | None = None
    # an attempt made before claims were recorded: one ConfigMap holds its whole shared
    # environment, so its instances run again from that one, however large
    legacy: bool = False
    _registry: dict[tuple[str, str, str], str] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        queues = self.settings.queue_of_virtual_cluster
        if queues and self.request.virtual_cluster not in queues:
            raise LaunchRefused(
                f"virtual cluster {self.request.virtual_cluster!r} has no queue on this cluster "
                f"(queues are configured for {', '.join(sorted(queues))})"
            )
        for role in self.request.roles:
            self._check_role(role)
        for role in self.request.roles:
            if role.image_auth is not None:
                self._registry_secret_of(role)

    # --- names ---------------------------------------------------------------------------------

    @cached_property
    def service(self) -> str:
        return service_name(self.request.job_id, self.request.attempt)

    @cached_property
    def hosts(self) -> dict[str, str]:
        return role_hosts(self.request)

    def host(self, role: str, index: int) -> str:
        """The instance's hostname, `<role>-<index>`."""
        return f"{self.hosts[role]}-{index}"

    def address(self, role: str, index: int) -> str:
        """How peers reach the instance: its stable DNS name under the attempt's Service."""
        return f"{self.host(role, index)}.{self.service}"

    def pod_name(self, role: str, index: int, run: int = 1) -> str:
        return pod_name(self.service, self.hosts[role], index, run)

    @cached_property
    def ports(self) -> dict[tuple[str, int], dict[str, list[int]]]:
        return {
            (role.name, i): instance_ports(
                role,
                i,
                self.pod_name(role.name, i),
                self.settings.port_range,
                host_network=self.settings.host_network,
            )
            for role in self.request.roles
            for i in range(role.instances)
        }

    def placement(self, role: str, index: int) -> Placement:
        """What the environment says about the instance: its DNS name and its ports."""
        return Placement(
            node="", host_ip=self.address(role, index), ports=self.ports[(role, index)]
        )

    def _meta(self, name: str, labels: dict[str, str], **extra: Any) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "namespace": self.namespace, "labels": labels}
        meta.update(extra)
        return meta

    def attempt_labels(self) -> dict[str, str]:
        return {
            MANAGED_BY: MANAGER,
            OWNER: label_value(self.settings.owner),
            JOB: label_value(self.request.job_id),
            ATTEMPT: str(self.request.attempt),
        }

    def attempt_annotations(self) -> dict[str, str]:
        return {
            JOB_ID_ANNOTATION: self.request.job_id,
            JOB_NAME_ANNOTATION: self.request.job_name,
            USER_ANNOTATION: self.request.user,
            VC_ANNOTATION: self.request.virtual_cluster,
        }

    def owned(self, service_uid: str = PLACEHOLDER_UID) -> list[dict[str, Any]]:
        return [{"apiVersion": "v1", "kind": "Service", "name": self.service, "uid": service_uid}]

    # --- the environment, built in time linear in the number of instances ---------------------

    @cached_property
    def placements(self) -> dict[tuple[str, int], Placement]:
        return {
            (r.name, i): self.placement(r.name, i)
            for r in self.request.roles
            for i in range(r.instances)
        }

    @cached_property
    def _role_envs(self) -> dict[str, dict[str, str]]:
        """Each role's instance 0's environment (every peer in it: built once per role)."""
        return {
            r.name: _without_pod_ip(runtime_env(self.request, self.placements, r.name, 0))
            for r in self.request.roles
        }

    def _own(self, role: RoleLaunch, index: int) -> dict[str, str]:
        """What instance `index` has of its own (index, ports), the job's and role's env
        still over it."""
        own = instance_variables(role, index, self.placements[(role.name, index)])
        overrides = {**self.request.env, **role.env}
        return _without_pod_ip({k: overrides.get(k, v) for k, v in own.items()})

    @cached_property
    def _common(self) -> dict[str, str]:
        """The variables every instance has with the same value."""
        first, *others = [self._role_envs[r.name] for r in self.request.roles]
        volatile = {k for r in self.request.roles for k in self._own(r, 0)}
        return {
            k: v
            for k, v in first.items()
            if k not in volatile and all(o.get(k, None) == v for o in others)
        }

    @cached_property
    def _common_parts(self) -> list[str]:
        """The shared environment as shell files of at most ENV_PART_BYTES each."""
        text = shell_env_file(self._common)
        return [text] if self.legacy else _split_env_file(text, ENV_PART_BYTES)

    @cached_property
    def _role_level(self) -> dict[str, dict[str, str]]:
        """Per role, the variables its instances share that others do not (its compat names,
        its own env)."""
        common = self._common
        return {
            name: {k: v for k, v in env.items() if k not in common}
            for name, env in self._role_envs.items()
        }

    def instance_part(self, role: RoleLaunch, index: int) -> dict[str, str]:
        """The instance's variables beyond the shared ones: its role's, then its own."""
        return {**self._role_level[role.name], **self._own(role, index)}

    def instance_env(self, role: str, index: int) -> dict[str, str]:
        """The instance's whole PAI_* environment, peers by DNS name; the pod IP ones left out
        (the downward API gives them)."""
        found = self.request.role(role)
        return {**self._role_envs[role], **self._own(found, index)}

    @cached_property
    def ssh_values(self) -> dict[str, str]:
        if self.request.ssh is None or not self.request.roles:
            return {}
        first = self.request.roles[0]
        return ssh_files(self.request, self.instance_env(first.name, 0))

    def all_claims(self) -> dict[str, dict[str, str]]:
        return {
            role.name: {
                m.name: self._mount_place(role, m)[0]
                for m in role.materials
                if m.kind is Fetch.MOUNT
            }
            for role in self.request.roles
        }

    def _claim(self, role: RoleLaunch, material: Material) -> str:
        """The claim a storage prerequisite mounts (UnservableMaterial when it may not)."""
        if self.claims is not None:
            kept = self.claims.get(role.name, {}).get(material.name)
            return kept if kept is not None else legacy_claim(material.name, material.uris)
        return claim_of(self.request.user, material.name, material.uris)

    @cached_property
    def secret_values(self) -> dict[str, str]:
        return {k: v for k, v in self.request.secrets.items() if SECRET_KEY.fullmatch(k)}

    # --- HDFS locations the operator mapped to claims (the setting hdfs_claims) --------------

    def _hdfs_place(self, material: Material, uri: str) -> tuple[str, str]:
        """(claim, subPath) of an hdfs:// URI on a file system mapped to a claim."""
        default = self.settings.default_fs_uri.removeprefix("hdfs://")
        try:
            location = parse(uri, default)
        except DfsError as exc:
            raise UnservableMaterial(f"prerequisite {material.name!r}: {exc}") from None
        claim = self.settings.hdfs_claims.get(location.authority)
        if claim is None:
            mapped = ", ".join(sorted(self.settings.hdfs_claims)) or "none"
            raise UnservableMaterial(
                f"prerequisite {material.name!r}: {shown_uri(uri)} is on HDFS "
                f"({location.authority}), which this cluster has only where the operator maps "
                "the file system to a PersistentVolumeClaim with the kubernetes setting "
                f"hdfs_claims (mapped: {mapped})"
            )
        return claim, location.path.lstrip("/")

    def _mount_place(self, role: RoleLaunch, material: Material) -> tuple[str, str]:
        """The claim of a storage / output, and the subPath in it ("" for all of it): an HDFS
        location the operator mapped, else the user's own claim."""
        if material.uris and is_dfs_uri(material.uris[0]) and len(material.uris) == 1:
            return self._hdfs_place(material, material.uris[0])
        return self._claim(role, material), ""

    @staticmethod
    def _hdfs_mounted(material: Material) -> bool:
        """Data or a script (a v1 codeDir) on HDFS: mounted from its claim, not fetched."""
        return material.kind is not Fetch.MOUNT and any(is_dfs_uri(u) for u in material.uris)

    def _hdfs_entries(self, material: Material) -> list[tuple[str, str, str]]:
        """(path in the container, claim, subPath) of each URI of data or a script on HDFS:
        each entry named after its last segment, or the whole directory for a codeDir."""
        if not all(is_dfs_uri(u) for u in material.uris):
            raise UnservableMaterial(
                f"prerequisite {material.name!r}: hdfs:// and other URIs cannot be mixed in one "
                "prerequisite on Kubernetes"
            )
        base = f"{WORK_DIR}/{material.name}"
        whole = len(material.uris) == 1 and (material.as_directory or material.kind is Fetch.CLONE)
        entries: list[tuple[str, str, str]] = []
        for uri in material.uris:
            claim, sub_path = self._hdfs_place(material, uri)
            entry = sub_path.rsplit("/", 1)[-1] or "index"
            path = base if whole else f"{base}/{entry}"
            if any(path == p for p, _, _ in entries):
                raise UnservableMaterial(
                    f"prerequisite {material.name!r}: two URIs would both be mounted as {entry!r}"
                )
            entries.append((path, claim, sub_path))
        return entries

    # --- checks and small parts ------------------------------------------------------------

    def _check_role(self, role: RoleLaunch) -> None:
        where = f"task role {role.name!r}"
        if role.image_auth is not None and role.image_auth.file:
            raise LaunchRefused(
                f"{where}: authFile {role.image_auth.file} is a file on the server's machine, "
                "which the cluster cannot read; give the registry credentials as a dockerimage's "
                "auth (protocol v2) instead"
            )
        for material in role.materials:
            try:
                check_name(material.name)
                if self._hdfs_mounted(material):
                    self._hdfs_entries(material)
                elif material.kind is Fetch.DOWNLOAD:
                    download_entries(material)
                elif material.kind is Fetch.CLONE:
                    repositories(material)
                else:
                    self._mount_place(role, material)
            except UnservableMaterial as exc:
                raise LaunchRefused(f"{where}: {exc}") from None
        for storage in role.storages:
            if not storage.volume:
                raise LaunchRefused(
                    f"{where}: storage {storage.name!r} is the host directory {storage.source}, "
                    "which a Kubernetes cluster does not have; define the storage as a volume "
                    "(the name of a PersistentVolumeClaim in the namespace)"
                )
            if not _PVC_NAME.fullmatch(storage.source) or len(storage.source) > 253:
                raise LaunchRefused(
                    f"{where}: storage {storage.name!r}: {_pvc_rule(storage.source)}"
                )
        for label, ports in self._role_ports(role).items():
            beyond = [p for p in ports if p > 65535]
            if beyond:
                raise LaunchRefused(
                    f"{where}: ports of label {label!r} would go beyond 65535 ({beyond[0]}); ask "
                    "for fewer ports or start the port range lower"
                )

    def _role_ports(self, role: RoleLaunch) -> dict[str, list[int]]:
        merged: dict[str, list[int]] = {}
        for i in range(role.instances):
            for label, ports in self.ports[(role.name, i)].items():
                merged.setdefault(label, []).extend(ports)
        return merged

    def _registry_secret_of(self, role: RoleLaunch) -> str:
        auth = role.image_auth
        assert auth is not None
        key = (
            auth.registry or registry_of(role.image),
            self._rendered(role, "username", auth),
            self._rendered(role, "password", auth),
        )
        if key not in self._registry:
            self._registry[key] = registry_secret_name(self.service, len(self._registry))
        return self._registry[key]

    def _rendered(self, role: RoleLaunch, what: str, auth: ImageAuth) -> str:
        """A credential with its `<% $secrets.x %>` references filled in from the secrets."""
        text = getattr(auth, what)

        def fill(match: re.Match[str]) -> str:
            key = match.group(1)
            if key not in self.request.secrets:
                raise LaunchRefused(
                    f"task role {role.name!r}: the {what} of its dockerimage's auth refers to "
                    f"the secret {key!r}, which the job does not define (secrets are kept in "
                    "memory only: a job resumed after a server restart has none)"
                )
            return self.request.secrets[key]

        return SECRET_REF.sub(fill, text)

    def _runnable(self, role: RoleLaunch) -> RoleLaunch:
        """The role with `<% $secrets.x %>` in its commands and hooks read from the mounted
        Secret when the command runs, so no secret is ever written into the ConfigMap (the
        Docker backend reads them from the container's environment instead: secrets_env)."""
        return with_secret_references(
            role,
            self.secret_values,
            lambda key: f"$(cat {shlex.quote(f'{SECRETS_DIR}/{key}')})",
        )

    def render(self, template: str) -> str:
        """A setting's template with `{group}`, `{count}`, `{queue}`, `{job}`, `{user}`."""
        return self._render(template)

    def _render(self, template: str) -> str:
        values = {
            "group": self.service,
            "count": str(self.request.total_instances),
            "queue": self.request.virtual_cluster,
            "job": self.request.job_id,
            "user": self.request.user,
        }
        return _TEMPLATE.sub(lambda m: values[m.group(1)], template)


def _without_pod_ip(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in POD_IP_VARIABLES}


def env_part_file(number: int) -> str:
    """The file of part `number` of the shared environment (the names sort in order)."""
    return f"env-common-{number:03d}.sh"


def _split_env_file(text: str, limit: int) -> list[str]:
    """A shell file in parts of at most `limit` bytes, cut between lines (a value with a
    newline spans lines, so a cut is made only before an `export` or comment line)."""
    parts: list[str] = []
    current: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        starts = line.startswith(("export ", "# "))
        if current and starts and size + len(line.encode()) > limit:
            parts.append("".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line.encode())
    parts.append("".join(current))
    return parts


def registry_of(image: str) -> str:
    """The registry an image name points at (Docker Hub when it names none)."""
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return DOCKER_HUB


def _pvc_rule(name: str) -> str:
    return (
        f"{name!r} is not a PersistentVolumeClaim name (lower-case letters, digits, '-' and "
        "'.', starting and ending with a letter or digit); name the storage after its claim"
    )
