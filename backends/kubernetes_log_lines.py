"""Where a copy of a pod's log stands, so a stream cut short resumes without doubling lines.

The pods/log API cannot resume from a byte, only from a whole second (`sinceTime`), so the copy
remembers the last kept line's timestamp and how many kept lines share it, and drops that many
on resuming (the rule and its exactly-once / at-most-once limits: docs/kubernetes.md, Logs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

_STAMP = re.compile(rb"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2}) ")


def stamp_ns(line: bytes) -> tuple[int | None, bytes]:
    """The line's timestamp in nanoseconds since the epoch and its text after the stamp; None
    and the line as it is when it does not begin with an RFC3339 timestamp."""
    found = _STAMP.match(line)
    if found is None:
        return None, line
    whole, fraction, zone = (part.decode() if part else "" for part in found.groups())
    when = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone))
    nanos = int((fraction or "0").ljust(9, "0"))
    return int(when.timestamp()) * 1_000_000_000 + nanos, line[found.end() :]


def since_time(ns: int) -> str:
    """`sinceTime` for a resume from `ns`: its second, as metav1.Time travels (RFC3339)."""
    return datetime.fromtimestamp(ns // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class LogCursor:
    """How far the copy of one run's output goes."""

    offset: int  # bytes of the copy that are kept (the file is cut back here on a resume)
    stamp: int | None = None  # timestamp (ns) of the last line kept
    same: int = 0  # kept lines carrying exactly `stamp`

    def to_json(self) -> dict[str, int | None]:
        return {"offset": self.offset, "stamp": self.stamp, "same": self.same}

    @classmethod
    def from_json(cls, data: dict[str, object], offset: int) -> LogCursor:
        stamp, same = data.get("stamp"), data.get("same")
        at = data.get("offset", offset)
        return cls(
            offset=at if isinstance(at, int) else offset,
            stamp=stamp if isinstance(stamp, int) else None,
            same=same if isinstance(same, int) else 0,
        )


class Resumed:
    """The lines of one stream, told apart into new ones and ones the copy has (see above)."""

    def __init__(self, cursor: LogCursor) -> None:
        self.cursor = cursor
        self._seen_same = 0  # lines of this stream stamped exactly cursor.stamp so far
        self._rest = b""

    def feed(self, data: bytes) -> bytes:
        """The text of the whole new lines `data` completes (stamps taken off)."""
        lines = (self._rest + data).split(b"\n")
        self._rest = lines.pop()
        return b"".join(self._keep(line + b"\n") for line in lines)

    def finish(self) -> bytes:
        """The stream ended by itself: its last line, even without a newline, is whole."""
        rest, self._rest = self._rest, b""
        return self._keep(rest) if rest else b""

    def _keep(self, line: bytes) -> bytes:
        ns, text = stamp_ns(line)
        cursor = self.cursor
        if ns is None:
            kept = text
        elif cursor.stamp is None or ns > cursor.stamp:
            cursor.stamp, cursor.same, self._seen_same = ns, 1, 1
            kept = text
        elif ns < cursor.stamp:
            return b""
        else:
            self._seen_same += 1
            if self._seen_same <= cursor.same:
                return b""
            cursor.same += 1
            kept = text
        cursor.offset += len(kept)
        return kept
