"""What the job service tells an onlooker (the Prometheus endpoint's counters): every change of
a job once it is stored, and every change of the backend's health. The service knows nothing of
what is done with it; an onlooker that fails is logged and the job goes on."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from backends.base import BackendHealth
from server.jobs.machine import MachineSnapshot
from server.shapes.job_states import Transition
from server.shapes.values import NewEvent

log = logging.getLogger(__name__)


class JobObserver(Protocol):
    def saved(self, snapshot: MachineSnapshot, changes: Sequence[Transition | NewEvent]) -> None:
        """A job's `changes` are stored; `snapshot` is the machine as stored with them."""

    def backend_health(self, health: BackendHealth) -> None:
        """The backend's health changed (it stopped answering, or answers again)."""


class NoObserver:
    """The service's onlooker until one is set: it does nothing."""

    def saved(self, snapshot: MachineSnapshot, changes: Sequence[Transition | NewEvent]) -> None:
        return None

    def backend_health(self, health: BackendHealth) -> None:
        return None


def tell(call: Callable[..., None], *args: object) -> None:
    """Call an observer's hook; its failure is logged, never the job's."""
    try:
        call(*args)
    except Exception:
        log.exception("the job service's observer failed")
