"""Letting a started gang's containers run their commands: at once, or once what their role
depends on holds (another role running, ready, or done), checked from here.
"""

from __future__ import annotations

import logging
import time

from backends import docker_records as records
from backends import start_gate
from backends.base import EventKind, ReadinessCheck, RoleLaunch, StartDependency
from backends.docker_attempts import Attempt, Instance
from backends.docker_core import DockerCore

log = logging.getLogger(__name__)


class StartOrder(DockerCore):
    """Opening the gates of started containers, in their roles' start order."""

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
