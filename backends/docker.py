"""The Backend on the local cluster simulator: one Docker container per task instance.

Placement, ports and prerequisites come from `simulator/`; this module turns a LaunchRequest
into containers on a network of the attempt, watches Docker's event stream, and reports facts
as InstanceEvents. Everything an attempt needs to be found again after a restart lives under
the state directory (`attempts/<job>/<attempt>/`): the launch request, each instance's runtime
files, its log and, once it ended, its exit record. Containers and networks are removed as soon
as they are no longer needed; logs and exit records stay until the attempt is forgotten.

Without gang allocation one ended instance can be started again on its own (`relaunch`): it is
placed alone, keeps its address (and its ports when they are free) so the environment its
peers started with stays true, and each run's container carries its run number, so events of
an earlier run are never taken for the current one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import socket
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from backends.base import (
    BackendError,
    EventKind,
    Fetch,
    InstanceEvent,
    InstanceKey,
    InstanceReport,
    InstanceStatus,
    LaunchRefused,
    LaunchRequest,
    LogChunk,
    Placement,
    RoleLaunch,
    UnknownInstance,
    utcnow,
)
from backends.entrypoint import ENTRYPOINT, MARKER, RUNTIME_DIR, WORK_DIR, entrypoint_script
from backends.runtime_env import port_requests, runtime_env, shell_env_file
from simulator.cluster import Cluster, Demand, NeverFits, Placed, Shortage, Slot
from simulator.containers import (
    LABEL,
    OWNER,
    BindMount,
    ContainerEvent,
    ContainerSpec,
    Engine,
    EngineError,
    ImageMissing,
)
from simulator.ports import PortAllocator, PortAsk, PortError
from simulator.prereqs import MaterialError, MaterialKind, MaterialStore, UnservableMaterial
from simulator.settings import SimulatorSettings, load_settings

JOB = f"{LABEL}.job"
ATTEMPT = f"{LABEL}.attempt"
ROLE = f"{LABEL}.role"
INDEX = f"{LABEL}.index"
NODE = f"{LABEL}.node"
PORTS = f"{LABEL}.ports"
GPUS = f"{LABEL}.gpus"
RUN = f"{LABEL}.run"  # 1, then 2, 3 ... for each time the instance is started again

_FETCH_KIND = {
    Fetch.DOWNLOAD: MaterialKind.DOWNLOAD,
    Fetch.CLONE: MaterialKind.CLONE,
    Fetch.MOUNT: MaterialKind.MOUNT,
}
_POLL_SECONDS = 0.2
_PARALLEL_STARTS = 16


def run_owner() -> str:
    """The owner label of a foreground `paigraph run`: host and pid, so leftovers can be told."""
    return f"run-{socket.gethostname()}-{os.getpid()}"


def _safe(text: str) -> str:
    """A Docker-name-safe rendering of a user's name, unique through a short hash."""
    cleaned = re.sub(r"[^a-zA-Z0-9_.-]", "", text)[:40] or "x"
    if cleaned == text:
        return cleaned
    return f"{cleaned}-{hashlib.sha1(text.encode()).hexdigest()[:6]}"


@dataclass(eq=False)  # compared by identity: the relaunch queue holds these
class _Instance:
    key: InstanceKey
    dir: Path
    container_id: str | None = None
    placement: Placement | None = None
    ended: bool = False
    started_at: datetime | None = None
    run: int = 1  # how many times it was started; relaunch adds one
    waiting_reason: str | None = None  # why a relaunch waits, told once per change

    @property
    def relaunch_file(self) -> Path:
        """Its run number, and whether that run still waits to be placed (read on adoption)."""
        return self.dir / "relaunch.json"


@dataclass
class _Attempt:
    request: LaunchRequest
    dir: Path
    instances: dict[tuple[str, int], _Instance] = field(default_factory=dict)
    network: str | None = None
    addresses: list[str] = field(default_factory=list)  # the network's, in the gang's order
    network_lock: threading.Lock = field(default_factory=threading.Lock)
    placed: bool = False
    stopping: bool = False
    forgotten: bool = False
    waiting_reason: str | None = None

    @property
    def id(self) -> str:
        return f"{self.request.job_id}#{self.request.attempt}"

    def all_ended(self) -> bool:
        return all(i.ended for i in self.instances.values())


class DockerBackend:
    """The simulator backend. Create it, `await start()`, then use the Backend methods."""

    def __init__(
        self,
        settings: SimulatorSettings | None = None,
        *,
        owner: str = "server",
        engine: Engine | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings or load_settings()
        self.owner = owner
        self.engine = engine or Engine()
        self.progress = progress or (lambda message: None)
        state = Path(self.settings.state_dir)
        # one folder per owner: a server and a `paigraph run` sharing the state dir never
        # adopt (or declare lost) each other's attempts
        self.attempts_dir = state / "attempts" / _safe(owner)
        self.attempts_dir.mkdir(parents=True, exist_ok=True)
        self.cluster = Cluster(self.settings)
        self.ports = PortAllocator(
            self.settings.port_range.start,
            self.settings.port_range.end,
            state_file=self.settings.port_state_file,
        )
        self.materials = MaterialStore(
            state / "cache",
            allowed_file_roots=self.settings.allowed_file_roots,
            storage_dir=state / "storage",
        )
        self.host_cpus, self.host_memory_mb = self.engine.host_capacity()
        self._lock = threading.RLock()
        self._attempts: dict[str, _Attempt] = {}
        self._queue: list[str] = []  # attempt ids waiting for capacity, in arrival order
        self._relaunches: list[_Instance] = []  # instances to start again, in arrival order
        self._by_container: dict[str, _Instance] = {}
        # control work (placing, finishing) and Docker calls get separate pools, so a task of
        # the first never waits for a worker of its own pool
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sim")
        self._docker_pool = ThreadPoolExecutor(
            max_workers=_PARALLEL_STARTS, thread_name_prefix="sim-docker"
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: asyncio.Queue[InstanceEvent] | None = None
        self._unwatch: Callable[[], None] | None = None
        self._scheduling = threading.Lock()

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Watch Docker, adopt what this owner left running, and remove what belongs to no one."""
        self._loop = asyncio.get_running_loop()
        self._events = asyncio.Queue()
        self._unwatch = self.engine.watch({OWNER: self.owner}, self._on_container_event)
        await asyncio.to_thread(self._adopt)

    async def close(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._docker_pool.shutdown(wait=False, cancel_futures=True)

    # --- Backend -----------------------------------------------------------------------------

    async def launch(self, request: LaunchRequest) -> None:
        await asyncio.to_thread(self._launch, request)

    async def stop(self, job_id: str, attempt: int, grace_seconds: float | None = None) -> None:
        grace = self.settings.stop_grace_seconds if grace_seconds is None else grace_seconds
        await asyncio.to_thread(self._stop, f"{job_id}#{attempt}", grace)

    async def events(self) -> AsyncIterator[InstanceEvent]:  # type: ignore[override]
        assert self._events is not None, "call start() first"
        while True:
            yield await self._events.get()

    async def logs(
        self,
        key: InstanceKey,
        *,
        offset: int = 0,
        tail: int | None = None,
        follow: bool = False,
    ) -> AsyncIterator[LogChunk]:
        path = self._instance_dir(key) / "output.log"
        if not path.parent.is_dir():
            raise UnknownInstance(f"no instance {key.role}-{key.index} in attempt {key.attempt}")
        if tail is not None:
            offset = await asyncio.to_thread(_tail_offset, path, tail)
        while True:
            data = await asyncio.to_thread(_read_from, path, offset)
            if data:
                yield LogChunk(key=key, offset=offset, data=data.decode("utf-8", "replace"))
                offset += len(data)
                continue
            if not follow or self._instance_ended(key):
                # one last read: output written just before the end
                data = await asyncio.to_thread(_read_from, path, offset)
                if data:
                    yield LogChunk(key=key, offset=offset, data=data.decode("utf-8", "replace"))
                return
            await asyncio.sleep(_POLL_SECONDS)

    async def relaunch(self, key: InstanceKey) -> None:
        await asyncio.to_thread(self._relaunch, key)

    async def reconcile(self) -> list[InstanceReport]:
        return await asyncio.to_thread(self._reports)

    async def forget(self, job_id: str, attempt: int) -> None:
        await asyncio.to_thread(self._forget, f"{job_id}#{attempt}")

    # --- launching ---------------------------------------------------------------------------

    def _launch(self, request: LaunchRequest) -> None:
        attempt_id = f"{request.job_id}#{request.attempt}"
        demands = [_demand(role) for role, _ in _order(request)]
        never = self.cluster.never_fits(request.virtual_cluster, demands)
        if never:
            raise LaunchRefused(never)
        for role in request.roles:
            for material in role.materials:
                try:
                    self.materials.check(material.name, _FETCH_KIND[material.kind], material.uris)
                except UnservableMaterial as exc:
                    raise LaunchRefused(str(exc)) from None
        directory = self.attempts_dir / _safe(request.job_id) / str(request.attempt)
        attempt = _Attempt(request=request, dir=directory)
        for role in request.roles:
            for index in range(role.instances):
                key = InstanceKey(
                    job_id=request.job_id, attempt=request.attempt, role=role.name, index=index
                )
                attempt.instances[(role.name, index)] = _Instance(
                    key=key, dir=directory / f"{_safe(role.name)}-{index}"
                )
        with self._lock:
            if attempt_id in self._attempts:
                raise LaunchRefused(f"attempt {request.attempt} of job {request.job_id} exists")
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "launch.json").write_text(
                request.model_dump_json(exclude={"secrets"}), encoding="utf-8"
            )
            self._attempts[attempt_id] = attempt
        missing = sorted({r.image for r in request.roles if not self._image_ready(r.image)})
        if missing:
            reason = (
                f"image {missing[0]!r} is not on this machine and the simulator does not pull "
                "images (build it locally, e.g. with docker build or docker import)"
            )
            for instance in attempt.instances.values():
                self._end(attempt, instance, EventKind.START_FAILED, reason=reason)
            return
        with self._lock:
            self._queue.append(attempt_id)
        self._schedule()

    def _image_ready(self, image: str) -> bool:
        if self.engine.image_exists(image):
            return True
        if self.settings.image_pull:
            with contextlib.suppress(Exception):
                self.progress(f"pulling image {image}")
                self.engine.client.images.pull(image)
                return True
        return False

    def _schedule(self) -> None:
        """Place every queued attempt that fits now, in arrival order (gang: all or none).

        Instances to start again come first: their attempts already run, and a peer waiting
        for them holds resources that a new attempt would only wait for as well.
        """
        with self._scheduling:
            while True:
                placed_any = False
                with self._lock:
                    relaunches = list(self._relaunches)
                    queued = list(self._queue)
                for instance in relaunches:
                    if self._try_relaunch(instance):
                        placed_any = True
                for attempt_id in queued:
                    attempt = self._attempts.get(attempt_id)
                    if attempt is None or attempt.stopping:
                        continue
                    if self._try_place(attempt):
                        placed_any = True
                if not placed_any:
                    return

    def _try_place(self, attempt: _Attempt) -> bool:
        request = attempt.request
        order = _order(request)
        demands = [_demand(role) for role, _ in order]
        try:
            result = self.cluster.place(attempt.id, request.virtual_cluster, demands)
        except NeverFits as exc:
            with self._lock:
                self._queue.remove(attempt.id)
            for instance in attempt.instances.values():
                self._end(attempt, instance, EventKind.START_FAILED, reason=exc.reason)
            return False
        if isinstance(result, Shortage):
            self._wait(attempt, result.reason)
            return False
        asks = [
            (f"{attempt.id}/{role.name}/{index}", _port_asks(role, index)) for role, index in order
        ]
        try:
            allocated = self.ports.allocate_many(asks)
        except PortError as exc:
            self.cluster.release(attempt.id)
            self._wait(attempt, f"waiting for ports: {exc}")
            return False
        with self._lock:
            self._queue.remove(attempt.id)
            attempt.placed = True
            attempt.waiting_reason = None
        slots = {(role.name, index): result.slots[n] for n, (role, index) in enumerate(order)}
        ports = {(role.name, index): allocated[n] for n, (role, index) in enumerate(order)}
        self._pool.submit(self._start_attempt, attempt, slots, ports)
        return True

    def _wait(self, attempt: _Attempt, reason: str) -> None:
        if attempt.waiting_reason == reason:
            return
        attempt.waiting_reason = reason
        self._emit(
            InstanceEvent(
                job_id=attempt.request.job_id,
                attempt=attempt.request.attempt,
                kind=EventKind.WAITING,
                reason=reason,
            )
        )

    def _start_attempt(
        self,
        attempt: _Attempt,
        slots: dict[tuple[str, int], Slot],
        ports: dict[tuple[str, int], dict[str, list[int]]],
    ) -> None:
        """Fetch prerequisites, make the network, then start every container in parallel."""
        request = attempt.request
        order = _order(request)
        try:
            mounts = self._materialize(request)
            network = self.engine.create_network(
                f"pai-{_safe(request.job_id)}-{request.attempt}-{os.urandom(3).hex()}",
                {OWNER: self.owner, JOB: request.job_id, ATTEMPT: str(request.attempt)},
                len(order),
            )
            addresses = network.addresses(len(order))
        except (EngineError, MaterialError, OSError) as exc:
            for instance in attempt.instances.values():
                self._end(attempt, instance, EventKind.START_FAILED, reason=str(exc))
            return
        self._use_network(attempt, network.name, addresses)
        placements = {
            (role.name, index): Placement(
                node=slots[(role.name, index)].node,
                host_ip=addresses[n],
                ports=ports[(role.name, index)],
            )
            for n, (role, index) in enumerate(order)
        }
        notes = self._clipping_notes(request)
        specs = []
        for role, index in order:
            instance = attempt.instances[(role.name, index)]
            instance.placement = placements[(role.name, index)]
            env = runtime_env(request, placements, role.name, index)
            instance.dir.mkdir(parents=True, exist_ok=True)
            (instance.dir / "runtime_env.sh").write_text(shell_env_file(env), encoding="utf-8")
            (instance.dir / "entrypoint.sh").write_text(entrypoint_script(role), encoding="utf-8")
            (instance.dir / "output.log").touch()
            slot = slots[(role.name, index)]
            spec = self._container_spec(attempt, role, index, env, network.name, mounts, slot)
            specs.append((instance, spec))
            self._emit(
                self._event(
                    instance,
                    EventKind.PLACED,
                    reason=notes.get(role.name),
                    placement=instance.placement,
                )
            )
        list(self._docker_pool.map(lambda pair: self._run_container(attempt, *pair), specs))
        # every container may have failed to start: then the network is not needed any more
        self._cleanup_if_done(attempt)

    def _run_container(self, attempt: _Attempt, instance: _Instance, spec: ContainerSpec) -> None:
        if attempt.stopping:
            self._end(attempt, instance, EventKind.STOPPED, reason="stopped before it started")
            return
        try:
            container_id = self.engine.run(spec)
        except ImageMissing as exc:
            self._end(attempt, instance, EventKind.START_FAILED, reason=str(exc))
            return
        except EngineError as exc:
            self._end(attempt, instance, EventKind.START_FAILED, reason=str(exc))
            return
        with self._lock:
            instance.container_id = container_id
            self._by_container[container_id] = instance
        if attempt.forgotten:
            self.engine.remove(container_id)
        elif attempt.stopping:
            self.engine.stop(container_id, 0)

    def _use_network(self, attempt: _Attempt, name: str, addresses: list[str]) -> None:
        """Record the attempt's network and its addresses (on disk too: a relaunch after a
        restart gives an instance its address on this network)."""
        with self._lock:
            attempt.network, attempt.addresses = name, addresses
        (attempt.dir / "network.json").write_text(
            json.dumps({"name": name, "addresses": addresses}), encoding="utf-8"
        )

    def _container_spec(
        self,
        attempt: _Attempt,
        role: RoleLaunch,
        index: int,
        env: dict[str, str],
        network: str,
        mounts: dict[tuple[str, str], BindMount],
        slot: Slot,
    ) -> ContainerSpec:
        instance = attempt.instances[(role.name, index)]
        request = attempt.request
        placement = instance.placement
        assert placement is not None
        all_ports = [p for label_ports in placement.ports.values() for p in label_ports]
        aliases = [f"{role.name}-{index}"]
        if _safe(role.name) != role.name:
            aliases.append(f"{_safe(role.name)}-{index}")
        name = f"pai-{_safe(request.job_id)}-{request.attempt}-{_safe(role.name)}-{index}"
        return ContainerSpec(
            # each run its own name: the container of the run before may not be removed yet
            name=name if instance.run == 1 else f"{name}-run{instance.run}",
            image=role.image,
            command=["/bin/sh", ENTRYPOINT],
            network=network,
            ip=placement.host_ip,
            aliases=aliases,
            labels={
                OWNER: self.owner,
                JOB: request.job_id,
                ATTEMPT: str(request.attempt),
                ROLE: role.name,
                INDEX: str(index),
                NODE: placement.node,
                PORTS: json.dumps(placement.ports),
                GPUS: json.dumps(list(slot.gpus)),
                RUN: str(instance.run),
            },
            env=env,
            ports=all_ports,
            memory_mb=min(role.resources.memory_mb, self.host_memory_mb),
            cpus=float(min(role.resources.cpu, self.host_cpus)),
            shm_mb=max(1, min(role.resources.shm_mb, role.resources.memory_mb)),
            pids_limit=self.settings.pids_limit,
            mounts=[
                BindMount(str(instance.dir), RUNTIME_DIR),
                *(mounts.get((role.name, m.name)) for m in role.materials),
            ],
            working_dir=WORK_DIR,
            gpu_devices=(
                [str(g) for g in slot.gpus] if self.cluster.node(slot.node).real_gpus else []
            ),
        )

    def _materialize(
        self, request: LaunchRequest, roles: list[RoleLaunch] | None = None
    ) -> dict[tuple[str, str], BindMount]:
        mounts: dict[tuple[str, str], BindMount] = {}
        for role in request.roles if roles is None else roles:
            for material in role.materials:
                mount = self.materials.materialize(
                    material.name,
                    _FETCH_KIND[material.kind],
                    material.uris,
                    progress=lambda _name, message: self.progress(message),
                )
                mounts[(role.name, material.name)] = BindMount(
                    str(mount.host_path),
                    f"{WORK_DIR}/{material.name}",
                    read_only=mount.read_only or material.read_only,
                )
        return mounts

    def _clipping_notes(self, request: LaunchRequest) -> dict[str, str]:
        notes = {}
        for role in request.roles:
            clipped = []
            if role.resources.cpu > self.host_cpus:
                clipped.append(f"cpu {role.resources.cpu} -> {self.host_cpus}")
            if role.resources.memory_mb > self.host_memory_mb:
                clipped.append(f"memoryMB {role.resources.memory_mb} -> {self.host_memory_mb}")
            if clipped:
                notes[role.name] = "limits clipped to this machine: " + ", ".join(clipped)
        return notes

    # --- starting one instance again ---------------------------------------------------------

    def _relaunch(self, key: InstanceKey) -> None:
        """Queue an ended instance to run again; its events start over from PLACED."""
        attempt_id = f"{key.job_id}#{key.attempt}"
        where = f"{key.role}-{key.index} of attempt {key.attempt} of job {key.job_id}"
        with self._lock:
            attempt = self._attempts.get(attempt_id)
            instance = attempt.instances.get((key.role, key.index)) if attempt else None
            if attempt is None or instance is None:
                raise UnknownInstance(f"no instance {where}")
            # the exit record is written after `ended` is set: wait for both
            if not (instance.ended and (instance.dir / "exit.json").exists()):
                raise BackendError(f"{where} has not ended; only an ended instance runs again")
            if attempt.stopping:
                raise BackendError(f"attempt {key.attempt} of job {key.job_id} is being stopped")
            (instance.dir / "exit.json").unlink()
            instance.ended = False
            instance.started_at = None
            instance.waiting_reason = None
            instance.run += 1
            old, instance.container_id = instance.container_id, None
            if old:
                self._by_container.pop(old, None)
            self._write_run(instance, queued=True)
            self._relaunches.append(instance)
        with (instance.dir / "output.log").open("a", encoding="utf-8") as log:
            log.write(
                f"{MARKER} task retry {instance.run - 1}: starting task attempt {instance.run}\n"
            )
        if old:
            self.engine.remove(old)  # its address is given to the new run
        self._schedule()

    def _write_run(self, instance: _Instance, *, queued: bool) -> None:
        placement = instance.placement.model_dump() if instance.placement else None
        record = {"run": instance.run, "queued": queued, "placement": placement}
        instance.relaunch_file.write_text(json.dumps(record), encoding="utf-8")

    def _try_relaunch(self, instance: _Instance) -> bool:
        """Place one instance to run again, alone; False while it does not fit."""
        key = instance.key
        with self._lock:
            attempt = self._attempts.get(f"{key.job_id}#{key.attempt}")
            if attempt is None or attempt.stopping or instance.ended:
                with contextlib.suppress(ValueError):
                    self._relaunches.remove(instance)
                return False
        request = attempt.request
        role = request.role(key.role)
        if any(i.placement is None for i in attempt.instances.values()):
            reason = (
                "cannot run on its own: its attempt was never placed, so its peers have no "
                "addresses; launch the attempt again instead"
            )
            self._drop_relaunch(attempt, instance, reason)
            return False
        previous = instance.placement
        assert previous is not None
        position = _position(request, key)
        try:
            result = self.cluster.place_one(
                attempt.id, request.virtual_cluster, position, _demand(role), prefer=previous.node
            )
        except NeverFits as exc:  # the settings changed since the attempt was placed
            self._drop_relaunch(attempt, instance, exc.reason)
            return False
        if isinstance(result, Shortage):
            self._wait_instance(instance, result.reason)
            return False
        owner = f"{attempt.id}/{key.role}/{key.index}"
        try:
            ports = self._ports_again(owner, role, key.index, previous)
        except PortError as exc:
            self.cluster.release_one(attempt.id, position)
            self._wait_instance(instance, f"waiting for ports: {exc}")
            return False
        with self._lock:
            stopped = attempt.stopping or instance not in self._relaunches
            if not stopped:
                self._relaunches.remove(instance)
                instance.waiting_reason = None
        if stopped:  # a stop took it off the queue meanwhile; it ends as stopped
            self.ports.release(owner)
            self.cluster.release_one(attempt.id, position)
            return False
        self._pool.submit(self._start_relaunch, attempt, instance, result, ports)
        return True

    def _ports_again(
        self, owner: str, role: RoleLaunch, index: int, previous: Placement
    ) -> dict[str, list[int]]:
        """The ports the instance had, when each label's ports are a free run; else new ones."""
        asks = _port_asks(role, index)
        again = _same_ports(asks, previous)
        if again is not None:
            with contextlib.suppress(PortError):
                return self.ports.allocate(owner, again)
        return self.ports.allocate(owner, asks)

    def _drop_relaunch(self, attempt: _Attempt, instance: _Instance, reason: str) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._relaunches.remove(instance)
        self._end(attempt, instance, EventKind.START_FAILED, reason=reason)
        self._cleanup_if_done(attempt)

    def _wait_instance(self, instance: _Instance, reason: str) -> None:
        if instance.waiting_reason == reason:
            return
        instance.waiting_reason = reason
        self._emit(self._event(instance, EventKind.WAITING, reason=reason))

    def _start_relaunch(
        self,
        attempt: _Attempt,
        instance: _Instance,
        placed: Placed,
        ports: dict[str, list[int]],
    ) -> None:
        """Start the instance's new container, on the attempt's network at its address."""
        request = attempt.request
        key = instance.key
        role = request.role(key.role)
        slot = placed.slots[0]
        try:
            mounts = self._materialize(request, [role])
            network, address = self._network_for(attempt, _position(request, key))
        except (EngineError, MaterialError, OSError) as exc:
            self._end(attempt, instance, EventKind.START_FAILED, reason=str(exc))
            self._cleanup_if_done(attempt)
            return
        instance.placement = Placement(node=slot.node, host_ip=address, ports=ports)
        placements = {
            name: peer.placement
            for name, peer in attempt.instances.items()
            if peer.placement is not None
        }
        env = runtime_env(request, placements, role.name, key.index)
        (instance.dir / "runtime_env.sh").write_text(shell_env_file(env), encoding="utf-8")
        (instance.dir / "entrypoint.sh").write_text(entrypoint_script(role), encoding="utf-8")
        spec = self._container_spec(attempt, role, key.index, env, network, mounts, slot)
        self._write_run(instance, queued=False)
        reason = self._clipping_notes(request).get(role.name)
        self._emit(
            self._event(instance, EventKind.PLACED, reason=reason, placement=instance.placement)
        )
        self._run_container(attempt, instance, spec)
        self._cleanup_if_done(attempt)

    def _network_for(self, attempt: _Attempt, position: int) -> tuple[str, str]:
        """The attempt's network and the instance's address on it; a new network when the old
        one was removed because every instance had ended (its subnet is usually free again,
        and then the address is the same)."""
        with attempt.network_lock:
            with self._lock:
                name, addresses = attempt.network, list(attempt.addresses)
            if name is not None:
                if position < len(addresses):
                    return name, addresses[position]
                # adopted without a record of its addresses: the instance's own one
                role, index = _order(attempt.request)[position]
                placement = attempt.instances[(role.name, index)].placement
                assert placement is not None
                return name, placement.host_ip
            request = attempt.request
            info = self.engine.create_network(
                f"pai-{_safe(request.job_id)}-{request.attempt}-{os.urandom(3).hex()}",
                {OWNER: self.owner, JOB: request.job_id, ATTEMPT: str(request.attempt)},
                request.total_instances,
            )
            addresses = info.addresses(request.total_instances)
            with self._lock:
                forgotten = attempt.forgotten
            if forgotten:
                with contextlib.suppress(EngineError):
                    self.engine.remove_network(info.name)
                raise EngineError(f"attempt {attempt.id} was forgotten")
            self._use_network(attempt, info.name, addresses)
            return info.name, addresses[position]

    # --- watching ----------------------------------------------------------------------------

    def _on_container_event(self, event: ContainerEvent) -> None:
        with self._lock:
            instance = self._by_container.get(event.id)
        if instance is None:
            instance = self._instance_from_labels(event.labels)
            if instance is None:
                return
        attempt = self._attempts.get(f"{instance.key.job_id}#{instance.key.attempt}")
        if attempt is None or instance.ended:
            return
        if event.labels.get(RUN, "1") != str(instance.run):
            return  # the container of an earlier run of a relaunched instance
        if event.action == "start":
            instance.started_at = event.at
            self._emit(self._event(instance, EventKind.STARTED, placement=instance.placement))
        elif event.action == "die":
            self._pool.submit(self._finish_container, attempt, instance, event.id)

    def _instance_from_labels(self, labels: dict[str, str]) -> _Instance | None:
        attempt = self._attempts.get(f"{labels.get(JOB)}#{labels.get(ATTEMPT)}")
        if attempt is None or INDEX not in labels:
            return None
        return attempt.instances.get((labels.get(ROLE, ""), int(labels[INDEX])))

    def _finish_container(self, attempt: _Attempt, instance: _Instance, container_id: str) -> None:
        info = self.engine.inspect(container_id)
        code = info.exit_code if info else None
        oom = bool(info and info.oom_killed)
        reason = None
        if info and info.error:
            reason = info.error
        elif oom:
            reason = f"killed: memory limit of {self._memory_of(attempt, instance)} MB exceeded"
        kind = EventKind.STOPPED if attempt.stopping else EventKind.EXITED
        self._end(
            attempt,
            instance,
            kind,
            exit_code=code,
            oom_killed=oom,
            reason=reason,
            at=info.finished_at if info else None,
        )
        self.engine.remove(container_id)
        with self._lock:
            self._by_container.pop(container_id, None)
        self._cleanup_if_done(attempt)

    def _memory_of(self, attempt: _Attempt, instance: _Instance) -> int:
        return attempt.request.role(instance.key.role).resources.memory_mb

    def _end(
        self,
        attempt: _Attempt,
        instance: _Instance,
        kind: EventKind,
        *,
        exit_code: int | None = None,
        oom_killed: bool = False,
        reason: str | None = None,
        at: datetime | None = None,
    ) -> None:
        """Record an instance's end once: exit record on disk, resources back, event out."""
        with self._lock:
            if instance.ended or attempt.forgotten:
                return
            instance.ended = True
        event = self._event(
            instance,
            kind,
            exit_code=exit_code,
            oom_killed=oom_killed,
            reason=reason,
            placement=instance.placement,
            at=at,
        )
        instance.dir.mkdir(parents=True, exist_ok=True)
        (instance.dir / "exit.json").write_text(event.model_dump_json(), encoding="utf-8")
        self.ports.release(f"{attempt.id}/{instance.key.role}/{instance.key.index}")
        if attempt.placed:
            self.cluster.release_one(attempt.id, _position(attempt.request, instance.key))
        self._emit(event)
        self._schedule_soon()

    def _schedule_soon(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._pool.submit(self._schedule)

    def _cleanup_if_done(self, attempt: _Attempt) -> None:
        with self._lock:  # checked under the lock: a relaunch may be bringing one back
            if not attempt.all_ended():
                return
            if attempt.id in self._queue:
                self._queue.remove(attempt.id)
            network, attempt.network = attempt.network, None
        if network:
            try:
                self.engine.remove_network(network)
            except EngineError:
                with self._lock:  # still in use a moment longer: a relaunch or forget retries
                    if attempt.network is None and not attempt.forgotten:
                        attempt.network = network

    # --- stopping ----------------------------------------------------------------------------

    def _stop(self, attempt_id: str, grace: float) -> None:
        with self._lock:
            attempt = self._attempts.get(attempt_id)
            if attempt is None:
                return
            attempt.stopping = True
            queued = attempt_id in self._queue
            if queued:
                self._queue.remove(attempt_id)
            relaunching = [i for i in self._relaunches if _attempt_of(i) == attempt_id]
            for instance in relaunching:
                self._relaunches.remove(instance)
            running = [i.container_id for i in attempt.instances.values() if i.container_id]
        if queued or not attempt.placed:
            for instance in attempt.instances.values():
                self._end(attempt, instance, EventKind.STOPPED, reason="stopped while waiting")
        for instance in relaunching:
            self._end(
                attempt, instance, EventKind.STOPPED, reason="stopped while waiting to run again"
            )
        list(self._docker_pool.map(lambda cid: self.engine.stop(cid, grace), running))

    def _forget(self, attempt_id: str) -> None:
        """Remove whatever the attempt still has (containers, network, held capacity and
        ports) at once; its logs and exit records stay on disk."""
        with self._lock:
            attempt = self._attempts.pop(attempt_id, None)
            if attempt is None:
                return
            attempt.forgotten = True
            if attempt_id in self._queue:
                self._queue.remove(attempt_id)
            self._relaunches = [i for i in self._relaunches if _attempt_of(i) != attempt_id]
            network, attempt.network = attempt.network, None
        for instance in attempt.instances.values():
            if instance.container_id:
                self.engine.remove(instance.container_id)
                with self._lock:
                    self._by_container.pop(instance.container_id, None)
            self.ports.release(f"{attempt.id}/{instance.key.role}/{instance.key.index}")
        self.cluster.release(attempt.id)
        if network:
            with contextlib.suppress(EngineError):
                self.engine.remove_network(network)
        with contextlib.suppress(FileNotFoundError):
            (attempt.dir / "launch.json").unlink()
        self._schedule_soon()

    # --- after a restart ---------------------------------------------------------------------

    def _adopt(self) -> None:
        """Take back this owner's attempts; remove containers and networks nobody owns."""
        self._remove_leftovers_of_dead_runs()
        containers = self.engine.containers({OWNER: self.owner})
        requeue: list[_Instance] = []  # relaunched, still waiting to be placed
        recorded: dict[str, tuple[str, list[str]]] = {}  # attempt -> its network's addresses
        for launch in sorted(self.attempts_dir.glob("*/*/launch.json")):
            request = LaunchRequest.model_validate_json(launch.read_text(encoding="utf-8"))
            attempt = _Attempt(request=request, dir=launch.parent, placed=True)
            for role in request.roles:
                for index in range(role.instances):
                    key = InstanceKey(
                        job_id=request.job_id, attempt=request.attempt, role=role.name, index=index
                    )
                    instance = _Instance(key=key, dir=launch.parent / f"{_safe(role.name)}-{index}")
                    if instance.relaunch_file.exists():
                        run = json.loads(instance.relaunch_file.read_text("utf-8"))
                        instance.run = run["run"]
                        if run["placement"] is not None:
                            instance.placement = Placement.model_validate(run["placement"])
                        if run["queued"]:
                            requeue.append(instance)
                    record = instance.dir / "exit.json"
                    if record.exists():
                        instance.ended = True
                        event = InstanceEvent.model_validate_json(record.read_text("utf-8"))
                        instance.placement = event.placement
                    attempt.instances[(role.name, index)] = instance
            self._attempts[attempt.id] = attempt
            with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
                network = json.loads((attempt.dir / "network.json").read_text("utf-8"))
                recorded[attempt.id] = (network["name"], network["addresses"])
        held: dict[str, list[tuple[str, Demand, tuple[int, ...]] | None]] = {}
        for info in containers:
            instance = self._instance_from_labels(info.labels)
            if instance is None or info.labels.get(RUN, "1") != str(instance.run):
                # an orphan: no attempt on record owns it, or a run that was replaced
                self.engine.remove(info.id)
                continue
            attempt = self._attempts[f"{instance.key.job_id}#{instance.key.attempt}"]
            ports = json.loads(info.labels.get(PORTS, "{}"))
            node = info.labels.get(NODE, "")
            instance.container_id = info.id
            instance.placement = Placement(node=node, host_ip=info.ip or "", ports=ports)
            instance.started_at = info.started_at
            self._by_container[info.id] = instance
            if info.status == "running":
                self.ports.adopt(
                    f"{attempt.id}/{instance.key.role}/{instance.key.index}",
                    [p for group in ports.values() for p in group],
                )
                slots = held.setdefault(attempt.id, [None] * attempt.request.total_instances)
                gpus = tuple(json.loads(info.labels.get(GPUS, "[]")))
                role = attempt.request.role(instance.key.role)
                slots[_position(attempt.request, instance.key)] = (node, _demand(role), gpus)
            else:
                self._finish_container(attempt, instance, info.id)
        for attempt_id, slots in held.items():
            attempt = self._attempts[attempt_id]
            self.cluster.adopt(attempt_id, attempt.request.virtual_cluster, slots)
        self._relaunches.extend(i for i in requeue if not i.ended and i.container_id is None)
        for attempt in self._attempts.values():
            for instance in attempt.instances.values():
                if (
                    not instance.ended
                    and instance.container_id is None
                    and instance not in self._relaunches
                ):
                    self._end(attempt, instance, EventKind.LOST, reason="its container is gone")
        for name, labels in self.engine.networks({OWNER: self.owner}):
            attempt = self._attempts.get(f"{labels.get(JOB)}#{labels.get(ATTEMPT)}")
            if attempt is None or attempt.all_ended():
                with contextlib.suppress(EngineError):
                    self.engine.remove_network(name)
            else:
                attempt.network = name
                known, addresses = recorded.get(attempt.id, ("", []))
                attempt.addresses = addresses if known == name else []
        if self._relaunches:
            self._schedule()

    def _remove_leftovers_of_dead_runs(self) -> None:
        """Containers of a `paigraph run` whose process is gone (killed, machine rebooted)."""
        host = socket.gethostname()
        for info in self.engine.containers({}):
            owner = info.labels.get(OWNER, "")
            match = re.fullmatch(rf"run-{re.escape(host)}-(\d+)", owner)
            if match and owner != self.owner and not _pid_alive(int(match.group(1))):
                self.engine.remove(info.id)
        for name, labels in self.engine.networks({}):
            owner = labels.get(OWNER, "")
            match = re.fullmatch(rf"run-{re.escape(host)}-(\d+)", owner)
            if match and owner != self.owner and not _pid_alive(int(match.group(1))):
                with contextlib.suppress(EngineError):
                    self.engine.remove_network(name)

    def _reports(self) -> list[InstanceReport]:
        reports = []
        with self._lock:
            attempts = list(self._attempts.values())
        for attempt in attempts:
            for instance in attempt.instances.values():
                record = instance.dir / "exit.json"
                if instance.ended and record.exists():
                    event = InstanceEvent.model_validate_json(record.read_text("utf-8"))
                    reports.append(
                        InstanceReport(
                            key=instance.key,
                            status=InstanceStatus.EXITED,
                            placement=event.placement,
                            exit_code=event.exit_code,
                            oom_killed=event.oom_killed,
                            started_at=instance.started_at,
                            finished_at=event.at,
                        )
                    )
                elif not instance.ended:
                    reports.append(
                        InstanceReport(
                            key=instance.key,
                            status=(
                                InstanceStatus.RUNNING
                                if instance.started_at
                                else InstanceStatus.PENDING
                            ),
                            placement=instance.placement,
                            started_at=instance.started_at,
                        )
                    )
        return reports

    # --- small parts -------------------------------------------------------------------------

    def _instance_dir(self, key: InstanceKey) -> Path:
        return (
            self.attempts_dir
            / _safe(key.job_id)
            / str(key.attempt)
            / f"{_safe(key.role)}-{key.index}"
        )

    def _instance_ended(self, key: InstanceKey) -> bool:
        return (self._instance_dir(key) / "exit.json").exists()

    def _event(self, instance: _Instance, kind: EventKind, **fields) -> InstanceEvent:
        if fields.get("at") is None:
            fields["at"] = utcnow()
        return InstanceEvent(
            job_id=instance.key.job_id,
            attempt=instance.key.attempt,
            role=instance.key.role,
            index=instance.key.index,
            kind=kind,
            **fields,
        )

    def _emit(self, event: InstanceEvent) -> None:
        if self._loop is None or self._events is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closing
            self._loop.call_soon_threadsafe(self._events.put_nowait, event)


def _attempt_of(instance: _Instance) -> str:
    return f"{instance.key.job_id}#{instance.key.attempt}"


def _order(request: LaunchRequest) -> list[tuple[RoleLaunch, int]]:
    """Every instance of the attempt, roles in order, indexes ascending: the gang's order."""
    return [(role, index) for role in request.roles for index in range(role.instances)]


def _position(request: LaunchRequest, key: InstanceKey) -> int:
    """The instance's place in the gang's order."""
    position = 0
    for role in request.roles:
        if role.name == key.role:
            return position + key.index
        position += role.instances
    raise KeyError(key.role)


def _demand(role: RoleLaunch) -> Demand:
    return Demand(role.resources.cpu, role.resources.memory_mb, role.resources.gpu)


def _port_asks(role: RoleLaunch, index: int) -> list[PortAsk]:
    """The instance's ports. Every instance shares this one host, so a fixed `beginAt` range
    is laid out per instance, instance i starting at beginAt + i * count (OpenPAI's
    sequential scheme); without beginAt the allocator picks free ports."""
    return [
        PortAsk(p.label, p.count, p.begin_at + index * p.count if p.begin_at else 0)
        for p in port_requests(role)
    ]


def _same_ports(asks: list[PortAsk], previous: Placement) -> list[PortAsk] | None:
    """Asks for exactly the ports an instance had, or None when a label's ports were not one
    consecutive run (an ask names a first port and a count)."""
    again = []
    for ask in asks:
        had = previous.ports.get(ask.label, [])
        if len(had) != ask.count:
            return None
        if had and had != list(range(had[0], had[0] + ask.count)):
            return None
        again.append(ask._replace(begin_at=had[0]) if had else ask)
    return again


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_from(path: Path, offset: int, limit: int = 1 << 16) -> bytes:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read(limit)
    except FileNotFoundError:
        return b""


def _tail_offset(path: Path, lines: int) -> int:
    """The byte offset where the last `lines` lines of the file begin."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    if lines <= 0:
        return len(data)
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    position = end
    for _ in range(lines):
        position = data.rfind(b"\n", 0, position)
        if position < 0:
            return 0
    return position + 1
