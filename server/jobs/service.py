"""The job service: submit, stop and follow jobs that survive a restart of the server.

One task hands the backend's events to each job's runner; every change is stored before it is
announced, and `start()` reconciles unfinished jobs with the backend. Secrets are kept in memory
only, so a job resumed after a restart runs without them (docs/architecture.md, A job's path).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from backends.base import (
    Backend,
    BackendHealth,
    InstanceKey,
    LaunchRequest,
    LogChunk,
    ReportsHealth,
    UnknownInstance,
    utcnow,
)
from server.events import EventBus
from server.jobs.journal import Journal
from server.jobs.machine import JobMachine, MachineSnapshot
from server.jobs.observer import JobObserver, tell
from server.jobs.reconcile import Resumption, plan_resumption, stale_attempts
from server.jobs.recorder import JobRecorder, load_machine
from server.jobs.runner import JobRunner, release_attempt
from server.jobs.service_machine import BackendOutage, ServiceMachine, stuck_in_starting
from server.jobs.submission import Submissions, SubmitOutcome
from server.marketplace.references import ReferenceResolver
from server.protocol import Issue, JobSpec
from server.shapes.values import Job, User
from server.store import Store

log = logging.getLogger(__name__)

STOP_WAIT_SECONDS = 5.0  # how long `stop` waits for the stop to be on record before it answers
HEALTH_INTERVAL = 0.25  # how often the backend's health is looked at (a cheap in-memory read)


# --- what the API gets back --------------------------------------------------------------------


@dataclass(frozen=True)
class StopOutcome:
    job: Job | None
    errors: list[Issue]


# --- one job in this process -------------------------------------------------------------------


@dataclass(eq=False)
class _Live:
    """A job this process drives: its runner, its journal, the task that runs them."""

    runner: JobRunner
    journal: Journal
    task: asyncio.Task[None] | None = None
    timed_out: set[tuple[int, str, int, int]] = field(default_factory=set)


# --- the service -------------------------------------------------------------------------------


class JobService:
    """Jobs on one backend, persisted in `store`, announced on `bus`."""

    def __init__(
        self,
        store: Store,
        backend: Backend,
        bus: EventBus,
        *,
        starting_timeout: float = 300.0,
        references: ReferenceResolver | None = None,
    ) -> None:
        """`references` resolves marketplace:// and http(s):// references; by default one
        without items or storages (a marketplace reference is then not found)."""
        if starting_timeout <= 0:
            raise ValueError(f"starting_timeout must be above 0 seconds, got {starting_timeout}")
        self.store = store
        self.backend = backend
        self.bus = bus
        self.starting_timeout = starting_timeout
        self.references = references if references is not None else ReferenceResolver()
        self._live: dict[str, _Live] = {}
        self._background: list[asyncio.Task[None]] = []
        self._started = False
        self._reconciled = False  # every unfinished job this process can drive has its runner
        self._taking_over = asyncio.Lock()
        self._health = BackendHealth()  # as last told to the jobs
        self._healthy_since = float("-inf")  # loop time the backend last answered again
        self.recorder = JobRecorder(store, bus)  # every job's Journal saves and announces here
        self.submissions = Submissions(
            store, backend, self.references, self.recorder, start=self._start_submitted
        )

    @property
    def observer(self) -> JobObserver:
        """Told of stored changes and of the backend's health (server.metrics)."""
        return self.recorder.observer

    @observer.setter
    def observer(self, observer: JobObserver) -> None:
        self.recorder.observer = observer

    # --- lifecycle ---

    async def start(self) -> None:
        """Start the backend and the bus, reconcile, and resume every unfinished job."""
        if self._started:
            return
        self._started = True
        await _call_if_present(self.backend, "start")
        await _call_if_present(self.bus, "start")
        await self._reconcile()
        self._background = [
            asyncio.create_task(self._dispatch(), name="job events"),
            asyncio.create_task(self._watch_starting(), name="starting timeout"),
            asyncio.create_task(self._watch_backend(), name="backend health"),
        ]

    async def close(self) -> None:
        """Stop driving jobs and close the backend; running instances keep running and are
        reconciled at the next start. Writes under way are finished first."""
        tasks = [*self._background]
        tasks += [live.task for live in self._live.values() if live.task is not None]
        self._background = []
        self._live.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.recorder.finish()
        await self.backend.close()

    # --- submit, stop, logs ---

    async def submit(
        self,
        user: User,
        config: str,
        parameters: dict[str, Any] | None = None,
        virtual_cluster: str | None = None,
        *,
        made_from: Iterable[str] = (),
        used: Iterable[str] = (),
    ) -> SubmitOutcome:
        """Store the job (WAITING), count its marketplace submits and start running it
        (`Submissions.submit`)."""
        if not self._started:
            raise RuntimeError("start the job service before submitting jobs")
        return await self.submissions.submit(
            user, config, parameters, virtual_cluster, made_from=made_from, used=used
        )

    async def stop(self, user: User, job_id: str) -> StopOutcome:
        """Ask the job to stop; answers once the stop is on record (or after a few seconds).

        Errors on `id`: `not-found`, `forbidden` (neither the owner nor an admin), `final`
        (the job has ended), `unavailable` (the server is still starting, or the job's saved
        state cannot be read). A job no runner drives (its runner failed, or it could not be
        resumed after a restart) is stopped here (`_stop_unattended`).
        """
        job = await asyncio.to_thread(self.store.get_job, job_id)
        if job is None:
            return _stop_error("not-found", f"no job has id {job_id!r}")
        if not user.admin and job.owner_id != user.id:
            return _stop_error(
                "forbidden",
                f"job {job_id!r} belongs to {job.owner}; only its owner or an admin may stop it",
            )
        if job.state.is_final:
            return _stop_error("final", f"job {job_id!r} has ended already ({job.state})", job)
        live = self._live.get(job_id)
        reason = f"stop requested by {user.name}"
        if live is None and not self._reconciled:
            return _stop_error(
                "unavailable",
                f"job {job_id!r} is not driven by this server process yet; try again once the "
                "server has finished starting",
                job,
            )
        if live is None:
            return await self._stop_unattended(job, reason)
        live.runner.request_stop(reason)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(live.journal.stop_on_record.wait(), STOP_WAIT_SECONDS)
        return StopOutcome(job=await asyncio.to_thread(self.store.get_job, job_id), errors=[])

    async def _stop_unattended(self, job: Job, reason: str) -> StopOutcome:
        """Stop a job that no runner drives: release its attempt on the backend (failures are
        logged) and end it STOPPED in the store, so no job is ever left live and unstoppable."""
        async with self._taking_over:
            try:
                snapshot = await asyncio.to_thread(load_machine, self.store, job.id)
            except Exception:
                log.exception("job %s: its saved state cannot be read; not stopped", job.id)
                return _stop_error(
                    "unavailable", f"job {job.id!r}: its saved state cannot be read", job
                )
            machine = ServiceMachine.restore(snapshot)
            saved = len(machine.transitions)
            machine.request_stop(reason)
            if not machine.is_final:
                grace = machine.policy.stop_grace_seconds
                await release_attempt(self.backend, job.id, machine.attempt, grace)
                machine.abandon("no runner drove the job any more; its attempt was released")
            changes = machine.transitions[saved:]
            events = await self.recorder.save_changes(job.id, machine.snapshot(), changes)
            await self.recorder.announce(job.id, events, machine.state)
        return StopOutcome(job=await asyncio.to_thread(self.store.get_job, job.id), errors=[])

    async def logs(
        self,
        job_id: str,
        role: str,
        index: int,
        *,
        follow: bool = False,
        offset: int = 0,
        tail: int | None = None,
    ) -> AsyncIterator[LogChunk]:
        """The output of an instance of the job's current attempt. Raises UnknownInstance (a
        BackendError) for an unknown job or an instance that has no log yet."""
        job = await asyncio.to_thread(self.store.get_job, job_id)
        if job is None:
            raise UnknownInstance(f"no job has id {job_id!r}")
        key = InstanceKey(job_id=job_id, attempt=job.attempt, role=role, index=index)
        async for chunk in self.backend.logs(key, offset=offset, tail=tail, follow=follow):
            yield chunk

    # --- running jobs ---

    def _start_submitted(
        self, spec: JobSpec, machine: ServiceMachine, user: str, request: LaunchRequest
    ) -> None:
        """Run a job just stored by `submit`, with the first attempt's request built there."""
        self._run(spec, machine, user, Resumption(machine, fresh=True), request)

    def _run(
        self,
        spec: JobSpec,
        machine: JobMachine,
        user: str,
        plan: Resumption,
        request: LaunchRequest | None = None,
    ) -> None:
        """Register the job's runner (before anything it launches can report) and drive it;
        `request` is the current attempt's LaunchRequest when it was built already."""
        journal = Journal(self.recorder, machine.job_id, machine)
        runner = JobRunner(
            spec,
            self.backend,
            job_id=machine.job_id,
            user=user,
            machine=machine,
            on_change=journal,
            request=request,
        )
        live = _Live(runner=runner, journal=journal)
        self._live[machine.job_id] = live
        for event in plan.events:
            runner.feed(event)
        if not self._health.healthy:
            runner.feed(_outage_event(machine.job_id, self._health))
        live.task = asyncio.create_task(self._drive(live, plan), name=f"job {machine.job_id}")

    async def _drive(self, live: _Live, plan: Resumption) -> None:
        runner = live.runner
        try:
            if plan.fresh:
                await runner.run()
            else:
                await runner.resume(plan.pending)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "job %s: its runner failed and could not end the job; stopping it ends it",
                runner.job_id,
            )
        finally:
            if self._live.get(runner.job_id) is live:
                del self._live[runner.job_id]

    async def _dispatch(self) -> None:
        """Hand every backend event to the runner of its job (events of jobs not driven here,
        ended ones for instance, are dropped)."""
        while True:
            try:
                async for event in self.backend.events():
                    live = self._live.get(event.job_id)
                    if live is not None:
                        live.runner.feed(event)
            except Exception:
                log.exception("reading the backend's events failed; reading again")
            await asyncio.sleep(1.0)

    def health(self) -> BackendHealth:
        """The backend's health (always healthy for a backend that cannot tell)."""
        if isinstance(self.backend, ReportsHealth):
            return self.backend.health()
        return BackendHealth()

    async def _watch_backend(self) -> None:
        """Tell every live job when the backend's engine stops answering and when it answers
        again (it then has applied what it missed): their reasons say what they wait for."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(HEALTH_INTERVAL)
            try:
                health = self.health()
            except Exception:
                log.exception("reading the backend's health failed; read again shortly")
                continue
            if health.healthy == self._health.healthy and health.reason == self._health.reason:
                continue
            if health.healthy:
                self._healthy_since = loop.time()
                was = self._health.since
                gone = f" after {(utcnow() - was).total_seconds():.0f} s" if was else ""
                health = health.model_copy(update={"reason": f"the backend answers again{gone}"})
                log.warning("the backend answers again%s; jobs go on", gone)
            else:
                log.warning("%s (%s)", health.reason, health.detail)
            self._health = health
            tell(self.observer.backend_health, health)
            for live in list(self._live.values()):
                live.runner.feed(_outage_event(live.runner.job_id, health))

    async def _watch_starting(self) -> None:
        """Declare LOST the instances stuck in STARTING for longer than the timeout; not while
        the backend is unreachable, nor until the timeout has passed since it answers again
        (time spent waiting for the engine is no sign of a stuck instance)."""
        interval = min(max(self.starting_timeout / 4, 0.05), 15.0)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            if not self._health.healthy:
                continue
            if loop.time() - self._healthy_since < self.starting_timeout:
                continue
            now = utcnow()
            for live in list(self._live.values()):
                machine = live.runner.machine
                for event in stuck_in_starting(machine, now=now, timeout=self.starting_timeout):
                    key = (event.attempt, event.role or "", event.index or 0, event.task_attempt)
                    if key in live.timed_out:
                        continue
                    live.timed_out.add(key)
                    log.warning("job %s: %s-%s %s", event.job_id, key[1], key[2], event.reason)
                    live.runner.feed(event)

    # --- reconciling ---

    async def _reconcile(self) -> None:
        jobs = await asyncio.to_thread(self.store.unfinished_jobs)
        reports = await self.backend.reconcile()
        specs = await asyncio.to_thread(self.store.job_specs, [job.id for job in jobs])
        snapshots: dict[str, MachineSnapshot] = {}
        for job in jobs:
            try:
                snapshots[job.id] = await asyncio.to_thread(load_machine, self.store, job.id)
            except Exception:
                log.exception("job %s: its saved state cannot be read; not resumed", job.id)
        current = {job_id: snapshot.record.attempt for job_id, snapshot in snapshots.items()}
        for job_id, attempt in stale_attempts(reports, current):
            try:
                await self.backend.forget(job_id, attempt)
            except Exception:
                log.exception("job %s: attempt %s cannot be released", job_id, attempt)
        for job in jobs:
            snapshot, spec = snapshots.get(job.id), specs.get(job.id)
            if snapshot is None or spec is None:
                continue
            try:
                plan = plan_resumption(snapshot, [r for r in reports if r.key.job_id == job.id])
                self._run(spec, plan.machine, job.owner, plan)
            except Exception:
                log.exception("job %s cannot be resumed; stopping it ends it", job.id)
        self._reconciled = True


def _outage_event(job_id: str, health: BackendHealth) -> BackendOutage:
    """What a job is told when the backend's health changes (the attempt is not looked at)."""
    return BackendOutage(
        job_id=job_id, attempt=0, over=health.healthy, reason=health.reason, at=utcnow()
    )


def _stop_error(code: str, message: str, job: Job | None = None) -> StopOutcome:
    return StopOutcome(job=job, errors=[Issue("id", code, message)])


async def _call_if_present(target: object, name: str) -> None:
    """Await `target.name()` when it has one (the Backend and EventBus protocols have no
    start; the Docker backend and the PostgreSQL bus do)."""
    method = getattr(target, name, None)
    if method is not None:
        await method()
