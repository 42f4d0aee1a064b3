"""A container's log as the fake API server (tests/fake_kube_api.py) keeps and serves it.

Each behaviour follows what Kubernetes documents for `GET .../pods/<pod>/log` (PodLogOptions)
and how the kubelet reads the container runtime's log files:

- output is kept as lines, each stamped (RFC3339 with nanoseconds, trailing zeros dropped, as
  Go's RFC3339Nano writes) when the runtime read it; what one write brings shares one stamp,
  so stamps are not unique. A line without its newline is served once completed, or once the
  container ended;
- `timestamps=true` puts each line's stamp and a space before it;
- `sinceTime` (RFC3339) serves the lines stamped at or after it, at whole seconds (the API
  server hands it on to the kubelet as metav1.Time, which travels as whole seconds);
  `sinceSeconds` the lines stamped within that many seconds of now; giving both, or a value
  below 1, is refused with 422 Invalid, as PodLogOptions validation does;
- `tailLines` keeps the last n of those lines; `limitBytes` ends the answer after that many
  bytes, wherever it falls;
- only the current log file is read. Once the kubelet rotated the file, the rotated lines
  are not served any more, and a following stream, after the rest of the file it was reading,
  ends (the kubelet's follow does not go on into the new file);
- `follow=true` streams new lines until the container terminated.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime


def rfc3339_nano(ns: int) -> str:
    """`ns` (since the epoch) as Go's time.RFC3339Nano writes it in UTC."""
    seconds, nanos = divmod(ns, 1_000_000_000)
    text = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if nanos:
        text += "." + f"{nanos:09d}".rstrip("0")
    return text + "Z"


def parse_rfc3339(text: str) -> int:
    """An RFC3339 time (as a query parameter) in nanoseconds, cut to whole seconds."""
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(when.timestamp()) * 1_000_000_000


@dataclass
class PodLog:
    """One container's output: every line with its stamp, and where the current file begins."""

    lines: list[tuple[int, bytes]] = field(default_factory=list)
    unfinished: bytes = b""
    boundaries: list[int] = field(default_factory=list)  # first line of each rotated-to file
    cuts: int = 0  # moves on when the test drops the open streams

    @property
    def first(self) -> int:
        """Index of the current file's first line."""
        return self.boundaries[-1] if self.boundaries else 0

    def write(self, data: bytes, ns: int | None = None) -> None:
        stamp = max(ns if ns is not None else time.time_ns(), self._last_stamp())
        pieces = (self.unfinished + data).split(b"\n")
        self.unfinished = pieces.pop()
        self.lines += [(stamp, piece + b"\n") for piece in pieces]

    def _last_stamp(self) -> int:
        return self.lines[-1][0] if self.lines else 0

    def ended(self) -> None:
        """The container terminated: an unfinished last line is served as it is."""
        if self.unfinished:
            self.lines.append((max(time.time_ns(), self._last_stamp()), self.unfinished))
            self.unfinished = b""

    def rotate(self) -> None:
        """The kubelet rotated the log file: later lines go to a new file."""
        self.boundaries.append(len(self.lines))

    def file_end(self, rotations: int) -> int | None:
        """Where the file a stream began reading (after `rotations` rotations) ends, if it was
        rotated since."""
        return self.boundaries[rotations] if len(self.boundaries) > rotations else None

    def start(self, query: dict[str, str]) -> int:
        """Index of the first line served to a request (see the module's rules)."""
        first = self.first
        if "sinceTime" in query:
            since = parse_rfc3339(query["sinceTime"])
            first = next(
                (n for n in range(first, len(self.lines)) if self.lines[n][0] >= since),
                len(self.lines),
            )
        elif "sinceSeconds" in query:
            since = time.time_ns() - int(query["sinceSeconds"]) * 1_000_000_000
            first = next(
                (n for n in range(first, len(self.lines)) if self.lines[n][0] >= since),
                len(self.lines),
            )
        if "tailLines" in query:
            first = max(first, len(self.lines) - int(query["tailLines"]))
        return first

    def render(self, begin: int, end: int, timestamps: bool) -> bytes:
        return b"".join(
            (rfc3339_nano(stamp).encode() + b" " + text) if timestamps else text
            for stamp, text in self.lines[begin:end]
        )


def invalid_options(query: dict[str, str]) -> str | None:
    """Why PodLogOptions validation refuses the query, or None."""
    if "sinceTime" in query and "sinceSeconds" in query:
        return "at most one of `sinceTime` or `sinceSeconds` may be specified"
    for name in ("sinceSeconds", "limitBytes", "tailLines"):
        if name in query:
            try:
                value = int(query[name])
            except ValueError:
                return f"{name}: Invalid value: {query[name]!r}: must be an integer"
            least = 0 if name == "tailLines" else 1
            if value < least:
                return f"{name}: Invalid value: {value}: must be greater than {least - 1}"
    if "sinceTime" in query:
        try:
            parse_rfc3339(query["sinceTime"])
        except ValueError:
            return f"sinceTime: Invalid value: {query['sinceTime']!r}: not an RFC3339 time"
    return None
