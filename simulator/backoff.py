"""Back-off between tries of something that keeps failing (an engine, an API server away).

Each wait is twice the one before, up to a ceiling, so a short outage is noticed over soon and
a long one costs little; a success starts over from the first wait.
"""

from __future__ import annotations


class Backoff:
    """The waits between tries: `first`, then doubled after each, never more than `most`."""

    def __init__(self, first: float, most: float) -> None:
        if first <= 0 or most < first:
            raise ValueError(f"a back-off needs 0 < first <= most, not {first} and {most}")
        self.first = first
        self.most = most
        self._next = first

    def next_delay(self) -> float:
        """How long to wait before the next try; the wait after it is doubled."""
        delay = self._next
        self._next = min(delay * 2, self.most)
        return delay

    def reset(self) -> None:
        """The thing answered: the next failure waits `first` again."""
        self._next = self.first
