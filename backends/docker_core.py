"""What every part of the simulator backend shares: its state (attempts, queue, cluster, ports,
the engine) and the small steps all of them take, such as ending an instance once, removing
a container, or running work in the background.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from backends import docker_records as records
from backends.base import BackendError, BackendHealth, EventKind, Fetch, InstanceEvent, InstanceKey
from backends.docker_attempts import Attempt, Instance, gang_position
from backends.docker_specs import ATTEMPT, INDEX, JOB, ROLE, HostLimits
from backends.docker_usage import DockerUsage, usage_method
from backends.ledger import Ledger
from backends.threaded import ThreadedBackend
from simulator.cluster import Cluster
from simulator.containers import ContainerInfo, Engine, EngineError, EngineUnreachable
from simulator.dfs import FileSystems, authority_of
from simulator.engine_watch import EngineWatch
from simulator.names import safe
from simulator.oom_kills import killed_for_memory
from simulator.ports import PortAllocator
from simulator.prereqs import MaterialKind, MaterialStore
from simulator.scheduler import Scheduler
from simulator.settings import SimulatorSettings, load_settings
from simulator.state_lock import StateDirInUse, StateLock, hold_state_dir

log = logging.getLogger(__name__)

FETCH_KIND = {
    Fetch.DOWNLOAD: MaterialKind.DOWNLOAD,
    Fetch.CLONE: MaterialKind.CLONE,
    Fetch.MOUNT: MaterialKind.MOUNT,
}
_PARALLEL_STARTS = 16


class DockerCore(ThreadedBackend, Ledger[Attempt, Instance]):
    """The simulator backend's state and shared steps; `DockerBackend` is made of this and
    the parts that build on it."""

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
        self._attempts = {}
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

    def _release_state(self) -> None:
        if self._state_lock is not None:
            self._state_lock.release()
            self._state_lock = None

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

    def _stop_grace_seconds(self) -> float:
        return self.settings.stop_grace_seconds

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

    def _wait_instance(self, instance: Instance, reason: str) -> None:
        if instance.waiting_reason == reason:
            return
        instance.waiting_reason = reason
        self._emit(self._event(instance, EventKind.WAITING, reason=reason))

    def _write_run(self, instance: Instance, *, queued: bool) -> None:
        records.write_run(
            instance.dir,
            records.RunRecord(instance.run, queued, instance.placement, instance.task_attempt),
        )

    def _instance_from_labels(self, labels: dict[str, str]) -> Instance | None:
        attempt = self._attempt_from_labels(labels)
        if attempt is None or INDEX not in labels:
            return None
        return attempt.instances.get((labels.get(ROLE, ""), int(labels[INDEX])))

    def _attempt_from_labels(self, labels: dict[str, str]) -> Attempt | None:
        return self._attempts.get(f"{labels.get(JOB)}#{labels.get(ATTEMPT)}")

    def _oom_killed(self, info: ContainerInfo) -> bool:
        return killed_for_memory(self.engine.api, info)

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
        # a stop's SIGKILL is not a memory kill: only Docker's own flag is read then
        oom = bool(info and (info.oom_killed or (not attempt.stopping and self._oom_killed(info))))
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
            if attempt.forgotten or run not in (None, instance.run):
                return
            if not self._mark_ended(instance):
                return
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

    def _keep_log(self, instance_dir: Path) -> None:
        """Drop the middle of the instance's log when it is past log_limit_mb."""
        try:
            records.instance_log(instance_dir).keep_within(self.settings.log_limit_mb << 20)
        except OSError as exc:
            log.warning("cannot keep the log in %s within its limit: %s", instance_dir, exc)

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

    def _instance_dir(self, key: InstanceKey) -> Path:
        directory = records.attempt_dir(self.attempts_dir, key.job_id, key.attempt)
        return records.instance_dir(directory, key.role, key.index)

    def _schedule(self) -> None:
        """Place what is queued and fits now (docker_placing)."""
        raise NotImplementedError
