"""The Docker engine driver: networks, containers and the event stream, by label.

Only this module talks to Docker. It knows nothing of jobs or PAI: callers hand it a complete
`ContainerSpec` and receive plain `ContainerInfo` / `ContainerEvent` values back. Every object it
creates carries the `io.paigraph.*` labels, which is how a restarted backend finds them again.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import math
import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ParamSpec, TypeVar, cast

import docker
import docker.errors
import requests.exceptions
from docker.types import DeviceRequest, IPAMConfig, IPAMPool, Mount

from simulator.capabilities import KEPT_CAPABILITIES, SECURITY_OPTIONS
from simulator.engine_watch import EngineWatch
from simulator.host_routes import host_routes

LABEL = "io.paigraph"
MANAGED = f"{LABEL}.managed"
OWNER = f"{LABEL}.owner"
# Job networks take their subnets from here: 512 networks of up to 253 instances each.
NETWORK_POOL = ipaddress.IPv4Network("10.222.0.0/15")
_NETWORK_LOCK = threading.Lock()

# Every container starts with no capability but KEPT_CAPABILITIES and cannot gain more
# (`no-new-privileges`); simulator.capabilities says why each one is kept.


class EngineError(Exception):
    """The Docker engine refused or could not be reached; the message says which."""


class EngineUnreachable(EngineError):
    """The engine did not answer at all (stopped, restarting, its socket gone): the call may
    have been made or not, and trying again once the engine is back is the way on."""


class ImageMissing(EngineError):
    pass


_P = ParamSpec("_P")
_R = TypeVar("_R")
# what the Docker SDK raises when no engine answers on its socket (refused, reset, cut)
_UNREACHABLE = (requests.exceptions.ConnectionError, requests.exceptions.Timeout, OSError)


def _reaching(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Turn "no engine answers" into EngineUnreachable, naming the call."""

    @functools.wraps(method)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except _UNREACHABLE as exc:
            raise EngineUnreachable(
                f"the Docker engine did not answer ({method.__name__}): {exc}"
            ) from None
        except docker.errors.DockerException as exc:
            if isinstance(exc, docker.errors.APIError) or not _unreachable_cause(exc):
                raise
            raise EngineUnreachable(
                f"the Docker engine did not answer ({method.__name__}): {exc}"
            ) from None

    return call


def _unreachable_cause(exc: BaseException) -> bool:
    cause = exc.__cause__ or exc.__context__
    return isinstance(cause, _UNREACHABLE)


class PortTaken(EngineError):
    """Docker could not publish a host port: another program took it after the port allocator
    found it free (the check is a snapshot). The container was not started."""

    def __init__(self, message: str, port: int | None) -> None:
        super().__init__(message)
        self.port = port


# "Bind for 127.0.0.1:15000 failed: port is already allocated" (Docker's own table), or
# "listen tcp4 127.0.0.1:15000: bind: address already in use" (docker-proxy)
_PORT_TAKEN = re.compile(
    r"(?:Bind for|listen tcp\d?) \[?[\w.:]*?\]?:(\d+)(?: failed: port is already allocated|"
    r": bind: address already in use)"
)


@dataclass(frozen=True)
class BindMount:
    source: str  # host path, or a Docker volume's name when `volume`
    target: str  # path in the container
    read_only: bool = False
    volume: bool = False
    checked: bool = False  # a prerequisite's directory, to be checked again before mounting


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    image: str
    command: list[str]
    network: str
    ip: str
    aliases: list[str]
    labels: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)
    ports: list[int] = field(default_factory=list)  # published 1:1 on the host (tcp)
    publish_address: str = "127.0.0.1"  # the host address `ports` are published on
    memory_mb: int = 512
    cpus: float = 1.0
    shm_mb: int = 64
    pids_limit: int = 1024
    mounts: list[BindMount] = field(default_factory=list)
    working_dir: str = "/"
    gpu_devices: list[str] = field(default_factory=list)  # real NVIDIA device ids


@dataclass(frozen=True)
class NetworkInfo:
    name: str
    subnet: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address

    def addresses(self, count: int) -> list[str]:
        """`count` container addresses in order, skipping the gateway."""
        hosts = (h for h in self.subnet.hosts() if h != self.gateway)
        picked = [str(next(hosts, None) or "") for _ in range(count)]
        if "" in picked:
            raise EngineError(
                f"network {self.name} ({self.subnet}) has fewer than {count} addresses"
            )
        return picked


@dataclass(frozen=True)
class ContainerInfo:
    id: str
    name: str
    labels: dict[str, str]
    status: str  # created, running, exited, dead ...
    exit_code: int | None
    oom_killed: bool
    error: str
    started_at: datetime | None
    finished_at: datetime | None
    ip: str | None


@dataclass(frozen=True)
class ContainerEvent:
    action: str  # start, die, oom, destroy
    id: str
    labels: dict[str, str]
    exit_code: int | None
    at: datetime


class Engine:
    """A thin, typed layer over the Docker SDK."""

    def __init__(self, client: docker.DockerClient | None = None) -> None:
        try:
            self.client = client or docker.from_env(timeout=120)
            self.client.ping()
        except docker.errors.DockerException as exc:
            raise EngineError(
                f"no Docker engine answers ({exc}); start one (dockerd) or set DOCKER_HOST"
            ) from None
        self.api = self.client.api

    def sockets(self) -> tuple[Path, ...]:
        """The host paths of the socket this engine is reached through (resolved), and of
        Docker's usual socket: a container that can reach one of them owns the machine."""
        found = {Path("/var/run/docker.sock").resolve()}
        adapter = self.api.adapters.get("http+docker://") if hasattr(self.api, "adapters") else None
        path = getattr(adapter, "socket_path", None)
        if isinstance(path, str) and path:
            found.add(Path(path).resolve())
        return tuple(sorted(found))

    # --- the machine -------------------------------------------------------------------------

    @_reaching
    def host_capacity(self) -> tuple[int, int]:
        """What this machine gives containers: (cpus, memory in MB)."""
        info = self.client.info()
        return int(info.get("NCPU") or os.cpu_count() or 1), int(info["MemTotal"]) // (1 << 20)

    @_reaching
    def runtimes(self) -> tuple[str, dict[str, str]]:
        """The engine's default runtime and every registered one with its program."""
        info = self.client.info()
        registered = info.get("Runtimes") or {}
        programs = {
            str(name): str((spec or {}).get("path") or (spec or {}).get("runtimeType") or "")
            for name, spec in registered.items()
        }
        return str(info.get("DefaultRuntime") or "runc"), programs

    @functools.cached_property
    def _plain_runtime(self) -> tuple[str | None, str | None]:
        return plain_runtime(*self.runtimes())

    def runtime_for(self, spec: ContainerSpec) -> str | None:
        """The runtime to run `spec` with (None: the engine's default). A container whose
        NVIDIA_VISIBLE_DEVICES names GPUs it is not given as devices (simulated ones) runs with
        plain runc when the default is the NVIDIA runtime, which would attach those real GPUs;
        EngineError when the engine has no such runtime."""
        if not simulated_gpus(spec):
            return None
        runtime, problem = self._plain_runtime
        if problem:
            raise EngineError(f"container {spec.name}: {problem}")
        return runtime

    @_reaching
    def image_exists(self, image: str) -> bool:
        try:
            self.client.images.get(image)
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot look up image {image!r}: {_explain(exc)}") from None
        return True

    # --- networks ----------------------------------------------------------------------------

    @_reaching
    def create_network(self, name: str, labels: dict[str, str], hosts: int) -> NetworkInfo:
        """A bridge network with its own subnet, big enough for `hosts` fixed addresses.

        Containers get addresses chosen before they start (so every instance's environment can
        name its peers), which Docker allows only on a subnet given at creation. Subnets are
        taken from NETWORK_POOL, skipping any that overlaps a network Docker already has.
        """
        prefix = min(24, 32 - math.ceil(math.log2(hosts + 3)))
        tried: list[ipaddress.IPv4Network] = []
        with _NETWORK_LOCK:  # another process may still take a subnet between list and create
            return self._create_network(name, labels, prefix, tried)

    def _create_network(
        self,
        name: str,
        labels: dict[str, str],
        prefix: int,
        tried: list[ipaddress.IPv4Network],
    ) -> NetworkInfo:
        for _ in range(16):
            subnet = self._free_subnet(prefix, tried)
            tried.append(subnet)
            gateway = next(subnet.hosts())
            ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=str(subnet), gateway=str(gateway))])
            try:
                self.client.networks.create(
                    name,
                    driver="bridge",
                    ipam=ipam,
                    labels={MANAGED: "1", **labels},
                    check_duplicate=True,
                )
            except docker.errors.APIError as exc:
                if "overlap" in _explain(exc).lower():
                    continue
                raise EngineError(f"cannot create network {name}: {_explain(exc)}") from None
            return NetworkInfo(name, subnet, gateway)
        raise EngineError(f"cannot create network {name}: no free subnet in {NETWORK_POOL}")

    def _free_subnet(
        self, prefix: int, tried: list[ipaddress.IPv4Network]
    ) -> ipaddress.IPv4Network:
        taken: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = [*tried, *host_routes()]
        for network in self.api.networks():
            for config in (network.get("IPAM") or {}).get("Config") or []:
                with contextlib.suppress(KeyError, ValueError):
                    taken.append(ipaddress.ip_network(config["Subnet"]))
        for candidate in NETWORK_POOL.subnets(new_prefix=prefix):
            if not any(candidate.overlaps(t) for t in taken if t.version == 4):
                return candidate
        raise EngineError(f"no free /{prefix} subnet left in {NETWORK_POOL} for a job network")

    @_reaching
    def remove_network(self, name: str) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            try:
                self.client.networks.get(name).remove()
            except docker.errors.APIError as exc:
                if exc.status_code != 404:
                    raise EngineError(f"cannot remove network {name}: {_explain(exc)}") from None

    @_reaching
    def networks(self, labels: dict[str, str]) -> list[tuple[str, dict[str, str]]]:
        found = self.client.networks.list(filters={"label": _label_filter(labels)})
        return [(cast(str, n.name), n.attrs.get("Labels") or {}) for n in found]

    # --- containers --------------------------------------------------------------------------

    @_reaching
    def run(self, spec: ContainerSpec) -> str:
        """Create and start a container; returns its id. ImageMissing when the image is absent.

        Whatever the spec says, the container is unprivileged (KEPT_CAPABILITIES,
        SECURITY_OPTIONS), on its job's own network, and mounts nothing that exposes the
        engine's socket (EngineError before anything is created).
        """
        _check_confined(spec, self.sockets())
        runtime = self.runtime_for(spec)
        api = self.api
        host_config = api.create_host_config(
            init=True,
            privileged=False,
            cap_drop=["ALL"],
            cap_add=list(KEPT_CAPABILITIES),
            security_opt=list(SECURITY_OPTIONS),
            mem_limit=f"{spec.memory_mb}m",
            memswap_limit=f"{spec.memory_mb}m",  # no swap: a memory limit means an OOM kill
            nano_cpus=int(spec.cpus * 1e9),
            shm_size=f"{spec.shm_mb}m",
            pids_limit=spec.pids_limit,
            port_bindings={f"{p}/tcp": (spec.publish_address, p) for p in spec.ports},
            mounts=[
                Mount(
                    m.target,
                    m.source,
                    type="volume" if m.volume else "bind",
                    read_only=m.read_only,
                )
                for m in spec.mounts
            ],
            device_requests=(
                [DeviceRequest(device_ids=spec.gpu_devices, capabilities=[["gpu"]])]
                if spec.gpu_devices
                else None
            ),
            network_mode=spec.network,
            runtime=runtime,
        )
        # by network name, which the SDK takes although its stubs say one endpoint config
        endpoints: Any = {
            spec.network: api.create_endpoint_config(ipv4_address=spec.ip, aliases=spec.aliases)
        }
        networking = api.create_networking_config(endpoints)
        try:
            created = api.create_container(
                spec.image,
                command=spec.command,
                name=spec.name,
                environment=spec.env,
                labels={MANAGED: "1", **spec.labels},
                working_dir=spec.working_dir,
                ports=[(p, "tcp") for p in spec.ports],
                host_config=host_config,
                networking_config=networking,
            )
        except docker.errors.ImageNotFound:
            raise ImageMissing(f"image {spec.image!r} is not on this machine") from None
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot create container {spec.name}: {_explain(exc)}") from None
        container_id: str = created["Id"]
        try:
            api.start(container_id)
        except docker.errors.APIError as exc:
            self.remove(container_id)
            raise _start_error(spec.name, _explain(exc)) from None
        return container_id

    @_reaching
    def stop(self, container_id: str, grace_seconds: float) -> None:
        """SIGTERM, then SIGKILL after the grace period; a container already gone is fine."""
        with contextlib.suppress(docker.errors.NotFound):
            try:
                self.api.stop(container_id, timeout=max(0, round(grace_seconds)))
            except docker.errors.APIError as exc:
                if exc.status_code not in (304, 404, 409):
                    raise EngineError(f"cannot stop {container_id[:12]}: {_explain(exc)}") from None

    def exec_succeeds(self, container_id: str, command: list[str], timeout: float) -> bool:
        """Whether `command`, run in the running container, exits 0 within `timeout` seconds
        (a readiness check). Any failure to run it counts as not passing."""

        def run() -> bool:
            created = self.api.exec_create(container_id, command, stdout=False, stderr=False)
            self.api.exec_start(created["Id"])
            return self.api.exec_inspect(created["Id"]).get("ExitCode") == 0

        box: list[bool] = []

        def attempt() -> None:
            try:
                box.append(run())
            except (docker.errors.APIError, requests.exceptions.RequestException):
                box.append(False)

        worker = threading.Thread(target=attempt, name="readiness-exec", daemon=True)
        worker.start()
        worker.join(timeout)
        return bool(box and box[0])

    @_reaching
    def remove(self, container_id: str) -> None:
        with contextlib.suppress(docker.errors.NotFound):
            try:
                self.api.remove_container(container_id, force=True)
            except docker.errors.APIError as exc:
                if exc.status_code not in (404, 409):  # 409: removal already in progress
                    raise EngineError(
                        f"cannot remove {container_id[:12]}: {_explain(exc)}"
                    ) from None

    @_reaching
    def inspect(self, container_id: str) -> ContainerInfo | None:
        try:
            return _info(self.api.inspect_container(container_id))
        except docker.errors.NotFound:
            return None

    @_reaching
    def containers(self, labels: dict[str, str]) -> list[ContainerInfo]:
        found = self.api.containers(all=True, filters={"label": _label_filter(labels)})
        infos = (self.inspect(c["Id"]) for c in found)
        return [i for i in infos if i is not None]

    def watch(
        self,
        labels: dict[str, str],
        on_event: Callable[[ContainerEvent], None],
        on_reopen: Callable[[], None],
    ) -> EngineWatch:
        """Deliver container events with these labels to `on_event` from a thread, for as long
        as the returned watch runs (`stop()` ends it).

        The stream starts before this returns, so a caller that lists containers afterwards
        misses nothing in between. A stream that breaks is opened again with back-off and
        `on_reopen` is called each time, before any event of the new stream: the caller lists
        its containers again there, and applies what happened while no stream was open.
        """
        filters = {"type": "container", "label": _label_filter(labels)}

        def open_stream() -> tuple[Iterator[dict[str, Any]], Callable[[], None]]:
            stream = self.api.events(decode=True, filters=filters)
            return stream, stream.close

        def on_item(raw: dict[str, Any]) -> None:
            event = _event(raw)
            if event is not None:
                on_event(event)

        try:
            return EngineWatch(open_stream, on_item, on_reopen)
        except (docker.errors.DockerException, *_UNREACHABLE) as exc:
            raise EngineUnreachable(f"cannot watch the Docker engine's events: {exc}") from None


# NVIDIA_VISIBLE_DEVICES values that attach no GPU (the NVIDIA runtime's own words for it)
_NO_DEVICES = ("", "none", "void")


def simulated_gpus(spec: ContainerSpec) -> bool:
    """Whether the spec's NVIDIA_VISIBLE_DEVICES names GPUs other than its real devices."""
    named = spec.env.get("NVIDIA_VISIBLE_DEVICES", "").strip()
    if named.lower() in _NO_DEVICES:
        return False
    return sorted(d.strip() for d in named.split(",")) != sorted(spec.gpu_devices)


def plain_runtime(default: str, runtimes: dict[str, str]) -> tuple[str | None, str | None]:
    """The runtime that keeps simulated GPU indices from becoming devices: `(runtime, problem)`.

    `default` is the engine's default runtime and `runtimes` maps each registered runtime to
    its program (`docker info`). The NVIDIA container runtime attaches every GPU named in a
    container's NVIDIA_VISIBLE_DEVICES; when it is the default, a container with simulated
    GPUs must run with a plain runtime. `(None, None)`: the default is fine; `(None,
    problem)`: it is not, and no plain runtime is registered.
    """
    if not _nvidia(default, runtimes.get(default, "")):
        return None, None
    for name in ("runc", "io.containerd.runc.v2", *sorted(runtimes)):
        if name in runtimes and not _nvidia(name, runtimes[name]):
            return name, None
    return None, (
        f"the Docker engine's default runtime {default!r} would attach the real GPUs named in "
        f"NVIDIA_VISIBLE_DEVICES, which here are simulated ones, and it has no other runtime "
        f"(registered: {', '.join(sorted(runtimes)) or 'none'}); register runc with the engine"
    )


def _nvidia(name: str, program: str) -> bool:
    return "nvidia" in name.lower() or "nvidia" in program.lower()


def _check_confined(spec: ContainerSpec, sockets: tuple[Path, ...]) -> None:
    """Refuse a spec that would let the container out: another namespace's network, or a bind
    mount of the engine's socket or of a directory holding it (a read-only mount of a socket
    still lets the container connect to it)."""
    if spec.network in ("host", "none", "bridge") or spec.network.startswith("container:"):
        raise EngineError(
            f"container {spec.name}: network {spec.network!r} refused; an instance runs on its "
            "job's own network only"
        )
    for mount in spec.mounts:
        if mount.volume:
            continue
        source = Path(os.path.realpath(mount.source))
        for socket_path in sockets:
            if socket_path == source or socket_path.is_relative_to(source):
                raise EngineError(
                    f"container {spec.name}: mounting {mount.source} at {mount.target} refused: "
                    f"it exposes the Docker engine's socket {socket_path}"
                )


def _start_error(name: str, explanation: str) -> EngineError:
    """Why a container did not start; a host port taken meanwhile says which port."""
    taken = _PORT_TAKEN.search(explanation)
    if taken is None:
        return EngineError(f"cannot start container {name}: {explanation}")
    port = int(taken.group(1))
    return PortTaken(
        f"cannot start container {name}: host port {port} was taken by another program after "
        f"it was checked free ({explanation})",
        port,
    )


def _label_filter(labels: dict[str, str]) -> list[str]:
    return [MANAGED + "=1", *(f"{k}={v}" for k, v in labels.items())]


def _explain(exc: docker.errors.APIError) -> str:
    return str(exc.explanation or exc)


def _time(value: str | None) -> datetime | None:
    if not value or value.startswith("0001-"):
        return None
    # Docker gives nanoseconds; Python parses microseconds.
    head, _, rest = value.partition(".")
    fraction = "".join(ch for ch in rest if ch.isdigit())[:6]
    text = f"{head}.{fraction or '0'}+00:00" if value.endswith("Z") else value
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _info(attrs: dict[str, Any]) -> ContainerInfo:
    state = attrs.get("State") or {}
    networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
    ip = next((n.get("IPAddress") for n in networks.values() if n.get("IPAddress")), None)
    status = state.get("Status", "unknown")
    return ContainerInfo(
        id=attrs["Id"],
        name=attrs.get("Name", "").lstrip("/"),
        labels=(attrs.get("Config") or {}).get("Labels") or {},
        status=status,
        exit_code=state.get("ExitCode") if status in ("exited", "dead") else None,
        oom_killed=bool(state.get("OOMKilled")),
        error=state.get("Error") or "",
        started_at=_time(state.get("StartedAt")),
        finished_at=_time(state.get("FinishedAt")),
        ip=ip,
    )


def _event(raw: dict[str, Any]) -> ContainerEvent | None:
    action = str(raw.get("Action") or raw.get("status") or "")
    if action not in ("start", "die", "oom", "destroy"):
        return None
    actor = raw.get("Actor") or {}
    attributes: dict[str, str] = dict(actor.get("Attributes") or {})
    code = attributes.get("exitCode")
    nanos = raw.get("timeNano")
    at = datetime.fromtimestamp(nanos / 1e9, UTC) if nanos else datetime.now(UTC)
    return ContainerEvent(
        action=action,
        id=str(actor.get("ID") or raw.get("id") or ""),
        labels={k: v for k, v in attributes.items() if k.startswith(LABEL)},
        exit_code=int(code) if code is not None and code.lstrip("-").isdigit() else None,
        at=at,
    )
