"""Starting a placed gang: its images, prerequisites and mounts, network, runtime files, containers.

The containers wait at a gate until every one has started, so a port another program took
meanwhile restarts the whole gang on fresh ports before any command ran (why:
docs/architecture.md, The Docker backend's state directory and entrypoint).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import NamedTuple

from backends import docker_pull, start_gate
from backends import docker_records as records
from backends.base import WORK_DIR, EventKind, Fetch, LaunchRequest, Material, Placement, RoleLaunch
from backends.docker_attempts import Attempt, Instance, gang_order, port_asks
from backends.docker_core import FETCH_KIND
from backends.docker_specs import (
    attempt_labels,
    container_spec,
    gpu_env,
    network_name,
    simulated_gpu_note,
)
from backends.docker_start_order import StartOrder
from backends.hdfs_standin import DFS_DIR, standin_tools
from backends.runtime_env import runtime_env
from backends.secrets_env import secret_environment, with_secret_variables
from backends.ssh_access import ssh_files
from simulator.cluster import Slot
from simulator.containers import (
    BindMount,
    ContainerSpec,
    EngineError,
    EngineUnreachable,
    NetworkInfo,
    PortTaken,
)
from simulator.ports import PortError
from simulator.prereqs import MaterialError, Mount

log = logging.getLogger(__name__)

PORT_TRIES = 3  # starts of a gang (or a relaunch) whose ports other programs keep taking


class _GangSetup(NamedTuple):
    """What a gang's containers are made with: the materials' mounts by (role, name), per role
    the optional materials it starts without, and the gang's network with its addresses in
    the gang's order."""

    mounts: dict[tuple[str, str], BindMount]
    skipped: dict[str, list[str]]
    network: str
    addresses: list[str]


class GangStart(StartOrder):
    """Starting the containers of a placed attempt, all of them or none running a command."""

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

    def _start_attempt(
        self,
        attempt: Attempt,
        slots: dict[tuple[str, int], Slot],
        ports: dict[tuple[str, int], dict[str, list[int]]],
    ) -> None:
        """Fetch prerequisites, make the network, then start every container in parallel."""
        setup = self._set_up_gang(attempt)
        if setup is None:
            return
        if attempt.forgotten:  # forgotten while its network was made: `_forget` missed it
            self._remove_network(setup.network)
            return
        self._gate_all(attempt)
        started = self._start_containers(attempt, slots, ports, setup)
        if started is None:
            return
        self._emit_gang_placed(attempt, slots, setup.skipped)
        self._release_started(attempt, started)
        # every container may have failed to start: then the network is not needed any more
        self._cleanup_if_done(attempt)

    def _set_up_gang(self, attempt: Attempt) -> _GangSetup | None:
        """The gang's materials and network; None when they could not be had (the attempt is
        then placed again once the engine answers, or has failed to start)."""
        try:
            mounts, skipped = self._materialize(attempt.request)
            network, addresses = self._gang_network(attempt)
        except EngineUnreachable as exc:
            self._requeue(attempt, exc)
            return None
        except (EngineError, MaterialError, OSError) as exc:
            self._end_all(attempt, EventKind.START_FAILED, str(exc))
            return None
        return _GangSetup(mounts, skipped, network, addresses)

    def _gate_all(self, attempt: Attempt) -> None:
        """Hold every instance at the gate until the whole gang has started."""
        with self._lock:
            for instance in attempt.instances.values():
                instance.gated = True

    def _start_containers(
        self,
        attempt: Attempt,
        slots: dict[tuple[str, int], Slot],
        ports: dict[tuple[str, int], dict[str, list[int]]],
        setup: _GangSetup,
    ) -> list[Instance] | None:
        """Start the gang's containers, again with fresh ports while ports are lost to other
        programs; the instances that started, or None when the attempt was queued again
        because the engine went away."""
        for tries_left in range(PORT_TRIES - 1, -1, -1):
            specs = self._gang_specs(attempt, slots, ports, setup)
            failed = self._run_gang(attempt, specs, retry_ports=tries_left > 0)
            unreached = [e for _, e in failed if isinstance(e, EngineUnreachable)]
            if unreached:
                self._requeue(attempt, unreached[0])
                return None
            lost = [(i, e) for i, e in failed if isinstance(e, PortTaken)]
            if not lost or not self._new_ports_for(attempt, lost, ports):
                break
        return [i for i, _ in specs if not i.ended]

    def _gang_specs(
        self,
        attempt: Attempt,
        slots: dict[tuple[str, int], Slot],
        ports: dict[tuple[str, int], dict[str, list[int]]],
        setup: _GangSetup,
    ) -> list[tuple[Instance, ContainerSpec]]:
        """One try's container of every instance still to start, its runtime files written and
        its log created, with the placements (and so ports) the gang has now."""
        order = gang_order(attempt.request)
        placements = {
            (role.name, index): Placement(
                node=slots[(role.name, index)].node,
                host_ip=setup.addresses[n],
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
            spec = self._prepare_run(
                attempt, instance, placements, setup.network, setup.mounts, slot
            )
            records.create_log(instance.dir)
            specs.append((instance, spec))
        return specs

    def _emit_gang_placed(
        self,
        attempt: Attempt,
        slots: dict[tuple[str, int], Slot],
        skipped: dict[str, list[str]],
    ) -> None:
        """PLACED for every instance that has not ended, in the gang's order."""
        for role, index in gang_order(attempt.request):
            instance = attempt.instances[(role.name, index)]
            if not instance.ended:
                slot = slots[(role.name, index)]
                self._emit_placed(attempt.request, instance, slot, skipped.get(role.name, []))

    def _release_started(self, attempt: Attempt, started: list[Instance]) -> None:
        """Open the gate of the started instances that depend on no other role; the others
        wait, on a thread of their own, for the roles they depend on."""
        request = attempt.request
        held = [i for i in started if request.role(i.key.role).depends_on]
        self._open_gates([i for i in started if i not in held])
        if held:
            threading.Thread(
                target=self._hold_until_dependencies,
                args=(attempt, held),
                name=f"start-order-{attempt.id}",
                daemon=True,
            ).start()

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
                        FETCH_KIND[material.kind],
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


def skipped_note(material: Material, error: Exception) -> str:
    """What the instance's PLACED event says of an optional material it starts without."""
    return (
        f"warning: {_KIND_WORDS[material.kind]} prerequisite {material.name!r} could not be "
        f"fetched ({error}); its failurePolicy is ignore, so the instance starts without "
        f"{WORK_DIR}/{material.name}"
    )


_KIND_WORDS = {Fetch.DOWNLOAD: "data", Fetch.CLONE: "script", Fetch.MOUNT: "storage"}
