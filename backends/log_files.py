"""An instance's log on disk: read in bounded pieces, its tail found from the end, its size kept.

A job may print without end, so no read costs the whole file, and past `limit` the middle is
punched out (offsets stay valid) with a record of what went (docs/architecture.md). Every open
goes through `host_files`, so a log the job replaced by a link is never followed.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from backends import host_files
from backends.entrypoint import MARKER
from backends.host_files import UnsafeFile

log = logging.getLogger(__name__)

CHUNK = 1 << 16  # bytes of log per read
_TAIL_BLOCK = 1 << 16  # bytes read at a time, backwards, to find where the last lines begin
_TAIL_MOST = 8 << 20  # the furthest back a tail looks: a longer tail starts there
_BLOCK = 4096  # punched ranges are aligned to this, so whole blocks are freed
_PUNCH_HOLE = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
_libc = ctypes.CDLL(None, use_errno=True)


class Dropped(NamedTuple):
    """The byte range [start, end) of the log that was dropped to keep it within its limit."""

    start: int
    end: int


@dataclass(frozen=True)
class LogFile:
    """The log at `path`; `record` (outside anything the job can write) notes what was dropped."""

    path: Path
    record: Path

    def dropped(self) -> Dropped | None:
        try:
            data = json.loads(host_files.read_text(self.record))
            return Dropped(int(data["start"]), int(data["end"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("ignoring the unreadable record %s: %s", self.record, exc)
            return None

    def read(self, offset: int, limit: int = CHUNK) -> tuple[bytes, int]:
        """At most `limit` bytes from `offset`, and the offset to read next. Inside the dropped
        range: a line saying so, and the offset after it. A log that is not a regular file:
        one line saying why, at offset 0, then nothing."""
        dropped = self.dropped()
        if dropped is not None and dropped.start <= offset < dropped.end:
            note = (
                f"\n{MARKER} {dropped.end - dropped.start} bytes of output were dropped here: "
                f"a log keeps its first {dropped.start} bytes and its latest ones\n"
            )
            return note.encode(), dropped.end
        if dropped is not None and offset < dropped.start:
            limit = min(limit, dropped.start - offset)
        try:
            data = host_files.read_at(self.path, offset, limit)
        except UnsafeFile as exc:
            unreadable = (
                f"{MARKER} the log cannot be read: {exc}\n".encode() if offset == 0 else b""
            )
            return unreadable, offset + len(unreadable) if offset == 0 else offset
        return data, offset + len(data)

    def tail_offset(self, lines: int) -> int:
        """The byte offset where the last `lines` lines begin, never before the dropped range's
        end and never more than _TAIL_MOST bytes back."""
        try:
            size = host_files.size_of(self.path)
        except UnsafeFile:
            return 0
        if lines <= 0:
            return size
        dropped = self.dropped()
        floor = max(0, size - _TAIL_MOST, dropped.end if dropped and dropped.end <= size else 0)
        wanted = lines
        if size > floor and self._bytes(size - 1, 1) == b"\n":
            wanted += 1  # a final newline ends the last line, it starts no new one
        position = size
        while position > floor:
            start = max(floor, position - _TAIL_BLOCK)
            block = self._bytes(start, position - start)
            if not block:
                return start
            end = len(block)
            while (found := block.rfind(b"\n", 0, end)) >= 0:
                wanted -= 1
                if wanted == 0:
                    return start + found + 1
                end = found
            position = start
        return floor

    def _bytes(self, offset: int, length: int) -> bytes:
        try:
            return host_files.read_at(self.path, offset, length)
        except UnsafeFile:
            return b""

    def keep_within(self, limit: int) -> Dropped | None:
        """Drop the middle of a log longer than `limit` bytes, keeping its first half-limit
        and its last half-limit; the range dropped so far, or None when nothing was."""
        half = max(_BLOCK, (limit // 2) // _BLOCK * _BLOCK)
        try:
            fd = host_files.open_regular(self.path, os.O_WRONLY)
        except (FileNotFoundError, UnsafeFile):
            return None
        try:
            size = os.fstat(fd).st_size
            dropped = self.dropped()
            start = dropped.start if dropped else half
            end = (size - half) // _BLOCK * _BLOCK
            if end - start < _BLOCK or (dropped is not None and end <= dropped.end):
                return dropped
            punched_from = dropped.end if dropped else start
            kept = Dropped(start, end)
            # the record first: a reader never gets the punched zeros as output
            host_files.write_atomic(self.record, json.dumps(kept._asdict()))
            length = ctypes.c_long(end - punched_from)
            if _libc.fallocate(fd, _PUNCH_HOLE, ctypes.c_long(punched_from), length) != 0:
                reason = os.strerror(ctypes.get_errno())
                log.warning("cannot free the dropped middle of %s: %s", self.path, reason)
            return kept
        finally:
            os.close(fd)
