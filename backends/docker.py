"""The Backend on the local cluster simulator: one Docker container per task instance.

Placement, ports and prerequisites come from `simulator/`; this module turns a LaunchRequest
into containers on a network of the attempt, watches Docker's event stream, and reports facts
as InstanceEvents. Everything an attempt needs to be found again after a restart lives under
the state directory (`attempts/<owner>/<job>/<attempt>/`, laid out in docker_records).
Containers and networks are removed as soon as they are no longer needed; logs and exit
records stay until the attempt is forgotten.

Without gang allocation one ended instance can be started again on its own (`relaunch`): it is
placed alone, keeps its address (and its ports when they are free) so the environment its
peers started with stays true, and each run's container carries its run number, so events of
an earlier run are never taken for the current one.

Docker publishes a container's ports only when it starts it, and another program (another
paigraph with its own port table, a test run beside this one) may take a port after the
allocator found it free. The gang's containers therefore wait at a gate (docker_specs.GATE)
until every one of them has started: when a port was lost, the whole gang is started again
with fresh ports for the instances that lost one, so every peer's environment names the ports
each really has and no command ran twice. The alternative, starting only the one container
again, would leave its peers with an environment naming a port it does not have.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from backends import docker_pull, start_gate
from backends import docker_records as records
from backends.base import (
    BackendError,
    BackendHealth,
    EventKind,
    Fetch,
    InstanceEvent,
    InstanceKey,
    InstanceReport,
    InstanceStatus,
    LaunchNote,
    LaunchRefused,
    LaunchRequest,
    Material,
    Placement,
    ReadinessCheck,
    RoleLaunch,
    StartDependency,
    UnknownInstance,
    utcnow,
)
from backends.docker_attempts import (
    Attempt,
    Instance,
    attempt_id,
    demand,
    gang_order,
    gang_position,
    port_asks,
    recorded_attempt,
    same_ports,
)
from backends.docker_exec import DockerExecSession
from backends.docker_specs import (
    ATTEMPT,
    GPUS,
    INDEX,
    JOB,
    NODE,
    PORTS,
    ROLE,
    RUN,
    TASK_ATTEMPT,
    HostLimits,
    attempt_labels,
    container_spec,
    gpu_env,
    left_by_dead_run,
    network_name,
    run_owner,
    safe,
    simulated_gpu_note,
)
from backends.docker_usage import DockerUsage, Watched, usage_method
from backends.entrypoint import WORK_DIR
from backends.hdfs_standin import DFS_DIR, standin_tools
from backends.instance_exec import ExecRequest
from backends.runtime_env import runtime_env
from backends.secrets_env import secret_environment, with_secret_variables
from backends.ssh_access import ssh_files
from backends.threaded import LogSource, ThreadedBackend
from backends.usage import UsageSample
from simulator.cluster import Cluster, Demand, Placed, Slot
from simulator.containers import (
    OWNER,
    BindMount,
    ContainerEvent,
    ContainerInfo,
    ContainerSpec,
    Engine,
    EngineError,
    EngineUnreachable,
    NetworkInfo,
    PortTaken,
)
from simulator.dfs import FileSystems, authority_of
from simulator.engine_watch import EngineWatch
from simulator.ports import PortAllocator, PortError
from simulator.prereqs import (
    MaterialError,
    MaterialKind,
    MaterialStore,
    Mount,
    Simulated,
    UnservableMaterial,
    check_storage,
)
from simulator.scheduler import (
    DropInstance,
    GangAsk,
    RefuseGang,
    Scheduler,
    SoloAsk,
    WaitGang,
    WaitInstance,
)
from simulator.settings import SimulatorSettings, load_settings
from simulator.state_lock import StateDirInUse, StateLock, hold_state_dir

__all__ = ["DockerBackend", "run_owner"]

log = logging.getLogger(__name__)

_FETCH_KIND = {
    Fetch.DOWNLOAD: MaterialKind.DOWNLOAD,
    Fetch.CLONE: MaterialKind.CLONE,
    Fetch.MOUNT: MaterialKind.MOUNT,
}
_PARALLEL_STARTS = 16
_PORT_TRIES = 3  # starts of a gang (or a relaunch) whose ports other programs keep taking
_LOG_CHECK_SECONDS = 2.0  # how often running instances' logs are kept within their limit


class DockerBackend(ThreadedBackend):
    """The simulator backend. Create it, `await start()`, then use the Backend methods."""

    def __init__(
        self,
        settings: SimulatorSettings | None = None,
        *,
        owner: str = "server",
        engine: Engine | None = None,
        progress: Callable[[str], None] | None = None,
        exclusive: str | None = None,
    ) -> None:
        """`exclusive` (what this process serves, e.g. its address) makes this backend the
        only server on its state directory until it is closed (simulator/state_lock.py); a
        second one is refused with a BackendError naming the first."""
        super().__init__()
        self.settings = settings or load_settings()
        self.owner = owner
        state = Path(self.settings.state_dir)
        self._state_lock: StateLock | None = None
        if exclusive is not None:
            try:
                self._state_lock = hold_state_dir(state, exclusive)
            except StateDirInUse as exc:
                raise BackendError(str(exc)) from None
        try:
            self._set_up(engine, progress, state)
        except BaseException:
            self._release_state()
            raise

    def _set_up(
        self, engine: Engine | None, progress: Callable[[str], None] | None, state: Path
    ) -> None:
        """Everything the constructor makes once the state directory is this backend's."""
        self.engine = engine or Engine()
        self.progress = progress or (lambda message: None)
        # one folder per owner: a server and a `paigraph run` sharing the state dir never
        # adopt (or declare lost) each other's attempts
        self.attempts_dir = state / "attempts" / safe(self.owner)
        self.attempts_dir.mkdir(parents=True, exist_ok=True)
        self.cluster = Cluster(self.settings)
        self.ports = PortAllocator(
            self.settings.port_range.start,
            self.settings.port_range.end,
            state_file=self.settings.port_state_file,
        )
        # every hdfs:// a job names, and PAI_DEFAULT_FS_URI, is simulated under dfs/
        self.file_systems = FileSystems(
            state / "dfs",
            default_authority=authority_of(self.settings.default_fs_uri),
            max_bytes=self.settings.dfs_max_mb << 20,
        )
        self.materials = MaterialStore(
            state / "cache",
            allowed_file_roots=self.settings.allowed_file_roots,
            storage_dir=state / "storage",
            protected=[state],
            engine_sockets=self.engine.sockets(),
            fetch_policy=self.settings.fetch_policy,
            dfs=self.file_systems,
            node_dir=state / "nodes",
            mirrors=self.settings.fetch_mirrors,
        )
        self.host_cpus, self.host_memory_mb = self.engine.host_capacity()
        self._host = HostLimits(self.host_cpus, self.host_memory_mb, self.settings.pids_limit)
        self._lock = threading.RLock()
        self._attempts: dict[str, Attempt] = {}
        self._scheduler: Scheduler[Instance] = Scheduler(self.cluster, self.ports, self._lock)
        self._by_container: dict[str, Instance] = {}
        # control work (placing, finishing) and Docker calls get separate pools, so a task of
        # the first never waits for a worker of its own pool
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sim")
        self._docker_pool = ThreadPoolExecutor(
            max_workers=_PARALLEL_STARTS, thread_name_prefix="sim-docker"
        )
        self._watch: EngineWatch | None = None
        self._closed = threading.Event()
        # how running containers are measured (backends.docker_usage); bench/sampling.py
        # puts another in its place to compare the ways
        self.usage_meter = DockerUsage(self.engine.api, usage_method())

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Watch Docker, adopt what this owner left running, and remove what belongs to no one."""
        self._open_events()
        self._watch = self.engine.watch({OWNER: self.owner}, self._on_container_event, self._resync)
        await asyncio.to_thread(self._adopt)
        threading.Thread(target=self._keep_logs, name="sim-logs", daemon=True).start()

    async def close(self) -> None:
        self._closed.set()
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._docker_pool.shutdown(wait=False, cancel_futures=True)
        await asyncio.to_thread(self.usage_meter.close)
        self._release_state()

    def _release_state(self) -> None:
        if self._state_lock is not None:
            self._state_lock.release()
            self._state_lock = None

    # --- Backend -----------------------------------------------------------------------------

    def health(self) -> BackendHealth:
        """Unhealthy while no event stream can be opened on the Docker engine."""
        if self._watch is None:
            return BackendHealth()
        condition = self._watch.condition()
        return BackendHealth(
            healthy=condition.reachable,
            reason=condition.reason,
            since=condition.since,
            detail=condition.error,
        )

    # --- SamplesUsage ------------------------------------------------------------------------

    def usage_source(self) -> str:
        return self.usage_meter.source()

    async def sample_usage(self) -> Sequence[UsageSample]:
        """Every running container's use (backends.docker_usage says how it is measured)."""
        with self._lock:
            running = [
                Watched(
                    key=i.key,
                    container_id=i.container_id,
                    real_gpus=bool(i.placement and self.cluster.node(i.placement.node).real_gpus),
                )
                for i in self._by_container.values()
                if i.container_id is not None and not i.ended and i.started_at is not None
            ]
        return await asyncio.to_thread(self.usage_meter.sample, running)

    def _stop_grace_seconds(self) -> float:
        return self.settings.stop_grace_seconds

    def _log_source(self, key: InstanceKey) -> LogSource:
        directory = self._instance_dir(key)
        log_file = records.instance_log(directory)
        if not directory.is_dir():
            raise UnknownInstance(f"no instance {key.role}-{key.index} in attempt {key.attempt}")
        return LogSource(
            read_from=log_file.read,
            tail_offset=log_file.tail_offset,
            running=lambda: not records.has_exit(directory),
        )

    # --- launching ---------------------------------------------------------------------------

    def exec_session(self, key: InstanceKey, request: ExecRequest) -> DockerExecSession:
        """Run a command in the instance's running container (`paigraph exec` and `shell`)."""
        labels = {
            OWNER: self.owner,
            JOB: key.job_id,
            ATTEMPT: str(key.attempt),
            ROLE: key.role,
            INDEX: str(key.index),
        }
        try:
            found = self.engine.containers(labels)
        except Exception as exc:
            raise BackendError(f"cannot look up the container of {key}: {exc}") from None
        if not found:
            raise UnknownInstance(f"instance {key.role}-{key.index} has no container (any more)")
        running = [c for c in found if c.status == "running"]
        if not running:
            raise BackendError(
                f"instance {key.role}-{key.index} is not running (its container is "
                f"{found[-1].status})"
            )
        return DockerExecSession(self.engine.api, running[-1].id, request)

    @property
    def default_fs_uri(self) -> str:
        """PAI_DEFAULT_FS_URI of every job here: the simulated default file system."""
        return self.file_systems.default_uri

    def launch_notes(self, request: LaunchRequest) -> list[LaunchNote]:
        """What the request names that this machine simulates (an HDFS location, a node's
        own path), one note per prerequisite, then the roles' simulated GPUs and limits
        scaled to this machine, for the job's warnings."""
        notes: dict[str, LaunchNote] = {}
        for role in request.roles:
            for material in role.materials:
                if material.name in notes:
                    continue
                kinds = self.materials.simulated(_FETCH_KIND[material.kind], material.uris)
                if kinds:
                    notes[material.name] = LaunchNote(
                        material=material.name,
                        code="simulated",
                        message=self._simulation_note(material, set(kinds)),
                    )
        return [*notes.values(), *self._capacity_notes(request)]

    def _simulation_note(self, material: Material, kinds: set[Simulated]) -> str:
        where = ", ".join(material.uris)
        parts = []
        if Simulated.DFS in kinds:
            parts.append(
                f"{where} is on a simulated HDFS: the job's user's own tree of that file system "
                "on this machine (fill and read it with `paigraph fs`; jobs find an `hdfs` "
                "stand-in on their PATH)"
            )
        if Simulated.NODE in kinds:
            parts.append(
                f"{where} is a path on the cluster's nodes: a simulated node folder of the "
                "job's user stands in for it, kept across jobs like a node's disk"
            )
        return "; ".join(parts)

    def refusal(self, request: LaunchRequest) -> str | None:
        """Why the request can never run on the simulated cluster: it asks more than any node
        or its virtual cluster has, or names data, scripts or storage this machine cannot
        serve. None when it can run once room is free."""
        demands = [demand(role) for role, _ in gang_order(request)]
        never = self.cluster.never_fits(request.virtual_cluster, demands)
        if never:
            return never
        for role in request.roles:
            for material in role.materials:
                if material.optional:
                    continue  # one that cannot be served is skipped at start, with a note
                try:
                    self.materials.check(
                        material.name,
                        _FETCH_KIND[material.kind],
                        material.uris,
                        owner=request.user,
                        per_repository=material.per_repository,
                    )
                except UnservableMaterial as exc:
                    return str(exc)
            for storage in role.storages:
                try:
                    check_storage(storage.name, storage.source, volume=storage.volume)
                except UnservableMaterial as exc:
                    return str(exc)
        return None

    def _capacity_notes(self, request: LaunchRequest) -> list[LaunchNote]:
        """GPUs that are simulated (indices without a device) and limits scaled to this
        machine, for the job's warnings; the instance's log and PLACED event say it again."""
        warnings = []
        asking = [r for r in request.roles if r.resources.gpu > 0]
        if asking:
            real = [n.name for n in self.cluster.nodes if n.real_gpus]
            names = ", ".join(r.name for r in asking)
            where = (
                f"only {real[0]} has this machine's GPUs; instances placed on another node get"
                if real
                else "this machine has no GPUs for them: the instances get"
            )
            warnings.append(
                f"task role(s) {names} ask for GPUs, which are simulated: {where} the indices "
                f"of simulated GPUs in NVIDIA_VISIBLE_DEVICES, with no device behind them"
            )
        capped = self._host.capping_warning(request)
        if capped:
            warnings.append(capped)
        return [LaunchNote(path="taskRoles", message=warning) for warning in warnings]

    def _launch(self, request: LaunchRequest) -> None:
        # Asked again although the job service asks at submission: a launch is also reached
        # without that check (a later attempt, a job resumed after a restart with other
        # settings, `paigraph run`), and must then refuse rather than wait for ever.
        refused = self.refusal(request)
        if refused:
            raise LaunchRefused(refused)
        directory = records.attempt_dir(self.attempts_dir, request.job_id, request.attempt)
        attempt = Attempt.new(request, directory)
        with self._lock:
            if attempt.id in self._attempts:
                raise LaunchRefused(f"attempt {request.attempt} of job {request.job_id} exists")
            records.write_launch(directory, request)
            self._attempts[attempt.id] = attempt
        if self._outage() is None and not self._images_ready(attempt):
            return
        self._scheduler.add(attempt.id)
        self._schedule()

    def _images_ready(self, attempt: Attempt) -> bool:
        """Whether the attempt's images are here (checked once, after pulling the missing ones
        when `image_pull` allows it); when one is missing the attempt fails to start, saying
        which. An engine that does not answer leaves the check for later: the attempt is then
        queued and checked when it is placed."""
        if attempt.images_checked:
            return True
        try:
            reason = self._missing_image(attempt.request)
        except EngineUnreachable as exc:
            self._unreachable(exc, f"{attempt.id} waits for the engine to check its images")
            return True
        if reason:
            self._scheduler.remove(attempt.id)
            self._end_all(attempt, EventKind.START_FAILED, reason)
            return False
        attempt.images_checked = True
        return True

    def _missing_image(self, request: LaunchRequest) -> str | None:
        """Why an image of the request is not here, after pulling the missing ones (logged in
        with their dockerimage's auth) when `image_pull` allows it; None when all are."""
        checked: set[str] = set()  # roles often share an image: ask the engine once for each
        for role in sorted(request.roles, key=lambda r: r.image):
            if role.image in checked:
                continue
            checked.add(role.image)
            if self.engine.image_exists(role.image):
                continue
            if not self.settings.image_pull:
                return (
                    f"image {role.image!r} is not on this machine and the simulator does not "
                    "pull images (build it locally, e.g. with docker build or docker import, or "
                    "set image_pull: true)"
                )
            try:
                auth = docker_pull.auth_config(role, request.secrets, self._auth_file)
                docker_pull.pull(self.engine.client, role.image, auth, self.progress)
            except (docker_pull.PullFailed, MaterialError) as exc:
                log.warning("%s", exc)  # the reason names the image and never a credential
                return str(exc)
        return None

    def _auth_file(self, location: str) -> str:
        """A v1 authFile, read only under the allowed file roots as local prerequisites are."""
        return self.materials.read_local_text("authFile", location)

    def _wait(self, attempt: Attempt, reason: str) -> None:
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
        attempt: Attempt,
        slots: dict[tuple[str, int], Slot],
        ports: dict[tuple[str, int], dict[str, list[int]]],
    ) -> None:
        """Fetch prerequisites, make the network, then start every container in parallel."""
        request = attempt.request
        order = gang_order(request)
        try:
            mounts, skipped = self._materialize(request)
            network_name, addresses = self._gang_network(attempt)
        except EngineUnreachable as exc:
            self._requeue(attempt, exc)
            return
        except (EngineError, MaterialError, OSError) as exc:
            self._end_all(attempt, EventKind.START_FAILED, str(exc))
            return
        if attempt.forgotten:  # forgotten while its network was made: `_forget` missed it
            self._remove_network(network_name)
            return
        with self._lock:
            for instance in attempt.instances.values():
                instance.gated = True
        for tries_left in range(_PORT_TRIES - 1, -1, -1):
            placements = {
                (role.name, index): Placement(
                    node=slots[(role.name, index)].node,
                    host_ip=addresses[n],
                    ports=ports[(role.name, index)],
                )
                for n, (role, index) in enumerate(order)
            }
            specs = []
            for role, index in order:
                instance = attempt.instances[(role.name, index)]
                if instance.ended:  # failed to start for another reason, or stopped
                    continue
                instance.placement = placements[(role.name, index)]
                slot = slots[(role.name, index)]
                spec = self._prepare_run(attempt, instance, placements, network_name, mounts, slot)
                records.create_log(instance.dir)
                specs.append((instance, spec))
            failed = self._run_gang(attempt, specs, retry_ports=tries_left > 0)
            unreached = [e for _, e in failed if isinstance(e, EngineUnreachable)]
            if unreached:
                self._requeue(attempt, unreached[0])
                return
            lost = [(i, e) for i, e in failed if isinstance(e, PortTaken)]
            if not lost or not self._new_ports_for(attempt, lost, ports):
                break
        started = [i for i, _ in specs if not i.ended]
        for role, index in order:
            instance = attempt.instances[(role.name, index)]
            if not instance.ended:
                slot = slots[(role.name, index)]
                self._emit_placed(attempt.request, instance, slot, skipped.get(role.name, []))
        held = [i for i in started if request.role(i.key.role).depends_on]
        self._open_gates([i for i in started if i not in held])
        if held:
            threading.Thread(
                target=self._hold_until_dependencies,
                args=(attempt, held),
                name=f"start-order-{attempt.id}",
                daemon=True,
            ).start()
        # every container may have failed to start: then the network is not needed any more
        self._cleanup_if_done(attempt)

    def _gang_network(self, attempt: Attempt) -> tuple[str, list[str]]:
        """The attempt's network and its addresses in the gang's order: the one it was given
        before the engine went away (placed again), else a new one."""
        request = attempt.request
        with self._lock:
            name, addresses = attempt.network, list(attempt.addresses)
        if name is not None and len(addresses) == request.total_instances:
            return name, addresses
        network = self._create_network(request)
        addresses = network.addresses(request.total_instances)
        self._use_network(attempt, network.name, addresses)
        return network.name, addresses

    def _requeue(self, attempt: Attempt, error: EngineUnreachable) -> None:
        """The engine went away while the gang's containers were being made. None of them ran
        its commands (they wait at the gate), so the attempt gives back what it holds and is
        placed again from the start, first in the queue, once the engine answers; containers
        made meanwhile belong to a replaced run and are removed when the engine is back."""
        self._unreachable(error, f"{attempt.id} is placed again when the engine answers")
        self._discard_run(attempt)
        for instance in attempt.instances.values():
            if not instance.ended:
                self.ports.release(instance.port_owner)
        self.cluster.release(attempt.id)
        with self._lock:
            attempt.placed = False
            attempt.waiting_reason = None
            for instance in attempt.instances.values():
                instance.gated = False
            self._scheduler.add_first(attempt.id)
        self._wait(attempt, self._outage() or f"waiting: {error}")

    def _run_gang(
        self, attempt: Attempt, specs: list[tuple[Instance, ContainerSpec]], *, retry_ports: bool
    ) -> list[tuple[Instance, PortTaken | EngineUnreachable]]:
        """Start every container of the gang at once; the ones whose port was taken meanwhile
        (when `retry_ports`, else they fail to start) or that the engine did not answer for."""
        results = self._docker_pool.map(
            lambda pair: (pair[0], self._run_container(attempt, *pair, retry_ports=retry_ports)),
            specs,
        )
        return [(instance, lost) for instance, lost in results if lost is not None]

    def _new_ports_for(
        self,
        attempt: Attempt,
        lost: list[tuple[Instance, PortTaken]],
        ports: dict[tuple[str, int], dict[str, list[int]]],
    ) -> bool:
        """Take the gang's containers away (their commands never ran: they wait at the gate)
        and give the instances whose port was taken fresh ones, so the next try starts every
        container again with an environment naming the ports each really has. False when no
        fresh ports can be had: then the instances fail to start, saying which port went."""
        self._discard_run(attempt)
        for instance, taken in lost:
            key = instance.key
            self.progress(f"{key.role}-{key.index}: port {taken.port} was taken; trying others")
            try:
                fresh = self._other_ports(attempt, instance, taken)
            except PortError as exc:
                for peer in attempt.instances.values():
                    self._end(attempt, peer, EventKind.START_FAILED, reason=str(exc))
                return False
            ports[(key.role, key.index)] = fresh
        return True

    def _other_ports(
        self, attempt: Attempt, instance: Instance, taken: PortTaken
    ) -> dict[str, list[int]]:
        """Fresh ports for an instance whose port another program took, in place of the ones
        it held; PortError, saying which port went, when there are none."""
        key = instance.key
        log.warning("%s: %s; starting it again on other ports", key, taken)
        self.ports.release(instance.port_owner)
        role = attempt.request.role(key.role)
        try:
            return self.ports.allocate(instance.port_owner, port_asks(role, key.index))
        except PortError as exc:
            raise PortError(f"{taken}; no other ports: {exc}") from None

    def _discard_run(self, attempt: Attempt) -> None:
        """Remove every container of the attempt's current run; each instance's next one gets
        a new run number, so events of the removed ones are told apart and ignored."""
        with self._lock:
            removed = []
            for instance in attempt.instances.values():
                if instance.ended:
                    continue
                instance.run += 1
                instance.started_at = None
                instance.ran = instance.ready = False
                instance.readiness, instance.next_check = None, 0.0
                if instance.container_id:
                    removed.append(instance.container_id)
                    self._by_container.pop(instance.container_id, None)
                    instance.container_id = None
        for instance in attempt.instances.values():
            if not instance.ended:
                self._write_run(instance, queued=False)
        list(self._docker_pool.map(self._remove, removed))

    def _open_gates(self, instances: list[Instance]) -> None:
        """Let the started containers run their commands. STARTED is told first (for those
        Docker reported started meanwhile; the others tell it themselves from now on), so it
        always comes before the end of commands that may take no time at all."""
        for instance in instances:
            with self._lock:
                instance.gated = False
                instance.ran = True
                started = instance.started_at is not None and not instance.ended
            if started:
                self._emit(self._event(instance, EventKind.STARTED, placement=instance.placement))
            try:
                records.open_gate(instance.dir)
            except OSError as exc:  # it would wait for ever: stop it (it ends as stopped)
                log.error("cannot let %s start its commands: %s", instance.key, exc)
                if instance.container_id:
                    self._stop_container(instance.container_id, 0)

    def _hold_until_dependencies(self, attempt: Attempt, held: list[Instance]) -> None:
        """Keep each held instance at its gate until every dependency of its role holds, then
        open it; end it (DEPENDENCY_FAILED) past its deadline or once a dependency can never
        hold. Readiness is checked from here: a TCP connection to the published port, or the
        readiness command run in the instance through the engine."""
        request = attempt.request
        roles = {r.name: r for r in request.roles}
        started = time.monotonic()
        waiting = list(held)
        while waiting and not attempt.forgotten and not attempt.stopping:
            self._check_readiness(attempt, roles)
            for instance in list(waiting):
                if instance.ended:
                    waiting.remove(instance)
                    continue
                role = roles[instance.key.role]
                verdicts = [(d, self._judge(attempt, d)) for d in role.depends_on]
                never = next((d for d, v in verdicts if v is start_gate.Verdict.NEVER), None)
                open_ = next((d for d, v in verdicts if v is not start_gate.Verdict.HOLDS), None)
                late = time.monotonic() - started > role.dependency_timeout_seconds
                if open_ is None:
                    waiting.remove(instance)
                    self._open_gates([instance])
                elif never is not None or late:
                    waiting.remove(instance)
                    dep = never or open_
                    count = roles[dep.role].instances
                    reason = (
                        start_gate.never_reason(dep, count)
                        if never is not None
                        else start_gate.timeout_reason(dep, count, role.dependency_timeout_seconds)
                    )
                    self._end_held(attempt, instance, reason)
            time.sleep(0.05)

    def _judge(self, attempt: Attempt, dep: StartDependency) -> start_gate.Verdict:
        role = attempt.request.role(dep.role)
        with self._lock:
            peers = [
                start_gate.PeerState(
                    running=i.ran,
                    ready=i.ready and not i.ended,
                    ended=i.ended,
                    exit_code=i.exit_code,
                )
                for (name, _), i in attempt.instances.items()
                if name == role.name
            ]
        return start_gate.judge(dep, peers)

    def _check_readiness(self, attempt: Attempt, roles: dict[str, RoleLaunch]) -> None:
        """Try the readiness check of each running instance whose period is up. It is ready
        from its first passed check until `failure_threshold` checks in a row fail, as a
        Kubernetes readinessProbe counts (start_gate.ReadinessCount); a new run of an
        instance counts from the start. Several waits may look at once: each check is made
        by one of them."""
        now = time.monotonic()
        for (name, _), instance in attempt.instances.items():
            check = roles[name].readiness
            if check is None or instance.ended or not instance.ran:
                continue
            with self._lock:
                if instance.next_check > now:
                    continue
                instance.next_check = now + check.period_seconds
                run = instance.run
                if instance.readiness is None:
                    instance.readiness = start_gate.ReadinessCount(check.failure_threshold)
                count = instance.readiness
            passed = self._passes(instance, check)
            with self._lock:
                if instance.run == run and instance.readiness is count:
                    instance.ready = count.record(passed)

    def _passes(self, instance: Instance, check: ReadinessCheck) -> bool:
        if check.port is not None:
            ports = (instance.placement.ports if instance.placement else {}).get(check.port)
            if not ports:
                return False
            # The instance's own address on its network, not the published port: Docker's
            # proxy accepts a connection on the host side even when nothing listens inside.
            host = instance.placement.host_ip if instance.placement else None
            if not host:
                return False
            return start_gate.port_answers(host, ports[0], check.timeout_seconds)
        if instance.container_id is None:
            return False
        return self.engine.exec_succeeds(
            instance.container_id, check.command, check.timeout_seconds
        )

    def _end_held(self, attempt: Attempt, instance: Instance, reason: str) -> None:
        """End an instance whose dependency never held: its commands never ran. Its container
        is stopped before the end is told, so a task retry that follows at once removes a
        stopped container and gives its address to the new run."""
        with self._lock:
            instance.gave_up = True
            container = instance.container_id
        if container:
            self._stop_container(container, 0)
        self._end(
            attempt,
            instance,
            EventKind.EXITED,
            exit_code=start_gate.DEPENDENCY_FAILED,
            reason=reason,
            completion_code=start_gate.DEPENDENCY_FAILED,
        )
        self._cleanup_if_done(attempt)

    def _run_container(
        self, attempt: Attempt, instance: Instance, spec: ContainerSpec, *, retry_ports: bool
    ) -> PortTaken | EngineUnreachable | None:
        """Start the instance's container; a port taken meanwhile is returned when
        `retry_ports` (the caller tries other ports), else the instance fails to start. An
        engine that did not answer is returned: the caller places the instance again."""
        if attempt.stopping:
            self._end(attempt, instance, EventKind.STOPPED, reason="stopped before it started")
            return None
        moved = self._moved_material(spec)
        if moved:
            reason = (
                f"{moved} is no longer the directory that was checked (removed, or a symlink "
                "in its path); it is not mounted"
            )
            self._end(attempt, instance, EventKind.START_FAILED, reason=reason)
            return None
        try:
            container_id = self.engine.run(spec)
        except PortTaken as exc:
            if retry_ports:
                return exc
            self._end(attempt, instance, EventKind.START_FAILED, reason=str(exc))
            return None
        except EngineUnreachable as exc:
            return exc
        except EngineError as exc:  # ImageMissing too
            self._end(attempt, instance, EventKind.START_FAILED, reason=str(exc))
            return None
        with self._lock:
            instance.container_id = container_id
            self._by_container[container_id] = instance
        if attempt.forgotten:
            self._remove(container_id)
        elif attempt.stopping:
            self._stop_container(container_id, 0)
        return None

    def _moved_material(self, spec: ContainerSpec) -> str | None:
        """The first prerequisite's host directory that is no longer the one checked, checked
        again just before Docker mounts it (Docker follows symlinks in a mount's source)."""
        for mount in spec.mounts:
            if not mount.checked:
                continue
            checked = Mount(Path(mount.source), mount.read_only)
            if not self.materials.still_where_checked(checked):
                return mount.source
        return None

    def _create_network(self, request: LaunchRequest) -> NetworkInfo:
        return self.engine.create_network(
            network_name(request), attempt_labels(self.owner, request), request.total_instances
        )

    def _use_network(self, attempt: Attempt, name: str, addresses: list[str]) -> None:
        """Record the attempt's network and its addresses (on disk too: a relaunch after a
        restart gives an instance its address on this network)."""
        with self._lock:
            attempt.network, attempt.addresses = name, addresses
        records.write_network(attempt.dir, name, addresses)

    def _prepare_run(
        self,
        attempt: Attempt,
        instance: Instance,
        placements: dict[tuple[str, int], Placement],
        network: str,
        mounts: dict[tuple[str, str], BindMount],
        slot: Slot,
    ) -> ContainerSpec:
        """Write the runtime files of the instance's run (its environment names every peer's
        placement) and specify its container."""
        request, key, placement = attempt.request, instance.key, instance.placement
        assert placement is not None
        env = {**runtime_env(request, placements, key.role, key.index), **gpu_env(slot)}
        role = with_secret_variables(request.role(key.role), request)  # values not in files
        real_gpus = self.cluster.node(slot.node).real_gpus
        note = simulated_gpu_note(slot, real_gpus)
        tools = standin_tools(
            user=request.user,
            default_authority=self.file_systems.default_authority,
            max_bytes=self.file_systems.max_bytes,
        )
        records.write_runtime_files(
            instance.dir,
            env,
            role,
            ssh_files(request, env),
            tools,
            notes=[note] if note else [],
        )
        dfs_root = self.file_systems.user_root(request.user)  # made by _materialize
        return container_spec(
            self.owner,
            request,
            key,
            instance.run,
            placement,
            task_attempt=instance.task_attempt,
            runtime_dir=records.runtime_dir(instance.dir),
            writable_dir=records.writable_dir(instance.dir),
            env={**env, **secret_environment(request)},
            network=network,
            mounts=mounts,
            slot=slot,
            real_gpus=real_gpus,
            host=self._host,
            publish_address=self.settings.publish_address,
            extra_mounts=[BindMount(str(dfs_root), DFS_DIR)],
        )

    def _materialize(
        self, request: LaunchRequest, roles: list[RoleLaunch] | None = None
    ) -> tuple[dict[tuple[str, str], BindMount], dict[str, list[str]]]:
        """The materials' mounts by (role, name), and per role what was skipped: an optional
        material (failurePolicy: ignore) that cannot be fetched is left out, with a note."""
        mounts: dict[tuple[str, str], BindMount] = {}
        skipped: dict[str, list[str]] = {}
        # the user's simulated file systems, mounted in every instance (_prepare_run)
        self.file_systems.user_root(request.user).mkdir(parents=True, exist_ok=True)
        for role in request.roles if roles is None else roles:
            for material in role.materials:
                try:
                    mount = self.materials.materialize(
                        material.name,
                        _FETCH_KIND[material.kind],
                        material.uris,
                        owner=request.user,
                        read_only=material.read_only,
                        per_repository=material.per_repository,
                        as_directory=material.as_directory,
                        progress=lambda _name, message: self.progress(message),
                    )
                except MaterialError as exc:
                    if not material.optional:
                        raise
                    log.warning("%s: %s (failurePolicy: ignore)", request.job_id, exc)
                    skipped.setdefault(role.name, []).append(skipped_note(material, exc))
                    continue
                read_only = mount.read_only or material.read_only
                mounts[(role.name, material.name)] = BindMount(
                    str(mount.host_path),
                    f"{WORK_DIR}/{material.name}",
                    read_only=read_only,
                    checked=True,
                )
                if mount.also_at:  # a node path, also where the job's commands name it
                    mounts[(role.name, f"{material.name} at {mount.also_at}")] = BindMount(
                        str(mount.host_path), mount.also_at, read_only=read_only, checked=True
                    )
        return mounts, skipped

    def _emit_placed(
        self,
        request: LaunchRequest,
        instance: Instance,
        slot: Slot,
        skipped: list[str] | None = None,
    ) -> None:
        """PLACED, with what was scaled to fit this machine, its simulated GPUs and the
        optional materials it starts without as its reason."""
        role = request.role(instance.key.role)
        notes = [
            self._host.clipping_note(request, role),
            simulated_gpu_note(slot, self.cluster.node(slot.node).real_gpus),
            *(skipped or []),
        ]
        roles = {r.name: r for r in request.roles}
        notes.append(start_gate.waits_for(role, roles))
        reason = "; ".join(note for note in notes if note) or None
        self._emit(
            self._event(instance, EventKind.PLACED, reason=reason, placement=instance.placement)
        )

    # --- starting one instance again ---------------------------------------------------------

    def _relaunch(self, key: InstanceKey, run: int | None) -> None:
        """Queue an ended instance to run again as task attempt `run`; its events start over
        from PLACED. A run that was started already is not started again."""
        where = f"{key.role}-{key.index} of attempt {key.attempt} of job {key.job_id}"
        with self._lock:
            attempt = self._attempts.get(attempt_id(key.job_id, key.attempt))
            instance = attempt.instances.get((key.role, key.index)) if attempt else None
            if attempt is None or instance is None:
                raise UnknownInstance(f"no instance {where}")
            if run is not None and run <= instance.task_attempt:
                log.debug("%s: run %s was started already; not again", instance.key, run)
                return
            # the exit record is written after `ended` is set: wait for both
            if not (instance.ended and records.has_exit(instance.dir)):
                raise BackendError(f"{where} has not ended; only an ended instance runs again")
            if attempt.stopping:
                raise BackendError(f"attempt {key.attempt} of job {key.job_id} is being stopped")
            records.remove_exit(instance.dir)
            instance.ended = False
            instance.exit_code = None
            instance.ran = instance.ready = False
            instance.readiness, instance.next_check = None, 0.0
            instance.gave_up = False
            instance.started_at = None
            instance.waiting_reason = None
            instance.run += 1
            instance.task_attempt = run if run is not None else instance.task_attempt + 1
            old, instance.container_id = instance.container_id, None
            if old:
                self._by_container.pop(old, None)
            self._write_run(instance, queued=True)
            self._scheduler.add_relaunch(instance)
        records.log_retry(instance.dir, instance.task_attempt)
        if old:
            self._remove(old)  # its address is given to the new run
        self._schedule()

    def _write_run(self, instance: Instance, *, queued: bool) -> None:
        records.write_run(
            instance.dir,
            records.RunRecord(instance.run, queued, instance.placement, instance.task_attempt),
        )

    def _wait_instance(self, instance: Instance, reason: str) -> None:
        if instance.waiting_reason == reason:
            return
        instance.waiting_reason = reason
        self._emit(self._event(instance, EventKind.WAITING, reason=reason))

    def _start_relaunch(
        self,
        attempt: Attempt,
        instance: Instance,
        placed: Placed,
        ports: dict[str, list[int]],
    ) -> None:
        """Start the instance's new container, on the attempt's network at its address."""
        request = attempt.request
        key = instance.key
        role = request.role(key.role)
        slot = placed.slots[0]
        try:
            mounts, skipped = self._materialize(request, [role])
            network, address = self._network_for(attempt, gang_position(request, key))
        except EngineUnreachable as exc:
            self._requeue_relaunch(attempt, instance, exc)
            return
        except (EngineError, MaterialError, OSError) as exc:
            self._end(attempt, instance, EventKind.START_FAILED, reason=str(exc))
            self._cleanup_if_done(attempt)
            return
        for tries_left in range(_PORT_TRIES - 1, -1, -1):
            instance.placement = Placement(node=slot.node, host_ip=address, ports=ports)
            placements = {
                name: peer.placement
                for name, peer in attempt.instances.items()
                if peer.placement is not None
            }
            spec = self._prepare_run(attempt, instance, placements, network, mounts, slot)
            with self._lock:
                instance.gated = True  # STARTED follows PLACED, told once its ports are sure
            # closed before the run is recorded as being started: a restart that finds it so
            # and no container of it knows its commands never ran (_relaunch_cut_short)
            records.close_gate(instance.dir)
            self._write_run(instance, queued=False)
            lost = self._run_container(attempt, instance, spec, retry_ports=tries_left > 0)
            if lost is None:
                break
            if isinstance(lost, EngineUnreachable):
                self._requeue_relaunch(attempt, instance, lost)
                return
            # its peers run already: like a relaunch whose ports were not free, it takes others
            try:
                ports = self._other_ports(attempt, instance, lost)
            except PortError as exc:
                self._end(attempt, instance, EventKind.START_FAILED, reason=str(exc))
                break
        if not instance.ended:
            self._emit_placed(request, instance, slot, skipped.get(role.name, []))
            if role.depends_on:  # its new run waits again, until what its role waits for holds
                threading.Thread(
                    target=self._hold_until_dependencies,
                    args=(attempt, [instance]),
                    name=f"start-order-{attempt.id}-{key.role}-{key.index}",
                    daemon=True,
                ).start()
            else:
                self._open_gates([instance])
        self._cleanup_if_done(attempt)

    def _requeue_relaunch(
        self, attempt: Attempt, instance: Instance, error: EngineUnreachable
    ) -> None:
        """The engine went away while the instance's new container was being made (it waits
        at its gate, its commands never ran): it gives back what it holds and waits, first in
        line, to be placed again once the engine answers."""
        self._unreachable(error, f"{instance.key} is placed again when the engine answers")
        with self._lock:
            old, instance.container_id = instance.container_id, None
            if old:
                self._by_container.pop(old, None)
            instance.run += 1  # what was made meanwhile belongs to a replaced run
            instance.started_at = None
            instance.gated = False
            instance.waiting_reason = None
            self._write_run(instance, queued=True)
            self._scheduler.add_relaunch_first(instance)
        if old:
            self._remove(old)
        self.ports.release(instance.port_owner)
        self.cluster.release_one(attempt.id, gang_position(attempt.request, instance.key))
        self._wait_instance(instance, self._outage() or f"waiting: {error}")

    def _network_for(self, attempt: Attempt, position: int) -> tuple[str, str]:
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
                role, index = gang_order(attempt.request)[position]
                placement = attempt.instances[(role.name, index)].placement
                assert placement is not None
                return name, placement.host_ip
            request = attempt.request
            info = self._create_network(request)
            addresses = info.addresses(request.total_instances)
            with self._lock:
                forgotten = attempt.forgotten
            if forgotten:
                self._remove_network(info.name)
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
        attempt = self._attempts.get(instance.attempt_id)
        if attempt is None or instance.ended:
            return
        if event.labels.get(RUN, "1") != str(instance.run):
            return  # the container of an earlier run of a relaunched instance
        if event.action == "start":
            with self._lock:
                instance.started_at = event.at
                gated = instance.gated
            if not gated:  # else told when the gate opens, with the placement it ran with
                self._emit(self._event(instance, EventKind.STARTED, placement=instance.placement))
        elif event.action == "die" and not instance.gave_up:
            self._background(self._finish_container, attempt, instance, event.id, instance.run)

    def _instance_from_labels(self, labels: dict[str, str]) -> Instance | None:
        attempt = self._attempt_from_labels(labels)
        if attempt is None or INDEX not in labels:
            return None
        return attempt.instances.get((labels.get(ROLE, ""), int(labels[INDEX])))

    def _attempt_from_labels(self, labels: dict[str, str]) -> Attempt | None:
        return self._attempts.get(f"{labels.get(JOB)}#{labels.get(ATTEMPT)}")

    def _finish_container(
        self, attempt: Attempt, instance: Instance, container_id: str, run: int
    ) -> None:
        """Record the end of the instance's run `run` in container `container_id`. After a
        restart one death can be seen twice (in the containers listed at adoption and in the
        event stream opened just before); by the second time the instance may run again (a
        relaunch), and that run's end must not be taken from the earlier one's container."""
        try:
            info = self.engine.inspect(container_id)
        except EngineUnreachable as exc:  # how it ended is read when the engine is back
            self._unreachable(exc, f"the end of {instance.key} is read when the engine answers")
            return
        code = info.exit_code if info else None
        oom = bool(info and info.oom_killed)
        reason = None
        if info and info.error:
            reason = info.error
        elif oom:
            request = attempt.request
            reason = self._host.oom_reason(request, request.role(instance.key.role))
        kind = EventKind.STOPPED if attempt.stopping else EventKind.EXITED
        self._end(
            attempt,
            instance,
            kind,
            exit_code=code,
            oom_killed=oom,
            reason=reason,
            at=info.finished_at if info else None,
            run=run,
        )
        self._remove(container_id)
        with self._lock:
            self._by_container.pop(container_id, None)
        self._cleanup_if_done(attempt)

    def _end(
        self,
        attempt: Attempt,
        instance: Instance,
        kind: EventKind,
        *,
        exit_code: int | None = None,
        oom_killed: bool = False,
        reason: str | None = None,
        at: datetime | None = None,
        run: int | None = None,
        completion_code: int | None = None,
    ) -> None:
        """Record an instance's end once: exit record on disk, resources back, event out;
        with `run`, only while that run is the instance's current one."""
        with self._lock:
            if instance.ended or attempt.forgotten or run not in (None, instance.run):
                return
            instance.ended = True
            instance.exit_code = exit_code
        event = self._event(
            instance,
            kind,
            exit_code=exit_code,
            oom_killed=oom_killed,
            reason=reason,
            placement=instance.placement,
            at=at,
            completion_code=completion_code,
        )
        try:
            records.write_exit(instance.dir, event)
        except OSError as exc:  # the event still goes out; only a restart would miss it
            log.error("cannot write the exit record of %s: %s", instance.key, exc)
        self._keep_log(instance.dir)
        self.ports.release(instance.port_owner)
        if attempt.placed:
            self.cluster.release_one(attempt.id, gang_position(attempt.request, instance.key))
        self._emit(event)
        self._schedule_soon()

    def _end_all(self, attempt: Attempt, kind: EventKind, reason: str) -> None:
        for instance in attempt.instances.values():
            self._end(attempt, instance, kind, reason=reason)

    def _schedule_soon(self) -> None:
        self._background(self._schedule)

    def _cleanup_if_done(self, attempt: Attempt) -> None:
        with self._lock:  # checked under the lock: a relaunch may be bringing one back
            if not attempt.all_ended():
                return
            self._scheduler.remove(attempt.id)
            network, attempt.network = attempt.network, None
        if network:
            try:
                self.engine.remove_network(network)
            except EngineError:
                with self._lock:  # still in use a moment longer: a relaunch or forget retries
                    if attempt.network is None and not attempt.forgotten:
                        attempt.network = network

    # --- logs ----------------------------------------------------------------------------------

    def _keep_logs(self) -> None:
        """Keep every running instance's log within the limit, every few seconds, until closed;
        a job printing without end costs the disk a bounded amount."""
        while not self._closed.wait(_LOG_CHECK_SECONDS):
            with self._lock:
                running = [
                    i.dir
                    for a in self._attempts.values()
                    for i in a.instances.values()
                    if i.container_id and not i.ended
                ]
            for directory in running:
                self._keep_log(directory)

    def _keep_log(self, instance_dir: Path) -> None:
        """Drop the middle of the instance's log when it is past log_limit_mb."""
        try:
            records.instance_log(instance_dir).keep_within(self.settings.log_limit_mb << 20)
        except OSError as exc:
            log.warning("cannot keep the log in %s within its limit: %s", instance_dir, exc)

    # --- stopping ----------------------------------------------------------------------------

    def _stop(self, stopped_id: str, grace: float) -> None:
        with self._lock:
            attempt = self._attempts.get(stopped_id)
            if attempt is None:
                return
            attempt.stopping = True
            queued = self._scheduler.remove(stopped_id)
            relaunching = self._scheduler.remove_relaunches(lambda i: i.attempt_id == stopped_id)
            running = [i.container_id for i in attempt.instances.values() if i.container_id]
        if queued or not attempt.placed:
            self._end_all(attempt, EventKind.STOPPED, "stopped while waiting")
        for instance in relaunching:
            self._end(
                attempt, instance, EventKind.STOPPED, reason="stopped while waiting to run again"
            )
        list(self._docker_pool.map(lambda cid: self._stop_container(cid, grace), running))

    def _forget(self, forgotten_id: str) -> None:
        """Remove whatever the attempt still has (containers, network, held capacity and
        ports) at once; its logs and exit records stay on disk."""
        with self._lock:
            attempt = self._attempts.pop(forgotten_id, None)
            if attempt is None:
                return
            attempt.forgotten = True
            self._scheduler.remove(forgotten_id)
            self._scheduler.remove_relaunches(lambda i: i.attempt_id == forgotten_id)
            network, attempt.network = attempt.network, None
        for instance in attempt.instances.values():
            if instance.container_id:
                self._remove(instance.container_id)
                with self._lock:
                    self._by_container.pop(instance.container_id, None)
            self.ports.release(instance.port_owner)
        self.cluster.release(attempt.id)
        if network:
            self._remove_network(network)
        records.remove_launch(attempt.dir)
        self._schedule_soon()

    # --- when the engine goes away and comes back ---------------------------------------------

    def _outage(self) -> str | None:
        """What waits for the engine say while it does not answer; None when it does."""
        return self.health().reason

    def _unreachable(self, error: EngineUnreachable, next_step: str) -> None:
        """A call found the engine unreachable: say so, and have the watch check (its stream
        may look fine while the engine is gone); what was missed is applied on its return."""
        log.warning("%s; %s", error, next_step)
        if self._watch is not None:
            self._watch.reopen()

    def _remove(self, container_id: str) -> None:
        """Remove a container; when the engine does not answer, re-listing on its return
        removes it (it belongs to no live run by then)."""
        try:
            self.engine.remove(container_id)
        except EngineUnreachable as exc:
            self._unreachable(exc, f"{container_id[:12]} is removed when the engine answers")

    def _remove_network(self, name: str) -> None:
        """Remove a network no live attempt uses; one the engine keeps (still in use a moment
        longer, or the engine away) is removed when containers are next re-listed."""
        try:
            self.engine.remove_network(name)
        except EngineError as exc:
            log.warning("cannot remove network %s (%s); removed when re-listing", name, exc)

    def _stop_container(self, container_id: str, grace: float) -> None:
        """Stop a container; when the engine does not answer, the stop is made again when
        it returns (its attempt is marked stopping, and re-listing stops what still runs)."""
        try:
            self.engine.stop(container_id, grace)
        except EngineUnreachable as exc:
            self._unreachable(exc, f"{container_id[:12]} is stopped when the engine answers")

    def _background(self, work: Callable[..., None], *args: object) -> None:
        """Run `work` on the control pool; what it raises is logged, never lost with its
        future. Nothing is run once the backend is closed."""

        def logged() -> None:
            try:
                work(*args)
            except Exception:
                log.exception(
                    "%s failed; the instances it was for are settled when the engine's "
                    "containers are next re-listed (event stream re-opened, or a restart)",
                    getattr(work, "__name__", work),
                )

        try:
            self._pool.submit(logged)
        except RuntimeError:  # shut down: the backend is closing
            log.debug("backend closed; %s not run", getattr(work, "__name__", work))

    def _resync(self) -> None:
        """After the event stream was opened again: apply what Docker did while no stream was
        open. Containers that exited meanwhile are finished with their real exit codes and
        times, those that started are told started, those that vanished (removed with the
        engine's data, say) are LOST; running containers of a stopping attempt are stopped
        again; containers and networks no live run owns any more are removed; and what waited
        for the engine is placed."""
        with self._lock:
            known = [
                (attempt, instance, instance.container_id)
                for attempt in self._attempts.values()
                for instance in attempt.instances.values()
                if instance.container_id and not instance.ended
            ]
        found = {info.id: info for info in self.engine.containers({OWNER: self.owner})}
        applied = 0
        for attempt, instance, container_id in known:
            assert container_id is not None
            info = found.pop(container_id, None)
            applied += self._apply_listed(attempt, instance, container_id, info)
        for info in found.values():
            self._remove_if_unowned(info)
        self._remove_stray_networks()
        log.info(
            "re-listed %d container(s) after the event stream re-opened; %d change(s) applied",
            len(known),
            applied,
        )
        self._schedule_soon()

    def _apply_listed(
        self, attempt: Attempt, instance: Instance, container_id: str, info: ContainerInfo | None
    ) -> int:
        """Bring one live instance in line with its container as listed; 1 when it changed."""
        if info is None:
            with self._lock:
                current = instance.container_id == container_id and not instance.ended
                if current:
                    self._by_container.pop(container_id, None)
            if not current:
                return 0
            reason = "its container is gone (removed while no Docker event stream was open)"
            self._end(attempt, instance, EventKind.LOST, reason=reason)
            self._cleanup_if_done(attempt)
            return 1
        if info.status in ("exited", "dead"):
            self._finish_container(attempt, instance, container_id, instance.run)
            return 1
        if info.status != "running":
            return 0
        if attempt.stopping:
            self._stop_container(container_id, self.settings.stop_grace_seconds)
        with self._lock:
            told = instance.started_at is not None or instance.gated
            if not told:
                instance.started_at = info.started_at or utcnow()
        if told:
            return 0
        self._emit(
            self._event(
                instance, EventKind.STARTED, placement=instance.placement, at=info.started_at
            )
        )
        return 1

    def _remove_if_unowned(self, info: ContainerInfo) -> None:
        """Remove a listed container that is not the current run of a live instance: its
        attempt was forgotten, its run replaced, or its instance ended while the engine was
        away. A container of a current run not attached yet (being started) is left alone."""
        with self._lock:
            instance = self._instance_from_labels(info.labels)
            current_run = instance is not None and info.labels.get(RUN, "1") == str(instance.run)
            if current_run and instance is not None and not instance.ended:
                return
        log.info("removing container %s: no live run owns it any more", info.name)
        self._remove(info.id)

    def _remove_stray_networks(self) -> None:
        """Networks of attempts that were forgotten or ended while the engine was away."""
        for name, labels in self.engine.networks({OWNER: self.owner}):
            with self._lock:
                attempt = self._attempt_from_labels(labels)
                stray = attempt is None or (attempt.all_ended() and attempt.network is None)
            if stray:
                self._remove_network(name)

    # --- after a restart ---------------------------------------------------------------------

    def _adopt(self) -> None:
        """Take back this owner's attempts; remove containers and networks nobody owns."""
        self._remove_leftovers_of_dead_runs()
        containers = self.engine.containers({OWNER: self.owner})
        requeue: list[Instance] = []  # relaunched, still waiting to be placed
        for directory, request in records.recorded_launches(self.attempts_dir):
            attempt, queued = recorded_attempt(request, directory)
            self._attempts[attempt.id] = attempt
            requeue.extend(queued)
        cut_short = self._starts_cut_short(containers)
        removed = {container_id for _, ids in cut_short for container_id in ids}
        self._adopt_containers([c for c in containers if c.id not in removed])
        self._start_again(cut_short)
        for instance in requeue:
            if not instance.ended and instance.container_id is None:
                self._scheduler.add_relaunch(instance)
        for attempt in self._attempts.values():
            for instance in attempt.instances.values():
                if (
                    attempt.placed
                    and not instance.ended
                    and instance.container_id is None
                    and not self._scheduler.relaunching(instance)
                ):
                    if self._relaunch_cut_short(instance):
                        self._relaunch_again(instance)
                    else:
                        self._end(attempt, instance, EventKind.LOST, reason="its container is gone")
        self._adopt_networks()
        if self._scheduler.pending():
            self._schedule()

    def _relaunch_cut_short(self, instance: Instance) -> bool:
        """Whether the instance was being started again on its own (a relaunch) when the last
        process stopped, and its commands never ran: its run was recorded as being started,
        and its gate, closed before that, was never opened."""
        run = records.read_run(instance.dir)
        return run is not None and not run.queued and not records.gate_opened(instance.dir)

    def _relaunch_again(self, instance: Instance) -> None:
        """Queue a relaunch that was cut short to be placed again, as the same task attempt
        (its events name the run the job engine asked for) in a new container."""
        log.warning(
            "%s was being started again when the server stopped; starting it again", instance.key
        )
        with self._lock:
            instance.run += 1  # a container made for the cut-short start is not used
            instance.started_at = None
            instance.gated = False
            instance.waiting_reason = None
            self._write_run(instance, queued=True)
            self._scheduler.add_relaunch(instance)

    def _starts_cut_short(self, containers: list[ContainerInfo]) -> list[tuple[Attempt, list[str]]]:
        """The attempts whose start the last process did not finish: some of their containers
        were never made or never started, and none ran a command (no gate opened, nothing
        ended); each with the ids of the containers it has."""
        made: dict[str, list[str]] = {}
        running: dict[str, int] = {}
        for info in containers:
            attempt = self._attempt_from_labels(info.labels)
            if attempt is not None:
                made.setdefault(attempt.id, []).append(info.id)
                running[attempt.id] = running.get(attempt.id, 0) + (info.status == "running")
        found = []
        for attempt in self._attempts.values():
            ids = made.get(attempt.id, [])
            instances = attempt.instances.values()
            if running.get(attempt.id, 0) < len(instances) and not any(
                i.ended or records.gate_opened(i.dir) for i in instances
            ):
                found.append((attempt, ids))
        return found

    def _start_again(self, cut_short: list[tuple[Attempt, list[str]]]) -> None:
        """Start each attempt whose start was cut short from the beginning, as a launch not
        placed yet: its containers (waiting at the gate, no command ran) and network are
        removed, its ports given back, and it waits in the queue to be placed again. Each
        instance's next container gets a new run number, so no container name is started
        twice and events of the removed ones are told apart."""
        for attempt, ids in cut_short:
            log.warning(
                "attempt %s was being started when the server stopped; starting it again",
                attempt.id,
            )
            for instance in attempt.instances.values():
                self.ports.release(instance.port_owner)
                instance.placement = None
                if instance.dir.is_dir():  # a container may have been made: the next is new
                    with self._lock:  # before the removal, whose death the watch then ignores
                        instance.run += 1
                    self._write_run(instance, queued=False)
            for container_id in ids:
                self.engine.remove(container_id)
            attempt.placed = False
            self._scheduler.add(attempt.id)

    def _adopt_containers(self, containers: list[ContainerInfo]) -> None:
        """Attach each container to its instance, hold the capacity and ports of the running
        ones, finish the ones that ended meanwhile, and remove the ones nobody owns."""
        held: dict[str, list[tuple[str, Demand, tuple[int, ...]] | None]] = {}
        waiting: dict[str, list[Instance]] = {}  # held back by their role's start order
        for info in containers:
            instance = self._instance_from_labels(info.labels)
            if instance is None or info.labels.get(RUN, "1") != str(instance.run):
                # an orphan: no attempt on record owns it, or a run that was replaced
                self.engine.remove(info.id)
                continue
            if info.status != "running" and self._relaunch_cut_short(instance):
                # made for a relaunch but never started: the relaunch is made again
                self.engine.remove(info.id)
                continue
            attempt = self._attempts[instance.attempt_id]
            ports = json.loads(info.labels.get(PORTS, "{}"))
            node = info.labels.get(NODE, "")
            instance.container_id = info.id
            if TASK_ATTEMPT in info.labels:  # the run its events are about, as it was made
                instance.task_attempt = int(info.labels[TASK_ATTEMPT])
            instance.placement = Placement(node=node, host_ip=info.ip or "", ports=ports)
            instance.started_at = info.started_at
            self._by_container[info.id] = instance
            if info.status == "running":
                instance.ran = records.gate_opened(instance.dir)
                if not instance.ran and attempt.request.role(instance.key.role).depends_on:
                    waiting.setdefault(attempt.id, []).append(instance)
                else:
                    self._open_adopted_gate(instance)
                self.ports.adopt(
                    instance.port_owner, [p for group in ports.values() for p in group]
                )
                slots = held.setdefault(attempt.id, [None] * attempt.request.total_instances)
                gpus = tuple(json.loads(info.labels.get(GPUS, "[]")))
                role = attempt.request.role(instance.key.role)
                slots[gang_position(attempt.request, instance.key)] = (node, demand(role), gpus)
            else:
                self._finish_container(attempt, instance, info.id, instance.run)
        for held_id, slots in held.items():
            attempt = self._attempts[held_id]
            self.cluster.adopt(held_id, attempt.request.virtual_cluster, slots)
            # a container that died after it was listed may have been finished (from the event
            # stream) before its hold was taken here: give back what such an instance holds
            for instance in attempt.instances.values():
                with self._lock:
                    ended = instance.ended
                if ended:
                    self.ports.release(instance.port_owner)
                    self.cluster.release_one(held_id, gang_position(attempt.request, instance.key))
        for waiting_id, instances in waiting.items():
            # still waiting for what their role depends on: they go on waiting (their
            # deadline counts again from now), gated, so STARTED is told when the gate opens
            for instance in instances:
                instance.gated = True
            threading.Thread(
                target=self._hold_until_dependencies,
                args=(self._attempts[waiting_id], instances),
                name=f"start-order-{waiting_id}",
                daemon=True,
            ).start()

    def _open_adopted_gate(self, instance: Instance) -> None:
        """A container adopted while it waited at the gate (its gang had started, the gate
        was not opened yet) runs its commands now rather than wait for ever."""
        try:
            records.open_gate(instance.dir)
        except OSError as exc:
            log.error("cannot let the adopted %s start its commands: %s", instance.key, exc)

    def _adopt_networks(self) -> None:
        """Give each live attempt its network back (with its addresses when the record of them
        is for this network); remove the others."""
        for name, labels in self.engine.networks({OWNER: self.owner}):
            attempt = self._attempt_from_labels(labels)
            if attempt is None or attempt.all_ended() or not attempt.placed:
                self._remove_network(name)  # a start made again makes its own
            else:
                attempt.network = name
                known, addresses = records.read_network(attempt.dir) or ("", [])
                attempt.addresses = addresses if known == name else []

    def _remove_leftovers_of_dead_runs(self) -> None:
        """Containers and networks of a `paigraph run` whose process is gone."""
        for info in self.engine.containers({}):
            if left_by_dead_run(info.labels.get(OWNER, ""), self.owner):
                self.engine.remove(info.id)
        for name, labels in self.engine.networks({}):
            if left_by_dead_run(labels.get(OWNER, ""), self.owner):
                self._remove_network(name)

    def _reports(self) -> list[InstanceReport]:
        reports = []
        with self._lock:
            attempts = list(self._attempts.values())
        for attempt in attempts:
            for instance in attempt.instances.values():
                if not instance.ended:
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
                            run=instance.task_attempt,
                        )
                    )
                elif event := records.read_exit(instance.dir):
                    reports.append(
                        InstanceReport(
                            key=instance.key,
                            status=InstanceStatus.EXITED,
                            placement=event.placement,
                            exit_code=event.exit_code,
                            oom_killed=event.oom_killed,
                            started_at=instance.started_at,
                            finished_at=event.at,
                            run=event.run,
                        )
                    )
        return reports

    # --- placing -----------------------------------------------------------------------------

    def _schedule(self) -> None:
        """Place everything queued that fits now, in the scheduler's order, and carry out
        each of its decisions; again while anything was placed."""
        scheduler = self._scheduler
        with scheduler.round():
            while True:
                relaunches, queued = scheduler.turns()
                placed_any = False
                for instance in relaunches:
                    placed_any |= self._place_relaunch(instance)
                for queued_id in queued:
                    placed_any |= self._place_queued(queued_id)
                if not placed_any:
                    return

    def _place_queued(self, queued_id: str) -> bool:
        """Ask the scheduler about one queued attempt and carry out its decision; whether it
        was placed."""
        attempt = self._attempts.get(queued_id)
        if attempt is None or attempt.stopping:
            return False
        outage = self._outage()
        # not checked yet after `_images_ready`: the engine stopped answering meanwhile
        if outage is None and not (self._images_ready(attempt) and attempt.images_checked):
            return False
        decision = self._scheduler.decide_gang(self._gang_ask(attempt), outage)
        if isinstance(decision, WaitGang):
            self._wait(attempt, decision.reason)
            return False
        if isinstance(decision, RefuseGang):
            self._end_all(attempt, EventKind.START_FAILED, decision.reason)
            return False
        with self._lock:
            self._scheduler.take_gang(decision)
            attempt.placed = True
            attempt.waiting_reason = None
        order = gang_order(attempt.request)
        slots = {(role.name, index): decision.slots[n] for n, (role, index) in enumerate(order)}
        ports = {(role.name, index): decision.ports[n] for n, (role, index) in enumerate(order)}
        self._background(self._start_attempt, attempt, slots, ports)
        return True

    def _gang_ask(self, attempt: Attempt) -> GangAsk:
        order = gang_order(attempt.request)
        return GangAsk(
            attempt_id=attempt.id,
            virtual_cluster=attempt.request.virtual_cluster,
            demands=[demand(role) for role, _ in order],
            port_asks=[
                (attempt.instances[(role.name, index)].port_owner, port_asks(role, index))
                for role, index in order
            ],
        )

    def _place_relaunch(self, instance: Instance) -> bool:
        """Ask the scheduler about one instance waiting to start again and carry out its
        decision; whether it was placed."""
        with self._lock:
            attempt = self._attempts.get(instance.attempt_id)
            if attempt is None or attempt.stopping or instance.ended:
                self._scheduler.remove_relaunch(instance)  # it no longer waits
                return False
        ask = self._solo_ask(attempt, instance)
        decision = self._scheduler.decide_instance(instance, ask, self._outage())
        if isinstance(decision, WaitInstance):
            self._wait_instance(instance, decision.reason)
            return False
        if isinstance(decision, DropInstance):
            self._end(attempt, instance, EventKind.START_FAILED, reason=decision.reason)
            self._cleanup_if_done(attempt)
            return False
        with self._lock:
            taken = self._scheduler.take_instance(instance, stopping=attempt.stopping)
            if taken:
                instance.waiting_reason = None
        if not taken:  # a stop took it off the queue meanwhile; it ends as stopped
            self._scheduler.give_back(decision)
            return False
        self._background(self._start_relaunch, attempt, instance, decision.placed, decision.ports)
        return True

    def _solo_ask(self, attempt: Attempt, instance: Instance) -> SoloAsk | str:
        """What starting the instance again asks for, or why it never can on its own."""
        if any(i.placement is None for i in attempt.instances.values()):
            return (
                "cannot run on its own: its attempt was never placed, so its peers have no "
                "addresses; launch the attempt again instead"
            )
        previous = instance.placement
        assert previous is not None
        request, key = attempt.request, instance.key
        role = request.role(key.role)
        asks = port_asks(role, key.index)
        return SoloAsk(
            attempt_id=attempt.id,
            virtual_cluster=request.virtual_cluster,
            position=gang_position(request, key),
            demand=demand(role),
            prefer_node=previous.node,
            port_owner=instance.port_owner,
            port_asks=asks,
            same_ports=same_ports(asks, previous),
        )

    # --- small parts -------------------------------------------------------------------------

    def _instance_dir(self, key: InstanceKey) -> Path:
        directory = records.attempt_dir(self.attempts_dir, key.job_id, key.attempt)
        return records.instance_dir(directory, key.role, key.index)


def skipped_note(material: Material, error: Exception) -> str:
    """What the instance's PLACED event says of an optional material it starts without."""
    return (
        f"warning: {_KIND_WORDS[material.kind]} prerequisite {material.name!r} could not be "
        f"fetched ({error}); its failurePolicy is ignore, so the instance starts without "
        f"{WORK_DIR}/{material.name}"
    )


_KIND_WORDS = {Fetch.DOWNLOAD: "data", Fetch.CLONE: "script", Fetch.MOUNT: "storage"}
