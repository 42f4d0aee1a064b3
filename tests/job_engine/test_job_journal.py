"""The Journal: after each change of a job's machine it saves what is new, in the order it was
made, through its Recorder, and announces only what was saved. Pure: a recorder in memory."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from server.jobs import JobState, job_policy
from server.jobs.journal import Journal
from server.jobs.machine import MachineSnapshot
from server.jobs.service_machine import (
    BACKEND_REACHABLE,
    BACKEND_UNREACHABLE,
    BackendOutage,
    ServiceMachine,
)
from server.shapes.job_states import Transition
from server.shapes.values import Event, NewEvent
from tests.job_engine.test_job_reconcile import T0, place
from tests.service_support import ps_worker, spec_of

pytestmark = pytest.mark.anyio


class InMemory:
    """A Recorder that keeps what it is given, in the order it is given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.sequence = 0

    async def save_changes(
        self, job_id: str, snapshot: MachineSnapshot, changes: Sequence[Transition | NewEvent]
    ) -> list[Event]:
        self.calls.append(("save", list(changes)))
        stored = []
        for change in changes:
            self.sequence += 1
            stored.append(
                Event(
                    job_id=job_id,
                    sequence=self.sequence,
                    at=change.at,
                    type="change",
                    message=None,
                    state=None,
                    role=None,
                    index=None,
                    attempt=1,
                )
            )
        return stored

    async def announce(self, job_id: str, events: Sequence[Event], state: JobState) -> None:
        self.calls.append(("announce", [e.sequence for e in events]))


def machine() -> ServiceMachine:
    return ServiceMachine(job_policy(spec_of(ps_worker())), "j1", at=T0)


async def test_what_is_new_is_saved_in_order_then_announced_and_nothing_twice() -> None:
    job = machine()
    recorder = InMemory()
    journal = Journal(recorder, "j1", job)
    job.start(at=T0)
    await journal(job)  # started: no transition, but the snapshot changed
    assert recorder.calls == [("save", []), ("announce", [])]
    await journal(job)  # nothing changed: nothing written
    assert len(recorder.calls) == 2
    job.apply(BackendOutage(job_id="j1", attempt=0, reason="away", at=T0))
    place(job, [("ps", 0)])
    await journal(job)
    saved = recorder.calls[2][1]
    assert isinstance(saved, list)
    kinds = [c.type if isinstance(c, NewEvent) else c.to_state for c in saved]
    assert kinds == [  # the notes first: they were made before the placement
        BACKEND_UNREACHABLE,
        BACKEND_REACHABLE,  # a fact from the backend ends the outage
        JobState.STARTING,  # the instance, then the job
        JobState.STARTING,
    ]
    assert recorder.calls[3] == ("announce", [1, 2, 3, 4])


async def test_the_stop_is_on_record_once_it_is_saved() -> None:
    job = machine()
    job.start(at=T0)
    journal = Journal(InMemory(), "j1", job)
    assert not journal.stop_on_record.is_set()
    job.request_stop("stop requested by ann", at=datetime(2024, 5, 1, 12, 1, tzinfo=UTC))
    assert not journal.stop_on_record.is_set()
    await journal(job)
    assert journal.stop_on_record.is_set()
    assert Journal(InMemory(), "j1", job).stop_on_record.is_set()  # one made after it knows
