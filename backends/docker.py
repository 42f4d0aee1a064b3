"""The Backend on the local cluster simulator: one Docker container per task instance.

It turns a LaunchRequest into containers on a network of the attempt, placed by `simulator/`,
and Docker's events into InstanceEvents. This module launches, stops and forgets attempts; the
other parts (`docker_*`) and the state directory's layout: docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from backends import docker_records as records
from backends.base import (
    EventKind,
    InstanceReport,
    InstanceStatus,
    LaunchNote,
    LaunchRefused,
    LaunchRequest,
    Material,
)
from backends.docker_access import DockerAccess
from backends.docker_adopt import Adopting
from backends.docker_attempts import Attempt, demand, gang_order
from backends.docker_core import FETCH_KIND
from backends.docker_placing import Placing
from backends.docker_specs import RUN, run_owner
from simulator.containers import OWNER, ContainerEvent
from simulator.prereqs import Simulated, UnservableMaterial, check_storage

__all__ = ["DockerBackend", "run_owner"]

log = logging.getLogger(__name__)


class DockerBackend(Placing, Adopting, DockerAccess):
    """The simulator backend. Create it, `await start()`, then use the Backend methods."""

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

    # --- SamplesUsage ------------------------------------------------------------------------

    # --- launching ---------------------------------------------------------------------------

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
                kinds = self.materials.simulated(FETCH_KIND[material.kind], material.uris)
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
                        FETCH_KIND[material.kind],
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

    # --- stopping ----------------------------------------------------------------------------

    def _stop(self, stopped_id: str, grace: float) -> None:
        with self._lock:
            attempt = self._mark_stopping(stopped_id)
            if attempt is None:
                return
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
            attempt = self._pop_forgotten(forgotten_id)
            if attempt is None:
                return
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

    # --- after a restart ---------------------------------------------------------------------

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

    # --- small parts -------------------------------------------------------------------------
