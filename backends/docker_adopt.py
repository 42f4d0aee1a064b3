"""Taking back what this owner left running after a server restart, and catching up with what
Docker did while no event stream was open (the engine away, then back).
"""

from __future__ import annotations

import json
import logging
import threading

from backends import docker_records as records
from backends.base import EventKind, Placement, utcnow
from backends.docker_attempts import Attempt, Instance, demand, gang_position, recorded_attempt
from backends.docker_specs import GPUS, NODE, PORTS, RUN, TASK_ATTEMPT, left_by_dead_run
from backends.docker_start_order import StartOrder
from simulator.cluster import Demand
from simulator.containers import OWNER, ContainerInfo

log = logging.getLogger(__name__)


class Adopting(StartOrder):
    """Adoption of containers and networks after a restart, and re-listing after an outage."""

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
