"""Starting one ended instance again on its own (a task retry without gang allocation).

It is placed alone, keeps its address (and its ports when they are free) so the environment
its peers started with stays true, and each run's container carries its run number, so events
of an earlier run are never taken for the current one.
"""

from __future__ import annotations

import threading

from backends import docker_records as records
from backends.base import EventKind, InstanceKey, Placement
from backends.docker_attempts import Attempt, Instance, gang_order, gang_position
from backends.docker_gang import PORT_TRIES, GangStart
from simulator.cluster import Placed
from simulator.containers import EngineError, EngineUnreachable
from simulator.ports import PortError
from simulator.prereqs import MaterialError


class Relaunching(GangStart):
    """Queueing an ended instance to run again, and starting its new container once placed."""

    def _relaunch(self, key: InstanceKey, run: int | None) -> None:
        """Queue an ended instance to run again as task attempt `run`; its events start over
        from PLACED. A run that was started already is not started again."""
        with self._lock:
            # the exit record is written after `ended` is set: its end needs both
            found = self._rerun(key, run, settled=lambda i: records.has_exit(i.dir))
            if found is None:
                return
            _, instance, next_one = found
            records.remove_exit(instance.dir)
            instance.ended = False
            instance.exit_code = None
            instance.ran = instance.ready = False
            instance.readiness, instance.next_check = None, 0.0
            instance.gave_up = False
            instance.started_at = None
            instance.waiting_reason = None
            instance.run += 1
            instance.task_attempt = next_one
            old, instance.container_id = instance.container_id, None
            if old:
                self._by_container.pop(old, None)
            self._write_run(instance, queued=True)
            self._scheduler.add_relaunch(instance)
        records.log_retry(instance.dir, instance.task_attempt)
        if old:
            self._remove(old)  # its address is given to the new run
        self._schedule()

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
        for tries_left in range(PORT_TRIES - 1, -1, -1):
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
