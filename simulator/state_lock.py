"""One server per simulator state directory.

Two servers on one directory would take each other's containers for orphans and hand out the
same ports, so the server holds a `flock` on `<state>/server.lock` and the second is refused
naming the first; `paigraph run` needs no lock (docs/reliability.md).
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path

LOCK_NAME = "server.lock"


class StateDirInUse(Exception):
    """Another process holds the state directory; the message names it."""


class StateLock:
    """The held lock; `release()` (or the end of the process) lets another server take it."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def hold_state_dir(state_dir: Path, serving: str = "") -> StateLock:
    """Take the state directory for this process, or raise StateDirInUse naming the holder.

    `serving` says what this process serves (e.g. its address), for the message a second
    server gets."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise StateDirInUse(
            f"the simulator state directory {state_dir} is in use by another paigraph server "
            f"({holder}); stop that one, or give this one its own state directory "
            "(PAIGRAPH_SIMULATOR_STATE, or state_dir in the simulator settings)"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    record = {
        "pid": os.getpid(),
        "command": " ".join(sys.argv),
        "serving": serving,
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
    return StateLock(path, fd)


def _holder(fd: int) -> str:
    """What the holder wrote about itself, as words."""
    try:
        record = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (OSError, ValueError):
        record = {}
    if not isinstance(record, dict) or "pid" not in record:
        return "its pid is not recorded yet"
    parts = [f"pid {record['pid']}"]
    if record.get("serving"):
        parts.append(f"serving {record['serving']}")
    if record.get("command"):
        parts.append(f"command: {record['command']}")
    if record.get("since"):
        parts.append(f"since {record['since']}")
    return ", ".join(parts)
