"""What `paigraph serve` leaves running when it stops, said before it exits.

Stopping the server does not stop the jobs: their containers (or pods) run on, and a server
started again on the same database adopts them. A user pressing Ctrl-C should not have to
guess that, so the server says how many jobs and instances keep running, how to get them back
and how to stop them.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.jobs import JobState
from server.shapes.values import JobFilter
from server.store import Store

LIVE_JOBS = tuple(state for state in JobState if not state.is_final)
LIVE_INSTANCES = (JobState.STARTING, JobState.RUNNING, JobState.STOPPING)
_PAGE = 100


@dataclass(frozen=True)
class StillRunning:
    jobs: int
    instances: int


def still_running(store: Store) -> StillRunning:
    """The jobs not ended in the database, and their instances that have a container."""
    jobs = []
    after = None
    while True:
        page = store.list_jobs(JobFilter(states=LIVE_JOBS), first=_PAGE, after=after)
        jobs += page.jobs
        if not page.has_next or not page.jobs:
            break
        after = page.jobs[-1].cursor
    instances = store.current_instances({job.id: job.attempt for job in jobs})
    running = sum(i.state in LIVE_INSTANCES for found in instances.values() for i in found)
    return StillRunning(len(jobs), running)


def farewell(left: StillRunning, backend: str) -> str:
    """What the user reads when the server stopped."""
    if left.jobs == 0:
        return "paigraph stopped; no job was running."
    where = "pods" if backend == "kubernetes" else "containers"
    jobs = f"{left.jobs} job{'s' * (left.jobs != 1)}"
    instances = f"{left.instances} instance{'s' * (left.instances != 1)}"
    return (
        f"paigraph stopped; {jobs} ({instances}) keep running in their {where}.\n"
        "  get them back: start the server again on the same database (paigraph serve); it "
        "adopts them\n"
        "  stop them: paigraph stop --all, once the server runs again (README: Cleaning up)"
    )
