"""Docker's event stream, kept open through engine restarts and cut connections.

A broken stream is reopened with back-off and `on_reopen` lets the caller list its containers
again, since Docker does not replay what happened meanwhile; `condition()` says since when the
engine is unreachable (docs/reliability.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from simulator.backoff import Backoff

log = logging.getLogger(__name__)

FIRST_DELAY = 0.2  # seconds before the first re-open; doubled after each failure
MAX_DELAY = 3.0  # the longest wait between two tries: the engine's return is seen this soon


@dataclass(frozen=True)
class EngineCondition:
    """Whether the engine answers; when not, since when and why (the last error)."""

    reachable: bool
    since: datetime | None = None
    error: str = ""

    @property
    def reason(self) -> str | None:
        """E.g. 'Docker engine unreachable since 12:03:10 UTC; waiting'; None when reachable."""
        if self.reachable or self.since is None:
            return None
        return f"Docker engine unreachable since {self.since:%H:%M:%S} UTC; waiting"


class EngineWatch:
    """Runs `open_stream()` and hands each decoded item to `on_item` from a thread.

    `open_stream` returns an iterator and a function that closes it; it raises when the engine
    cannot be reached. The first stream is opened before the constructor returns (a caller that
    lists containers afterwards misses nothing); later ones after back-off, each followed by
    `on_reopen()` before its first item is read.
    """

    def __init__(
        self,
        open_stream: Callable[[], tuple[Iterator[Any], Callable[[], None]]],
        on_item: Callable[[Any], None],
        on_reopen: Callable[[], None],
        *,
        name: str = "docker-events",
    ) -> None:
        self._open = open_stream
        self._on_item = on_item
        self._on_reopen = on_reopen
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._close_current: Callable[[], None] | None = None
        self._condition = EngineCondition(reachable=True)
        self.reopened = 0  # how many times a broken stream was opened again
        stream = self._open_one()  # raises: an engine that does not answer at start is an error
        self._thread = threading.Thread(target=self._run, args=(stream,), name=name, daemon=True)
        self._thread.start()

    # --- what callers see ----------------------------------------------------------------------

    def condition(self) -> EngineCondition:
        with self._lock:
            return self._condition

    def reopen(self) -> None:
        """Close the current stream, so that it is opened again and the caller re-lists: for
        a caller whose own call found the engine unreachable while the stream seemed fine."""
        with self._lock:
            close = self._close_current
        if close is not None:
            self._close(close)

    def stop(self) -> None:
        """End the watch; the thread ends once its stream is closed."""
        self._stopped.set()
        with self._lock:
            close = self._close_current
        if close is not None:
            self._close(close)

    # --- the thread ----------------------------------------------------------------------------

    def _open_one(self) -> Iterator[Any]:
        stream, close = self._open()
        with self._lock:
            self._close_current = close
        return stream

    def _run(self, stream: Iterator[Any]) -> None:
        while not self._stopped.is_set():
            error = self._pump(stream)
            if self._stopped.is_set():
                return
            broke_at = datetime.now(UTC)
            reopened = self._reopen(broke_at, error)
            if reopened is None:
                return
            stream = reopened

    def _pump(self, stream: Iterator[Any]) -> str:
        """Read until the stream ends; returns why it ended ('' when it was closed cleanly)."""
        try:
            for item in stream:
                if self._stopped.is_set():
                    return ""
                self._deliver(item)
        except Exception as exc:  # a broken connection, in whatever form the client raises it
            if self._stopped.is_set():
                return ""
            log.warning(
                "the Docker event stream broke (%s: %s); opening it again and re-listing "
                "containers",
                type(exc).__name__,
                exc,
            )
            return f"{type(exc).__name__}: {exc}"
        if not self._stopped.is_set():
            log.warning(
                "the Docker event stream was closed by the engine; opening it again and "
                "re-listing containers"
            )
        return ""

    def _deliver(self, item: Any) -> None:
        try:
            self._on_item(item)
        except Exception:
            log.exception("handling the Docker event %r failed; the watch goes on", item)

    def _reopen(self, broke_at: datetime, error: str) -> Iterator[Any] | None:
        """Open a new stream with back-off, then re-list; None when stopped meanwhile."""
        backoff = Backoff(FIRST_DELAY, MAX_DELAY)
        # the first try is made at once, and the wait after it fails has always been the
        # doubled one: the first delay is skipped
        backoff.next_delay()
        delay = 0.0
        while not self._stopped.wait(delay):
            try:
                stream = self._open_one()
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                with self._lock:
                    if self._condition.reachable:
                        self._condition = EngineCondition(False, broke_at, error)
                        log.error(
                            "the Docker engine is unreachable (%s); trying again every %g s at "
                            "most, jobs wait",
                            error,
                            MAX_DELAY,
                        )
                    else:
                        self._condition = EngineCondition(False, self._condition.since, error)
                        log.debug("the Docker engine is still unreachable (%s)", error)
                delay = backoff.next_delay()
                continue
            self.reopened += 1
            self._resync()
            with self._lock:
                was = self._condition
                self._condition = EngineCondition(reachable=True)
            if not was.reachable:
                log.warning(
                    "the Docker engine answers again after %.1f s",
                    (datetime.now(UTC) - broke_at).total_seconds(),
                )
            return stream
        return None

    def _resync(self) -> None:
        try:
            self._on_reopen()
        except Exception:
            # the stream is open: the next break re-lists again; meanwhile events still arrive
            log.exception("re-listing containers after the event stream re-opened failed")

    @staticmethod
    def _close(close: Callable[[], None]) -> None:
        try:
            close()
        except Exception as exc:  # closing a broken stream can fail the same way it broke
            log.debug("closing the Docker event stream: %s (ignored: the watch is ending)", exc)
