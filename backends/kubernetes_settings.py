"""Settings of the Kubernetes backend: which cluster and namespace, and how pods are made.

They come from a YAML file (the path given, else `PAIGRAPH_K8S_CONFIG`), then `PAIGRAPH_*`
environment variables, then explicit values (flags), and a bad key is an error naming it. Every
key with its variable and default: docs/kubernetes.md, Settings.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from backends.kubernetes_names import dns_label
from simulator.dfs import DfsError, authority_of, is_dfs_uri

log = logging.getLogger(__name__)

CONFIG_ENV = "PAIGRAPH_K8S_CONFIG"
_ENV = {
    "kubeconfig": "PAIGRAPH_KUBECONFIG",
    "context": "PAIGRAPH_K8S_CONTEXT",
    "namespace": "PAIGRAPH_K8S_NAMESPACE",
    "owner": "PAIGRAPH_K8S_OWNER",
    "gpu_resource": "PAIGRAPH_K8S_GPU_RESOURCE",
    "host_network": "PAIGRAPH_K8S_HOST_NETWORK",
    "init_image": "PAIGRAPH_K8S_INIT_IMAGE",
    "scheduler_name": "PAIGRAPH_K8S_SCHEDULER",
    "state_dir": "PAIGRAPH_K8S_STATE",
    "pod_security": "PAIGRAPH_K8S_POD_SECURITY",
    "namespace_per_virtual_cluster": "PAIGRAPH_K8S_NAMESPACE_PER_VC",
}
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
_CLAIM = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUANTITY = re.compile(r"(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[mkMGTPE]|[eE][-+]?\d+)?")
_VC_PLACE = "{vc}"
_RESOURCE = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


class SettingsError(ValueError):
    """The settings cannot be used; each problem names the setting and the rule."""

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        lines = [f"  {where or '(settings)'}: {why}" for where, why in problems]
        super().__init__(f"invalid kubernetes settings in {source}:\n" + "\n".join(lines))


def default_state_dir(environ: Mapping[str, str]) -> Path:
    data_home = environ.get("XDG_DATA_HOME") or ""
    base = Path(data_home) if Path(data_home).is_absolute() else Path.home() / ".local" / "share"
    return base / "paigraph" / "kubernetes"


class PortRange(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    start: int = Field(default=15000, ge=1, le=65535)
    end: int = Field(default=40000, ge=2, le=65536)  # exclusive

    @model_validator(mode="after")
    def _ordered(self) -> PortRange:
        if self.end <= self.start:
            raise ValueError(f"end ({self.end}) must be above start ({self.start})")
        return self


class VirtualClusterQuota(BaseModel):
    """A virtual cluster's capacity, kept as a ResourceQuota on its namespace."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu: str | None = None
    memory: str | None = None
    gpu: str | None = None
    pods: int | None = Field(default=None, ge=0)

    @field_validator("cpu", "memory", "gpu", mode="before")
    @classmethod
    def _quantity(cls, value: Any) -> Any:
        if value is None:
            return None
        text = str(value).strip()
        if not _QUANTITY.fullmatch(text):
            raise ValueError(
                f"{value!r} is not a Kubernetes quantity such as 16, 500m, 64Gi or 1.5"
            )
        return text

    @model_validator(mode="after")
    def _something(self) -> VirtualClusterQuota:
        if self.cpu is None and self.memory is None and self.gpu is None and self.pods is None:
            raise ValueError("give at least one of cpu, memory, gpu, pods")
        return self


class KubernetesSettings(BaseModel):
    """Everything the backend needs to know besides the jobs themselves."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = Field(default=None, pattern=_DNS_LABEL, max_length=63)
    owner: str = Field(default="paigraph", min_length=1, max_length=63)
    gpu_resource: str = "nvidia.com/gpu"
    host_network: bool = False
    port_range: PortRange = PortRange()
    init_image: str = Field(default="alpine/git:v2.36.1", min_length=1)
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    scheduler_name: str | None = Field(default=None, pattern=_DNS_LABEL)
    pod_labels: dict[str, str] = Field(default_factory=dict)
    pod_annotations: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    service_account: str | None = Field(default=None, pattern=_DNS_LABEL)
    gang_scheduler: Literal["gates", "volcano", "coscheduling", "kueue", "scheduler"] = "gates"
    gang_queue: str = "{queue}"
    gang_bind_seconds: float = Field(default=120.0, gt=0)
    gang_timeout_seconds: float = Field(default=600.0, ge=0)
    image_pull_deadline_seconds: float = Field(default=300.0, ge=0)
    stop_grace_seconds: float = Field(default=30.0, ge=0, le=86400)
    state_dir: Path = Field(default_factory=lambda: default_state_dir(os.environ))
    hdfs_claims: dict[str, str] = Field(default_factory=dict)
    default_fs_uri: str = ""

    @field_validator("hdfs_claims")
    @classmethod
    def _file_systems(cls, value: dict[str, str]) -> dict[str, str]:
        """Keys as host:port (an `hdfs://` prefix is dropped), values claim names."""
        mapped = {}
        for key, claim in value.items():
            uri = key if is_dfs_uri(key) else f"hdfs://{key}"
            try:
                authority = authority_of(uri)
            except DfsError as exc:
                raise ValueError(str(exc)) from None
            if not _CLAIM.fullmatch(claim) or len(claim) > 253:
                raise ValueError(f"{claim!r} (for {key}) is not a PersistentVolumeClaim name")
            mapped[authority] = claim
        return mapped

    @field_validator("default_fs_uri")
    @classmethod
    def _default_fs(cls, value: str) -> str:
        if not value:
            return ""
        try:
            return f"hdfs://{authority_of(value.strip())}"
        except DfsError as exc:
            raise ValueError(str(exc)) from None

    pod_security: Literal["baseline", "restricted", "privileged"] = "baseline"
    run_as_user: int | None = Field(default=None, ge=0, le=2**31 - 1)
    run_as_group: int | None = Field(default=None, ge=0, le=2**31 - 1)
    fs_group: int = Field(default=1000, ge=1, le=2**31 - 1)
    network_policy: bool = True
    network_allow_from: list[dict[str, Any]] = Field(default_factory=list)
    queue_of_virtual_cluster: dict[str, str] = Field(default_factory=dict)
    namespace_per_virtual_cluster: bool = False
    virtual_cluster_namespace: str = "paigraph-vc-{vc}"
    virtual_cluster_quota: dict[str, VirtualClusterQuota] = Field(default_factory=dict)

    @field_validator("virtual_cluster_namespace")
    @classmethod
    def _namespace_pattern(cls, value: str) -> str:
        if _VC_PLACE not in value:
            raise ValueError(
                f"{value!r} must hold {_VC_PLACE}, where the virtual cluster's name goes"
            )
        sample = value.replace(_VC_PLACE, "vc")
        if len(sample) > 63 - 8 or not re.fullmatch(_DNS_LABEL, sample):
            raise ValueError(
                f"{value!r} with {_VC_PLACE} filled in must be a namespace name: lower-case "
                "letters, digits and '-', starting and ending alphanumeric, with room to spare "
                "in 63 characters"
            )
        return value

    @model_validator(mode="after")
    def _quota_needs_namespaces(self) -> KubernetesSettings:
        if self.virtual_cluster_quota and not self.namespace_per_virtual_cluster:
            raise ValueError(
                "virtual_cluster_quota: a ResourceQuota limits a whole namespace, so a quota per "
                "virtual cluster needs namespace_per_virtual_cluster: true; with one shared "
                "namespace, give each virtual cluster a Kueue LocalQueue "
                "(queue_of_virtual_cluster), whose ClusterQueue holds its quota"
            )
        return self

    def namespace_for(self, virtual_cluster: str) -> str:
        """Where the jobs of `virtual_cluster` run: its own namespace with
        `namespace_per_virtual_cluster`, else the one namespace of every job."""
        if not self.namespace_per_virtual_cluster:
            return self.resolved_namespace()
        name = self.virtual_cluster_namespace.replace(_VC_PLACE, virtual_cluster)
        if len(name) <= 63 and re.fullmatch(_DNS_LABEL, name):
            return name
        return dns_label(name)

    @model_validator(mode="after")
    def _profile_fits(self) -> KubernetesSettings:
        if self.host_network and self.pod_security != "privileged":
            raise ValueError(
                f"host_network: pods on their node's network fail the Pod Security "
                f"{self.pod_security!r} profile; set pod_security: privileged (and label the "
                "jobs' namespace so) to use it"
            )
        if self.pod_security == "restricted" and self.run_as_user == 0:
            raise ValueError("run_as_user: the restricted profile forbids user 0 (root)")
        return self

    @field_validator("port_range", mode="before")
    @classmethod
    def _range_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            match = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", value)
            if not match:
                raise ValueError(f"write the range as start-end, e.g. 15000-40000 (got {value!r})")
            return {"start": int(match[1]), "end": int(match[2])}
        return value

    @field_validator("gpu_resource")
    @classmethod
    def _resource_name(cls, value: str) -> str:
        if not _RESOURCE.fullmatch(value) or "/" not in value:
            raise ValueError(
                f"{value!r} is not an extended resource name such as nvidia.com/gpu "
                "(a domain, '/', then a name)"
            )
        return value

    def resolved_namespace(self) -> str:
        """The namespace to use: the setting, else the kubeconfig context's or the pod's own
        namespace, else `default`."""
        if self.namespace:
            return self.namespace
        in_pod = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        if not self.kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST") and in_pod.exists():
            return in_pod.read_text().strip() or "default"
        try:
            from kubernetes import config

            _, current = config.list_kube_config_contexts(config_file=self.kubeconfig)
            if self.context:
                contexts, _ = config.list_kube_config_contexts(config_file=self.kubeconfig)
                current = next((c for c in contexts if c.get("name") == self.context), current)
            return (current or {}).get("context", {}).get("namespace") or "default"
        except Exception as exc:  # no kubeconfig: the manifests still say where they would go
            log.debug("no namespace from the kubeconfig (%s); using 'default'", exc)
            return "default"


def load_settings(
    path: str | Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> KubernetesSettings:
    """Settings from the YAML file (`path`, else $PAIGRAPH_K8S_CONFIG), the environment, and
    `overrides` (None values are ignored), in that order; SettingsError names what is wrong."""
    env = os.environ if environ is None else environ
    source = str(path or env.get(CONFIG_ENV) or "the environment")
    values: dict[str, Any] = {}
    file = path or env.get(CONFIG_ENV)
    if file:
        try:
            loaded = yaml.safe_load(Path(file).read_text(encoding="utf-8"))
        except OSError as exc:
            raise SettingsError(source, [("", f"cannot read the file: {exc.strerror}")]) from None
        except yaml.YAMLError as exc:
            raise SettingsError(source, [("", f"not valid YAML: {exc}")]) from None
        if loaded is not None and not isinstance(loaded, dict):
            raise SettingsError(source, [("", "the file must hold a mapping of settings")])
        values.update(loaded or {})
    for key, variable in _ENV.items():
        if env.get(variable):
            values[key] = env[variable]
    values.setdefault("state_dir", default_state_dir(env))
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return KubernetesSettings.model_validate(values)
    except ValidationError as exc:
        problems = [
            (".".join(str(p) for p in error["loc"]), error["msg"].removeprefix("Value error, "))
            for error in exc.errors()
        ]
        raise SettingsError(source, problems) from None
