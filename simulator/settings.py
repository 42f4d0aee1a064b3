"""Settings of the local cluster simulator: its nodes, virtual clusters, ports and limits.

They come from a YAML file (``load_settings``: the argument, else ``PAIGRAPH_SIMULATOR_CONFIG``,
else the defaults), checked so that a bad key is an error naming it. Every key, its meaning and
default: docs/configuration.md.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple, cast, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from simulator.dfs import DfsError, authority_of
from simulator.fetch_policy import ALLOWED_NETWORKS_ENV, FetchPolicy, FetchPolicyError

CONFIG_ENV = "PAIGRAPH_SIMULATOR_CONFIG"
STATE_ENV = "PAIGRAPH_SIMULATOR_STATE"

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
_NAME_RULE = "letters, digits, '_', '.', '-', starting with a letter or digit, at most 63"


class SettingsError(ValueError):
    """The settings file cannot be used; each problem names the setting and the rule."""

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = problems
        lines = [f"  {where or '(settings)'}: {why}" for where, why in problems]
        super().__init__(f"invalid simulator settings in {source}:\n" + "\n".join(lines))


class Capacity(NamedTuple):
    """An amount of each schedulable resource."""

    cpu: int
    memory_mb: int
    gpu: int


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The per-user data directory of the simulator (see ``state_dir``)."""
    env = os.environ if environ is None else environ
    if env.get(STATE_ENV):
        return Path(env[STATE_ENV]).expanduser().resolve()
    data_home = env.get("XDG_DATA_HOME") or ""
    base = Path(data_home) if Path(data_home).is_absolute() else Path.home() / ".local" / "share"
    return base / "paigraph" / "simulator"


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NodeTemplate(_Strict):
    """What every node of the ``node_count`` shorthand has."""

    cpu: int = Field(default=32, ge=1, le=100_000, description="Simulated cpu cores of the node.")
    memory_mb: int = Field(
        default=262144, ge=1, le=1 << 40, description="Simulated memory of the node, in MB."
    )
    gpu: int | None = Field(
        default=None, ge=0, le=1024, description="Simulated GPUs of the node; unset: gpus_per_node."
    )


class NodeSpec(_Strict):
    """One simulated node."""

    name: str = Field(pattern=_NAME, description=f"The node's name ({_NAME_RULE}).")
    cpu: int = Field(ge=1, le=100_000, description="Simulated cpu cores of the node.")
    memory_mb: int = Field(ge=1, le=1 << 40, description="Simulated memory of the node, in MB.")
    gpu: int | None = Field(
        default=None, ge=0, le=1024, description="Simulated GPUs of the node; unset: gpus_per_node."
    )

    @property
    def capacity(self) -> Capacity:
        return Capacity(self.cpu, self.memory_mb, self.gpu or 0)


class VirtualClusterSpec(_Strict):
    """A virtual cluster: a name jobs choose and a quota their running attempts share."""

    name: str = Field(pattern=_NAME, description=f"The virtual cluster's name ({_NAME_RULE}).")
    share: float | None = Field(
        default=None,
        gt=0,
        le=100,
        description="Quota as a percentage of every resource of the cluster.",
    )
    cpu: int | None = Field(default=None, ge=0, description="Absolute quota: cpu cores.")
    memory_mb: int | None = Field(default=None, ge=0, description="Absolute quota: memory in MB.")
    gpu: int | None = Field(default=None, ge=0, description="Absolute quota: GPUs (default 0).")

    @model_validator(mode="after")
    def _share_or_absolute(self) -> VirtualClusterSpec:
        absolute = [k for k in ("cpu", "memory_mb", "gpu") if getattr(self, k) is not None]
        if self.share is not None and absolute:
            raise ValueError(
                f"give either share or absolute cpu/memory_mb/gpu, not both "
                f"(share and {', '.join(absolute)} are set)"
            )
        if self.share is None:
            missing = [k for k in ("cpu", "memory_mb") if getattr(self, k) is None]
            if missing:
                raise ValueError(
                    f"a quota needs share (percent) or cpu and memory_mb; "
                    f"missing {' and '.join(missing)}"
                )
        return self

    def quota_of(self, total: Capacity) -> Capacity:
        """The quota in absolute numbers for a cluster of ``total`` capacity."""
        if self.share is not None:
            return Capacity(*(math.floor(t * self.share / 100 + 1e-9) for t in total))
        return Capacity(self.cpu or 0, self.memory_mb or 0, self.gpu or 0)


class PortRange(_Strict):
    """Host ports ``[start, end)``."""

    start: int = Field(default=15000, ge=1, le=65535, description="First port of the range.")
    end: int = Field(
        default=40000, ge=2, le=65536, description="One past the last port of the range."
    )

    @model_validator(mode="after")
    def _ordered(self) -> PortRange:
        if self.end <= self.start:
            raise ValueError(f"end ({self.end}) must be greater than start ({self.start})")
        return self


def _default_vcs() -> list[VirtualClusterSpec]:
    return [VirtualClusterSpec(name="default", share=100)]


class SimulatorSettings(_Strict):
    """Everything the simulator can be told; see the module docstring for each key."""

    nodes: list[NodeSpec] | None = Field(
        default=None, min_length=1, description="Simulated nodes; unset: node_count copies of node."
    )
    node_count: int = Field(
        default=4, ge=1, le=10_000, description="Number of nodes of the shorthand."
    )
    node: NodeTemplate = Field(
        default_factory=NodeTemplate, description="Template of the shorthand's nodes."
    )
    gpus_per_node: int = Field(default=8, ge=0, le=1024, description="Simulated GPUs per node.")
    use_host_gpus: bool = Field(
        default=True, description="Give the first node the host's real GPUs."
    )
    virtual_clusters: list[VirtualClusterSpec] = Field(
        default_factory=_default_vcs, min_length=1, description="Virtual clusters and quotas."
    )
    port_range: PortRange = Field(
        default_factory=PortRange, description="Host ports [start, end) for instances."
    )
    publish_address: str = Field(
        default="127.0.0.1", description="Host address the instances' ports are published on."
    )
    state_dir: Path = Field(
        default_factory=default_state_dir, description="Where logs and the port table live."
    )
    allowed_file_roots: list[Path] = Field(
        default_factory=list, description="Host directories file:// prerequisites may read."
    )
    pids_limit: int = Field(
        default=1024, ge=16, le=4_194_304, description="Processes per container."
    )
    stop_grace_seconds: float = Field(
        default=10, ge=0, le=3600, description="Seconds from SIGTERM to SIGKILL on stop."
    )
    log_limit_mb: int = Field(
        default=256,
        ge=1,
        le=1_048_576,
        description="Most log kept per instance: its head and tail.",
    )
    image_pull: bool = Field(default=False, description="Pull missing images from a registry.")
    allowed_fetch_networks: list[str] = Field(
        default_factory=list, description="Non-public networks and hosts downloads may reach."
    )
    fetch_mirrors: dict[str, str] = Field(
        default_factory=dict,
        description="URL prefixes fetched from another URL or local folder instead.",
    )
    default_fs_uri: str = Field(
        default="hdfs://paigraph-dfs:9000",
        description="PAI_DEFAULT_FS_URI: the simulated default file system.",
    )
    dfs_max_mb: int = Field(
        default=10240,
        ge=1,
        le=1 << 30,
        description="Most one user's tree of one simulated file system holds, in MB.",
    )

    @field_validator("port_range", mode="before")
    @classmethod
    def _port_range_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            match = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", value)
            if not match:
                raise ValueError(f"write it as 'start-end' (e.g. '15000-40000'), not {value!r}")
            return {"start": int(match[1]), "end": int(match[2])}
        return value

    @field_validator("publish_address", mode="after")
    @classmethod
    def _an_address(cls, value: str) -> str:
        """An IP address, written as Docker takes it: a host name would be resolved by no one."""
        try:
            return str(ipaddress.ip_address(value.strip()))
        except ValueError:
            raise ValueError(
                f"{value!r} is not an IP address (e.g. 127.0.0.1, or 0.0.0.0 for every address)"
            ) from None

    @field_validator("state_dir", mode="after")
    @classmethod
    def _absolute_dir(cls, value: Path, info: ValidationInfo) -> Path:
        return _absolute(value, info)

    @field_validator("allowed_file_roots", mode="after")
    @classmethod
    def _absolute_roots(cls, value: list[Path], info: ValidationInfo) -> list[Path]:
        return [_absolute(p, info) for p in value]

    @field_validator("default_fs_uri", mode="after")
    @classmethod
    def _a_file_system(cls, value: str) -> str:
        try:
            return f"hdfs://{authority_of(value.strip())}"
        except DfsError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("allowed_fetch_networks", mode="after")
    @classmethod
    def _fetch_entries(cls, value: list[str]) -> list[str]:
        try:
            FetchPolicy.parse(value)
        except FetchPolicyError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("fetch_mirrors", mode="after")
    @classmethod
    def _mirror_prefixes(cls, value: dict[str, str]) -> dict[str, str]:
        for prefix, replacement in value.items():
            if not re.match(r"(https?|git)://[^/]+", prefix):
                raise ValueError(f"{prefix!r}: a mirrored prefix is an http, https or git URL")
            if not re.match(r"(https?|git|file)://", replacement):
                raise ValueError(
                    f"{prefix!r}: its mirror {replacement!r} is an http, https, git or file URL"
                )
        return value

    @field_validator("nodes", mode="after")
    @classmethod
    def _unique_nodes(cls, value: list[NodeSpec] | None) -> list[NodeSpec] | None:
        if value is not None:
            _refuse_duplicates("node", [n.name for n in value])
        return value

    @field_validator("virtual_clusters", mode="after")
    @classmethod
    def _unique_vcs(cls, value: list[VirtualClusterSpec]) -> list[VirtualClusterSpec]:
        _refuse_duplicates("virtual cluster", [v.name for v in value])
        return value

    @model_validator(mode="after")
    def _consistent(self) -> SimulatorSettings:
        shorthand = {"node_count", "node"} & self.model_fields_set
        if self.nodes is not None and shorthand:
            raise ValueError(
                f"nodes: give the list of nodes or the node_count shorthand, not both "
                f"({'/'.join(sorted(shorthand))} is set too)"
            )
        shares = sum(v.share for v in self.virtual_clusters if v.share is not None)
        if shares > 100 + 1e-9:
            raise ValueError(f"virtual_clusters: the shares add up to {shares:g}%, more than 100%")
        total = self.total_capacity
        quotas = [v.quota_of(total) for v in self.virtual_clusters]
        for i, (what, unit) in enumerate((("cpu", ""), ("memory_mb", " MB"), ("gpu", ""))):
            asked = sum(q[i] for q in quotas)
            if asked > total[i]:
                raise ValueError(
                    f"virtual_clusters: the quotas add up to {asked}{unit} {what}, more than "
                    f"the {total[i]}{unit} {what} of all nodes"
                )
        return self

    @property
    def cluster_nodes(self) -> tuple[NodeSpec, ...]:
        """The nodes, from ``nodes`` or the shorthand, with ``gpu`` always set."""
        if self.nodes is not None:
            specs = self.nodes
        else:
            specs = [
                NodeSpec(name=f"node-{i}", **self.node.model_dump()) for i in range(self.node_count)
            ]
        return tuple(
            n if n.gpu is not None else n.model_copy(update={"gpu": self.gpus_per_node})
            for n in specs
        )

    @property
    def total_capacity(self) -> Capacity:
        caps = [n.capacity for n in self.cluster_nodes]
        return Capacity(*(sum(c[i] for c in caps) for i in range(3)))

    @property
    def fetch_policy(self) -> FetchPolicy:
        """What data downloads may reach besides public addresses."""
        return FetchPolicy.parse(self.allowed_fetch_networks)

    @property
    def port_state_file(self) -> Path:
        """The held-port table shared by the simulator processes of this user."""
        return self.state_dir / "ports.json"


def _absolute(value: Path, info: ValidationInfo) -> Path:
    path = value.expanduser()
    base = (info.context or {}).get("base_dir")
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    return path.resolve()


def _refuse_duplicates(what: str, names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"{what} name {name!r} is used twice")
        seen.add(name)


def load_settings(
    path: str | os.PathLike[str] | None = None, *, environ: Mapping[str, str] | None = None
) -> SimulatorSettings:
    """Settings from ``path``, else from ``$PAIGRAPH_SIMULATOR_CONFIG``, else the defaults."""
    env = os.environ if environ is None else environ
    origin = "argument"
    if path is None and env.get(CONFIG_ENV):
        path, origin = env[CONFIG_ENV], f"${CONFIG_ENV}"
    if path is None:
        return settings_from_data({}, source="built-in defaults", environ=env)
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SettingsError(
            str(file), [("", f"the settings file (from {origin}) does not exist")]
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(str(file), [("", f"cannot read the settings file: {exc}")]) from None
    return settings_from_yaml(text, source=str(file), base_dir=file.resolve().parent, environ=env)


def settings_from_yaml(
    text: str,
    *,
    source: str = "<settings>",
    base_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> SimulatorSettings:
    """Settings from YAML text; relative paths in it are taken from ``base_dir``."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SettingsError(source, [("", f"not valid YAML{where}: {problem}")]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise SettingsError(source, [("", f"must be a mapping of settings, not a {kind}")])
    return settings_from_data(data, source=source, base_dir=base_dir, environ=environ)


def settings_from_data(
    data: Mapping[str, Any],
    *,
    source: str = "<settings>",
    base_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> SimulatorSettings:
    """Validate plain data; ``$PAIGRAPH_SIMULATOR_STATE`` wins over ``state_dir`` and
    ``$PAIGRAPH_ALLOWED_FETCH_NETWORKS`` over ``allowed_fetch_networks``."""
    env = os.environ if environ is None else environ
    data = dict(data)
    if env.get(ALLOWED_NETWORKS_ENV, "").strip():
        data["allowed_fetch_networks"] = env[ALLOWED_NETWORKS_ENV].split(",")
    if env.get(STATE_ENV):
        data["state_dir"] = str(Path(env[STATE_ENV]).expanduser().resolve())
    elif "state_dir" not in data:
        data["state_dir"] = str(default_state_dir(env))
    try:
        return SimulatorSettings.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise SettingsError(source, [_explain(e) for e in exc.errors()]) from None


def _explain(error: Any) -> tuple[str, str]:
    loc = tuple(error["loc"])
    where = ""
    for part in loc:
        where = f"{where}[{part}]" if isinstance(part, int) else f"{where}.{part}".lstrip(".")
    message = str(error["msg"]).removeprefix("Value error, ")
    named = re.match(r"([a-z_]+): (.*)", message, re.DOTALL)
    if not where and named and named[1] in SimulatorSettings.model_fields:
        where, message = named[1], named[2]
    if error["type"] == "extra_forbidden":
        known = _known_keys(loc[:-1])
        message = "unknown setting" + (f"; known here: {', '.join(known)}" if known else "")
    elif error["type"] == "string_pattern_mismatch":
        message = f"{error['input']!r} is not a valid name ({_NAME_RULE} characters)"
    return where, message


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys the model at ``loc`` accepts, to suggest the right spelling."""
    model: Any = SimulatorSettings
    for part in loc:
        if isinstance(part, int):
            continue
        field = cast(Any, model).model_fields.get(part) if isinstance(model, type) else None
        if field is None:
            return []
        model = _model_in(field.annotation)
        if model is None:
            return []
    return list(model.model_fields)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) is not None or get_args(annotation):
        for arg in get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None
