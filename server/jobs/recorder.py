"""Keeping and announcing a job's changes: the store first, then the bus.

Every job's `Journal` (`journal.py`) hands its changes here rather than to the service, so the
one rule that makes subscriptions trustworthy lives in one small place: a change is written (one
transaction, made again while the database cannot take it) before its notice is published, and
a subscriber woken by a notice always finds the events it announced.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from server.events import BusClosedError, BusUnavailableError, EventBus, JobNotice
from server.jobs.machine import MachineSnapshot
from server.jobs.observer import JobObserver, NoObserver, tell
from server.shapes.job_states import JobState, Transition
from server.shapes.values import Event, NewEvent
from server.store import Store
from server.store.availability import database_unavailable
from simulator.backoff import Backoff

log = logging.getLogger(__name__)

SAVE_RETRY_FIRST = 0.2  # seconds before a write the database refused is made again; doubled
SAVE_RETRY_MAX = 5.0  # ... up to this


def load_machine(store: Store, job_id: str) -> MachineSnapshot:
    """The job's machine as last saved (`JobMachine.restore` rebuilds it): the store keeps it
    as JSON, since its policy is the engine's own value."""
    return MachineSnapshot.model_validate_json(store.machine_json(job_id))


class JobRecorder:
    """Writes jobs' changes to `store` and announces them on `bus` (the journals' Recorder)."""

    def __init__(self, store: Store, bus: EventBus) -> None:
        self.store = store
        self.bus = bus
        self.observer: JobObserver = NoObserver()  # told of stored changes (server.metrics)
        self._writes: set[asyncio.Future[list[Event]]] = set()

    async def save_changes(
        self, job_id: str, snapshot: MachineSnapshot, changes: Sequence[Transition | NewEvent]
    ) -> list[Event]:
        """Write the job's machine and its new events in one transaction (`Store.save_machine`),
        in a thread; a write under way finishes even when its runner is cancelled (`finish`
        waits for it), so what was written and what the runner saw never part.

        While the database cannot be used (restarting, unreachable, its disk full) the write is
        made again with back-off until it can: the runner waits, and the backend's events queue
        up meanwhile, so nothing is lost and nothing is decided twice."""
        backoff, failing_since = Backoff(SAVE_RETRY_FIRST, SAVE_RETRY_MAX), None
        while True:
            write = asyncio.ensure_future(
                asyncio.to_thread(self.store.save_machine, job_id, snapshot, list(changes))
            )
            self._writes.add(write)
            write.add_done_callback(self._writes.discard)
            try:
                events = await asyncio.shield(write)
            except Exception as exc:
                if not database_unavailable(exc):
                    raise
                if failing_since is None:
                    failing_since = asyncio.get_running_loop().time()
                    log.warning(
                        "job %s: the database cannot take its changes (%s); "
                        "writing them again until it can",
                        job_id,
                        str(exc).splitlines()[0],
                    )
                await asyncio.sleep(backoff.next_delay())
                continue
            if failing_since is not None:
                took = asyncio.get_running_loop().time() - failing_since
                log.warning("job %s: its changes are written, after %.1f s", job_id, took)
            tell(self.observer.saved, snapshot, changes)
            return events

    async def announce(self, job_id: str, events: Sequence[Event], state: JobState) -> None:
        """Publish a notice of the job's stored `events` on the bus; a bus that cannot take it
        is logged (subscribers catch up from the store)."""
        if not events:
            return
        notice = JobNotice(job_id=job_id, sequence=events[-1].sequence, state=state.value)
        try:
            await self.bus.publish(notice)
        except (BusClosedError, BusUnavailableError) as exc:
            # the event log has the change; subscribers catch up on their next notice or resync
            log.warning("job %s: notice not published: %s", job_id, exc)

    async def finish(self) -> None:
        """Wait for the writes under way (their runners may have been cancelled)."""
        if self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)
