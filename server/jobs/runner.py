"""Drive one job to its end: the state machine decides, the runner carries it out on the backend.

`JobRunner` owns no policy: it feeds the backend's events to the machine (`feed`, the one way
in), carries out the actions it returns in order and calls its change hook after each change,
so `paigraph run` and the service (with a `Journal` as hook) share it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence

from backends.base import (
    Backend,
    BackendError,
    EventKind,
    InstanceEvent,
    InstanceKey,
    LaunchRefused,
    LaunchRequest,
)
from server.jobs.launch import default_fs_of, launch_request
from server.jobs.machine import (
    Action,
    Finish,
    JobMachine,
    LaunchAttempt,
    ReleaseAttempt,
    RetryInstance,
    StopAttempt,
)
from server.jobs.policy import JobPolicy, job_policy
from server.protocol.model import JobSpec
from server.shapes.job_record import JobRecord

log = logging.getLogger(__name__)

LOG_TAIL_LINES = 200
LOG_TAIL_CHARS = 16 * 1024
SETTLE_SECONDS = 5.0  # after a stop: how long to wait for the instances' own exit events


class JobRunner:
    """Runs `spec` as job `job_id` on `backend` until the job is final."""

    def __init__(
        self,
        spec: JobSpec,
        backend: Backend,
        *,
        job_id: str,
        user: str = "default",
        policy: JobPolicy | None = None,
        machine: JobMachine | None = None,
        on_change: Callable[[JobMachine], Awaitable[None] | None] | None = None,
        request: LaunchRequest | None = None,
    ) -> None:
        """`request`, when given, is the LaunchRequest of the machine's current attempt, built
        already (the service builds the first attempt's at submission, to ask the backend
        whether it refuses the job); otherwise it is built here, so a job that cannot run
        (NotRunnable) says so now, before anything starts."""
        self.spec = spec
        self.backend = backend
        self.job_id = job_id
        self.user = user
        self.machine = machine or JobMachine(policy or job_policy(spec), job_id)
        self.on_change = on_change or (lambda machine: None)
        self._request = request
        if request is None:
            self.request(self.machine.attempt)
        self._events: asyncio.Queue[InstanceEvent] = asyncio.Queue()
        self._stop_reason: str | None = None
        self._wake = asyncio.Event()

    def request(self, attempt: int) -> LaunchRequest:
        """The LaunchRequest of `attempt`, built once per attempt: a retry gets its own (its
        attempt number, and with the ssh plugin's jobssh a new key pair)."""
        if self._request is None or self._request.attempt != attempt:
            self._request = launch_request(
                self.spec,
                job_id=self.job_id,
                attempt=attempt,
                user=self.user,
                default_fs=default_fs_of(self.backend),
            )
        return self._request

    def request_stop(self, reason: str = "stop requested by user") -> None:
        """Ask the job to stop; safe to call from a signal handler on the runner's loop."""
        self._stop_reason = reason
        self._wake.set()

    def feed(self, event: InstanceEvent) -> None:
        """Hand the runner one backend event; events of other jobs are ignored."""
        if event.job_id == self.job_id:
            self._events.put_nowait(event)
            self._wake.set()

    async def run(self, *, resume: bool = False, pending: Sequence[Action] = ()) -> JobRecord:
        """Run until the job is final, the backend's events coming by `feed`. With
        `resume=True` the machine was restored and is not started again, and `pending` (what a
        restart interrupted) is carried out first.

        An unexpected error (the backend raised, a bug) does not leave the job live with no one
        to drive it: the job ends (`JobMachine.abandon`) with the error in its reason, and the
        backend is asked to stop and forget the attempt."""
        try:
            await self._carry_out(list(pending) if resume else self.machine.start())
            while not self.machine.is_final:
                await self._next()
        except Exception as exc:
            await self._abandon(exc)
        return self.machine.record

    async def resume(self, pending: Sequence[Action]) -> JobRecord:
        """Go on with a restored machine, events coming by `feed`: first carry out `pending`,
        what a restart interrupted (`server.jobs.reconcile.plan_resumption`)."""
        return await self.run(resume=True, pending=pending)

    # --- when the runner itself fails ---------------------------------------------------------

    async def _abandon(self, error: Exception) -> None:
        """End the job after an unexpected error, saved with the error in its reason, then
        release the attempt whatever the save did."""
        log.error("job %s: its runner failed; the job is ended", self.job_id, exc_info=error)
        attempt = self.machine.attempt
        try:
            self.machine.abandon(f"the job engine hit an unexpected error: {_in_words(error)}")
            await self._changed()
        finally:
            await release_attempt(
                self.backend, self.job_id, attempt, self.machine.policy.stop_grace_seconds
            )

    # --- the loop --------------------------------------------------------------------------

    async def _changed(self) -> None:
        result = self.on_change(self.machine)
        if inspect.isawaitable(result):
            await result

    async def _next(self) -> None:
        """Wait for an event or a stop request, and act on it."""
        if self._events.empty() and self._stop_reason is None:
            self._wake.clear()
            await self._wake.wait()
        if self._stop_reason is not None:
            reason, self._stop_reason = self._stop_reason, None
            await self._carry_out(self.machine.request_stop(reason))
        while not self._events.empty():
            await self._apply(self._events.get_nowait())

    async def _apply(self, event: InstanceEvent) -> None:
        tail = ""
        if event.kind is EventKind.EXITED and event.exit_code not in (0, None):
            tail = await self._log_tail(event)
        await self._carry_out(self.machine.apply(event, log_tail=tail))

    async def _carry_out(self, actions: list[Action]) -> None:
        await self._changed()
        for action in actions:
            if isinstance(action, LaunchAttempt):
                await self._launch(action)
            elif isinstance(action, StopAttempt):
                await self.backend.stop(self.job_id, action.attempt, action.grace_seconds)
                await self._settle(action.attempt)
                await self._carry_out(self.machine.stop_completed(action.attempt))
            elif isinstance(action, RetryInstance):
                await self._relaunch(action)
            elif isinstance(action, ReleaseAttempt):
                await self.backend.forget(self.job_id, action.attempt)
            elif isinstance(action, Finish):
                break
            await self._changed()

    async def _launch(self, action: LaunchAttempt) -> None:
        if action.delay_seconds and not await self._pause(action.delay_seconds):
            return
        if self.machine.is_final or self.machine.attempt != action.attempt:
            return  # stopped while waiting to launch
        try:
            await self.backend.launch(self.request(action.attempt))
        except LaunchRefused as exc:
            await self._carry_out(self.machine.launch_refused(action.attempt, str(exc)))

    async def _relaunch(self, action: RetryInstance) -> None:
        if action.delay_seconds and not await self._pause(action.delay_seconds):
            return
        if self.machine.is_final or self.machine.attempt != action.attempt:
            return
        key = InstanceKey(
            job_id=self.job_id, attempt=action.attempt, role=action.role, index=action.index
        )
        with contextlib.suppress(BackendError):  # stopping or forgotten meanwhile: stop ends it
            await self.backend.relaunch(key, action.task_attempt)

    async def _pause(self, seconds: float) -> bool:
        """Sleep, unless a stop is asked for first; True when the sleep ran its course."""
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_requested(), seconds)
            return False
        return True

    async def _stop_requested(self) -> None:
        while self._stop_reason is None:
            self._wake.clear()
            await self._wake.wait()

    async def _settle(self, attempt: int) -> None:
        """Apply the stopped instances' own events (exit codes) before the stop is final."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_SECONDS
        while (
            any(not view.ended for view in self.machine.instances if view.attempt == attempt)
            and loop.time() < deadline
        ):
            if self._events.empty():
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), deadline - loop.time())
                continue
            await self._apply(self._events.get_nowait())

    async def _log_tail(self, event: InstanceEvent) -> str:
        if event.key is None:
            return ""
        try:
            chunks = [c.data async for c in self.backend.logs(event.key, tail=LOG_TAIL_LINES)]
        except Exception:
            return ""
        return "".join(chunks)[-LOG_TAIL_CHARS:]


def _in_words(error: Exception) -> str:
    """E.g. 'RuntimeError: the engine went away'; the type alone when there is no message."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


async def release_attempt(backend: Backend, job_id: str, attempt: int, grace: float) -> None:
    """Ask the backend to stop and forget an attempt; a failure is logged, not raised, since
    nothing more can be done about it here (the next start releases what is left)."""
    steps: tuple[tuple[str, Callable[[], Awaitable[None]]], ...] = (
        ("stopped", lambda: backend.stop(job_id, attempt, grace)),
        ("released", lambda: backend.forget(job_id, attempt)),
    )
    for step, call in steps:
        try:
            await call()
        except Exception:
            log.exception("job %s: attempt %s could not be %s", job_id, attempt, step)
