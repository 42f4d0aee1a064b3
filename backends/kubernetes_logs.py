"""Instance logs of the Kubernetes backend, kept on the server's disk.

A pod's log lives as long as the pod, and pods go when their attempt is released or stopped.
So each instance's output is copied to a local file while it runs (a follower streams the pod
log into it), and read back in full once the container ended, which also repairs a stream cut
short. Every run of an instance (a task retry) is appended to the same file, after a marker
line; the offset where the current run begins is recorded, so a restarted server copies a
running pod's log again from there without doubling it.

Layout: `<root>/<job>/<attempt>/<role>-<index>.log` and a `.run` file beside it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends.base import InstanceKey
from backends.entrypoint import MARKER
from backends.kubernetes_names import digest
from backends.log_files import LogFile

log = logging.getLogger(__name__)

Stream = Callable[[bool], Any]  # follow -> a urllib3 response of the pod's log
_CHUNK = 1 << 16
_RETRIES = 20


def _safe(text: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "", text)[:40] or "x"
    return cleaned if cleaned == text else f"{cleaned}-{digest(text)}"


@dataclass
class _Follower:
    thread: threading.Thread | None = None
    response: Any = None
    stop: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    whole: bool = False  # the stream ended by itself: the container's output is all there


class LogBook:
    """The log files of every instance under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._lock = threading.Lock()
        self._followers: dict[InstanceKey, _Follower] = {}

    def path(self, key: InstanceKey) -> Path:
        return (
            self.root / _safe(key.job_id) / str(key.attempt) / f"{_safe(key.role)}-{key.index}.log"
        )

    def _run_file(self, key: InstanceKey) -> Path:
        return self.path(key).with_suffix(".run")

    def exists(self, key: InstanceKey) -> bool:
        return self.path(key).exists()

    # --- runs ----------------------------------------------------------------------------------

    def begin(self, key: InstanceKey, run: int) -> None:
        """A new run of the instance starts writing here (after a marker line for a retry)."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as handle:
            if run > 1:
                handle.write(
                    f"{MARKER} task retry {run - 1}: starting task attempt {run}\n".encode()
                )
            offset = handle.tell()
        self._run_file(key).write_text(json.dumps({"run": run, "offset": offset}), "utf-8")

    def _run_start(self, key: InstanceKey, run: int) -> int:
        """Where the run's output begins in the file (a run never recorded begins now)."""
        record = self._record(key)
        if record is None or record.get("run") != run:
            self.begin(key, run)
            record = self._record(key) or {}
        return int(record.get("offset", 0))

    def _record(self, key: InstanceKey) -> dict[str, Any] | None:
        try:
            record = json.loads(self._run_file(key).read_text("utf-8"))
        except (FileNotFoundError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def settled(self, key: InstanceKey, run: int) -> bool:
        """Whether the run's whole output was copied after it ended."""
        record = self._record(key)
        return bool(record and record.get("run") == run and record.get("settled"))

    # --- copying from the pod ------------------------------------------------------------------

    def follow(self, key: InstanceKey, run: int, stream: Stream) -> None:
        """Copy the run's output as it comes, from its beginning (once per run)."""
        with self._lock:
            current = self._followers.get(key)
            if current is not None and not current.done.is_set():
                return
            follower = _Follower()
            self._followers[key] = follower
        start = self._run_start(key, run)
        follower.thread = threading.Thread(
            target=self._copy, args=(key, start, stream, follower), daemon=True, name=f"log {key}"
        )
        follower.thread.start()

    def _copy(self, key: InstanceKey, start: int, stream: Stream, follower: _Follower) -> None:
        try:
            for attempt in range(_RETRIES):
                if follower.stop.is_set():
                    return
                try:
                    response = stream(True)
                except Exception as exc:  # the container may not accept log readers yet
                    log.debug("log of %s not readable yet (%s)", key, exc)
                    follower.stop.wait(min(0.2 * (attempt + 1), 2.0))
                    continue
                follower.response = response
                with self.path(key).open("r+b") as handle:
                    handle.truncate(start)
                    handle.seek(start)
                    for chunk in _chunks(response):
                        if follower.stop.is_set():
                            return
                        handle.write(chunk)
                        handle.flush()
                follower.whole = True
                return
        except Exception as exc:  # a cut stream: `settle` reads the whole log again
            log.debug("following the log of %s stopped: %s", key, exc)
        finally:
            if follower.response is not None:
                _release(follower.response)
            follower.done.set()

    def settle(self, key: InstanceKey, run: int, stream: Stream, timeout: float = 10.0) -> None:
        """The run ended: let the follower finish, then write the run's whole output again
        from the pod, so the file holds every byte even when following was cut short."""
        with self._lock:
            follower = self._followers.pop(key, None)
        if follower is not None and not follower.done.wait(timeout):
            self._halt(follower)
        start = self._run_start(key, run)
        if follower is not None and follower.whole:  # nothing was missed: no second download
            self._mark_settled(key, run, start)
            return
        try:
            response = stream(False)
        except Exception as exc:  # the pod is gone: what was followed is what there is
            log.debug("the log of %s cannot be read again: %s", key, exc)
            return
        try:
            with self.path(key).open("r+b") as handle:
                handle.seek(start)
                for chunk in _chunks(response):
                    handle.write(chunk)
                handle.truncate()
            self._mark_settled(key, run, start)
        finally:
            _release(response)

    def _mark_settled(self, key: InstanceKey, run: int, start: int) -> None:
        record = {"run": run, "offset": start, "settled": True}
        self._run_file(key).write_text(json.dumps(record), "utf-8")

    def forget_run(self, key: InstanceKey) -> None:
        """Stop following the instance (its pod is being removed)."""
        with self._lock:
            follower = self._followers.pop(key, None)
        if follower is not None:
            self._halt(follower)

    def following(self, key: InstanceKey) -> bool:
        with self._lock:
            follower = self._followers.get(key)
        return follower is not None and not follower.done.is_set()

    def close(self) -> None:
        with self._lock:
            followers = list(self._followers.values())
            self._followers.clear()
        for follower in followers:
            self._halt(follower)

    @staticmethod
    def _halt(follower: _Follower) -> None:
        follower.stop.set()
        if follower.response is not None:
            hang_up(follower.response)

    # --- reading -------------------------------------------------------------------------------

    def read_from(self, key: InstanceKey, offset: int, limit: int = _CHUNK) -> tuple[bytes, int]:
        """At most `limit` bytes of the copy from `offset`, and the offset after them."""
        return self._file(key).read(offset, limit)

    def tail_offset(self, key: InstanceKey, lines: int) -> int:
        """The byte offset where the last `lines` lines of the copy begin."""
        return self._file(key).tail_offset(lines)

    def _file(self, key: InstanceKey) -> LogFile:
        path = self.path(key)
        return LogFile(path, path.with_name(path.name + ".dropped"))


def hang_up(response: Any) -> None:
    """Unblock a thread reading a streamed response (a log, a watch) by shutting its socket;
    the reading thread then closes the response itself."""
    candidates = [
        getattr(getattr(response, "connection", None), "sock", None),
        getattr(
            getattr(getattr(getattr(response, "_fp", None), "fp", None), "raw", None), "_sock", None
        ),
    ]
    for sock in candidates:
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            return


def _chunks(response: Any) -> Iterator[bytes]:
    if hasattr(response, "stream"):
        yield from response.stream(_CHUNK, decode_content=False)
    else:
        data = response.data if hasattr(response, "data") else response
        yield data.encode() if isinstance(data, str) else data


def _release(response: Any) -> None:
    """Give a log response's connection back; one that broke is simply dropped."""
    try:
        response.release_conn()
    except Exception as exc:  # whatever a broken connection raises: nothing is lost
        log.debug("releasing a log connection failed (%s); it is dropped", exc)
