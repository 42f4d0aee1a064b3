"""Keeping a job's changes: what its runner saves and announces after each change of its machine.

A `Journal` is the runner's change hook in the service: it hands what is new since the last
save to a `Recorder` in one transaction, then has it announced, so a subscriber woken by a
notice always finds the events it announced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from server.jobs.machine import JobMachine, MachineSnapshot
from server.jobs.service_machine import Note, ServiceMachine
from server.shapes.job_states import JobState, Transition
from server.shapes.values import Event, NewEvent


class Recorder(Protocol):
    """Where a job's changes are kept and announced."""

    async def save_changes(
        self, job_id: str, snapshot: MachineSnapshot, changes: Sequence[Transition | NewEvent]
    ) -> list[Event]:
        """Write the machine's snapshot and the new events together; the stored events."""
        ...

    async def announce(self, job_id: str, events: Sequence[Event], state: JobState) -> None:
        """Tell subscribers that the job has new events (after they are stored)."""
        ...


class Journal:
    """One job's change hook: save the machine with its new events, then announce them."""

    def __init__(self, recorder: Recorder, job_id: str, machine: JobMachine) -> None:
        self.recorder = recorder
        self.job_id = job_id
        self.saved = len(machine.transitions)  # transitions already in the event log
        self.written = machine.snapshot().model_dump_json()
        self.stop_on_record = asyncio.Event()  # set once a stop (or the end) is saved
        if machine.record.stop_reason is not None or machine.is_final:
            self.stop_on_record.set()

    async def __call__(self, machine: JobMachine) -> None:
        snapshot = machine.snapshot()
        transitions = machine.transitions[self.saved :]
        notes = machine.take_notes() if isinstance(machine, ServiceMachine) else []
        changes = in_order(transitions, self.saved, notes)
        text = snapshot.model_dump_json()
        if not changes and text == self.written:
            return
        events = await self.recorder.save_changes(self.job_id, snapshot, changes)
        self.saved += len(transitions)
        self.written = text
        record = snapshot.record
        if record.stop_reason is not None or record.state.is_final:
            self.stop_on_record.set()
        await self.recorder.announce(self.job_id, events, record.state)


def in_order(
    transitions: Sequence[Transition], first: int, notes: Sequence[Note]
) -> list[Transition | NewEvent]:
    """The new transitions (the first being the machine's `first`) and notes, as they were
    made: each note before the transitions made after it."""
    changes: list[Transition | NewEvent] = []
    waiting = sorted(notes, key=lambda note: note.position)
    for number, transition in enumerate(transitions, start=first):
        while waiting and waiting[0].position <= number:
            changes.append(_note_event(waiting.pop(0)))
        changes.append(transition)
    changes += map(_note_event, waiting)
    return changes


def _note_event(note: Note) -> NewEvent:
    return NewEvent(
        type=note.type, at=note.at, message=note.message, state=note.state, attempt=note.attempt
    )
