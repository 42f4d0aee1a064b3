"""Whether the Kubernetes API server answers, as the pod watch finds out.

The watch is the backend's one steady conversation with the API server, so it is the judge: a
listing that fails means the server is unreachable (since the first failure, with the last
error), a listing that succeeds means it is back. A watch stream that merely breaks is not an
outage by itself: the listing that follows decides. Launches wait while the server is away
instead of failing, and the gang clock does not run.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from backends.base import BackendHealth
from simulator.backoff import Backoff

FIRST_DELAY = 0.2  # seconds before the first retry of a failed listing; doubled after each
MAX_DELAY = 3.0  # the longest wait between two tries: the server's return is seen this soon


class Reachability:
    """The API server's condition, shared by the watch thread and the launching threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reachable = threading.Event()
        self._reachable.set()
        self._since: datetime | None = None
        self._error = ""
        self._backoff = Backoff(FIRST_DELAY, MAX_DELAY)

    def answered(self) -> bool:
        """The server answered; whether it had been unreachable until now."""
        with self._lock:
            was_away = self._since is not None
            self._since, self._error = None, ""
            self._backoff.reset()
            self._reachable.set()
        return was_away

    def failed(self, error: str) -> float:
        """The server did not answer; how long to wait before asking again (back-off)."""
        with self._lock:
            if self._since is None:
                self._since = datetime.now(UTC)
            self._error = error
            self._reachable.clear()
            return self._backoff.next_delay()

    @property
    def reachable(self) -> bool:
        return self._reachable.is_set()

    def wait(self, stop: threading.Event, every: float = 0.5) -> bool:
        """Block until the server answers again or `stop` is set; whether it answers."""
        while not stop.is_set():
            if self._reachable.wait(every):
                return True
        return False

    def health(self) -> BackendHealth:
        with self._lock:
            if self._since is None:
                return BackendHealth()
            return BackendHealth(
                healthy=False,
                reason=f"Kubernetes API server unreachable since {self._since:%H:%M:%S} UTC; "
                "waiting",
                since=self._since,
                detail=self._error,
            )
