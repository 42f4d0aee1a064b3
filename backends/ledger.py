"""The bookkeeping both threaded backends keep about their attempts, in one place.

Finding an instance, marking an attempt stopping or forgotten, ending an instance once and the
relaunch checks are the same on Docker and Kubernetes, so they live here; how a core class
mixes it in: docs/architecture.md, Adding a backend.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from functools import partial
from typing import Generic, Protocol, TypeVar, cast

from backends.base import BackendError, InstanceKey, UnknownInstance
from backends.threaded import Keyed, attempt_id

log = logging.getLogger(__name__)


class Ending(Keyed, Protocol):
    """A backend's record of an instance, as far as ending it and running it again go."""

    ended: bool  # its current run's end was told


class Stoppable(Protocol):
    """A backend's record of an attempt, as far as running an instance again goes."""

    stopping: bool  # a stop of the attempt is under way (or was made)


class Tracked(Stoppable, Protocol):
    """A backend's record of an attempt, as the ledger keeps it."""

    forgotten: bool  # forgotten: nothing more is done for it

    @property
    def instances(self) -> Mapping[tuple[str, int], object]:
        """Its instances by (role, index)."""
        ...


def next_run(
    key: InstanceKey,
    attempt: Stoppable | None,
    instance: Ending | None,
    run: int | None,
    settled: Callable[[], bool] | None = None,
) -> int | None:
    """The run an ended instance runs again as (`Backend.relaunch`): `run`, else the one after
    its current run. None when run `run` was started already: a relaunch told twice (the job
    engine retrying a call that timed out) starts one run. Raises UnknownInstance when there
    is no such instance, BackendError while it has not ended (`settled`: what else its end
    needs, written records say) or while its attempt is being stopped.

    The checks every backend's `_relaunch` makes first, under its lock, before it resets the
    instance's per-run state and makes the new run."""
    where = f"{key.role}-{key.index} of attempt {key.attempt} of job {key.job_id}"
    if attempt is None or instance is None:
        raise UnknownInstance(f"no instance {where}")
    if run is not None and run <= instance.task_attempt:
        log.debug("%s: run %s was started already; not again", key, run)
        return None
    if not (instance.ended and (settled is None or settled())):
        raise BackendError(f"{where} has not ended; only an ended instance runs again")
    if attempt.stopping:
        raise BackendError(f"attempt {key.attempt} of job {key.job_id} is being stopped")
    return run if run is not None else instance.task_attempt + 1


AttemptT = TypeVar("AttemptT", bound=Tracked)
InstanceT = TypeVar("InstanceT", bound=Ending)


class Ledger(Generic[AttemptT, InstanceT]):
    """A backend's attempts by `attempt_id`, and the moves both backends make on them."""

    _lock: threading.RLock
    _attempts: dict[str, AttemptT]

    def _find(self, key: InstanceKey) -> tuple[AttemptT | None, InstanceT | None]:
        """The attempt and the instance `key` names; None for either that is not known (never
        launched, or forgotten)."""
        with self._lock:
            attempt = self._attempts.get(attempt_id(key.job_id, key.attempt))
            if attempt is None:
                return None, None
            # an attempt's instances are of the backend's instance type (InstanceT), always
            return attempt, cast("InstanceT | None", attempt.instances.get((key.role, key.index)))

    def _rerun(
        self, key: InstanceKey, run: int | None, settled: Callable[[InstanceT], bool] | None = None
    ) -> tuple[AttemptT, InstanceT, int] | None:
        """The instance `key` names, its attempt, and the run it runs again as (`next_run`,
        whose errors it raises); None when that run was started already. Call it holding the
        lock: the instance's reset for its new run must follow under the same hold."""
        with self._lock:
            attempt, instance = self._find(key)
            ended = partial(settled, instance) if settled and instance is not None else None
            next_one = next_run(key, attempt, instance, run, ended)
            if next_one is None:
                return None
            assert attempt is not None and instance is not None  # next_run says so
            return attempt, instance, next_one

    def _mark_stopping(self, stopped_id: str) -> AttemptT | None:
        """Mark the attempt as being stopped (its instances' ends are told as STOPPED, none runs
        again); None when it is not known. Call it holding the lock when what follows must
        see the attempt as this left it."""
        with self._lock:
            attempt = self._attempts.get(stopped_id)
            if attempt is not None:
                attempt.stopping = True
            return attempt

    def _pop_forgotten(self, forgotten_id: str) -> AttemptT | None:
        """Take the attempt out of the ledger, marked forgotten for whoever still holds it (a
        start under way gives up); None when it is not known (forgotten twice)."""
        with self._lock:
            attempt = self._attempts.pop(forgotten_id, None)
            if attempt is not None:
                attempt.forgotten = True
            return attempt

    def _mark_ended(self, instance: InstanceT) -> bool:
        """Mark the instance's current run as ended; False when it was already, so that an end
        told twice (a watch and a listing both seeing it, a stop racing an exit) is told once."""
        with self._lock:
            if instance.ended:
                return False
            instance.ended = True
            return True
