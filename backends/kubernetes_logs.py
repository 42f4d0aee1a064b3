"""Instance logs of the Kubernetes backend, kept on the server's disk.

A pod's log goes with the pod, so each instance's output is copied to a local file while it
runs (one event loop for every stream) and resumed from where the copy stands after a broken
stream or a restart (docs/kubernetes.md, Logs). Layout: `<root>/<job>/<attempt>/<role>-<index>.log`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import re
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from backends.base import InstanceKey
from backends.entrypoint import MARKER
from backends.kubernetes_log_lines import LogCursor, Resumed
from backends.kubernetes_log_reader import LogNotReadable, PodLogReader
from backends.kubernetes_names import digest
from backends.log_files import LogFile

log = logging.getLogger(__name__)

_CHUNK = 1 << 16
_RETRIES = 20  # failed opens or cuts in a row before a follower gives up (settle reads the rest)
_HALT_SECONDS = 5.0  # how long a halted follower is waited for before its file is reused


def _safe(text: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "", text)[:40] or "x"
    return cleaned if cleaned == text else f"{cleaned}-{digest(text)}"


@dataclass
class _Follower:
    pod: str
    namespace: str | None = None
    future: concurrent.futures.Future[None] | None = None
    done: threading.Event = field(default_factory=threading.Event)


class LogBook:
    """The log files of every instance under `root`, copied from pods through `reader`."""

    def __init__(self, root: Path, reader: PodLogReader) -> None:
        self.root = Path(root)
        self.reader = reader
        self._lock = threading.Lock()
        self._followers: dict[InstanceKey, _Follower] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def path(self, key: InstanceKey) -> Path:
        return (
            self.root / _safe(key.job_id) / str(key.attempt) / f"{_safe(key.role)}-{key.index}.log"
        )

    def _run_file(self, key: InstanceKey) -> Path:
        return self.path(key).with_suffix(".run")

    def exists(self, key: InstanceKey) -> bool:
        return self.path(key).exists()

    # --- the event loop ------------------------------------------------------------------------

    def _loop_running(self) -> asyncio.AbstractEventLoop:
        """The loop every stream is read on, started with the first follower (lock held)."""
        if self._loop is None:
            loop = asyncio.new_event_loop()
            # name lookups of the API server's host: one thread, whatever the pod count
            loop.set_default_executor(
                concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="k8s logs lookup")
            )
            thread = threading.Thread(target=loop.run_forever, name="k8s logs", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop

    def _run(self, coroutine: Any, timeout: float) -> Any:
        """Run `coroutine` on the loop from another thread and wait for its result."""
        with self._lock:
            loop = self._loop_running()
        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

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
        self._save(key, {"run": run, "offset": offset})

    def _save(self, key: InstanceKey, record: dict[str, Any]) -> None:
        self._run_file(key).write_text(json.dumps(record), "utf-8")

    def _run_start(self, key: InstanceKey, run: int) -> dict[str, Any]:
        """The run's record (a run never recorded begins now)."""
        record = self._record(key)
        if record is None or record.get("run") != run:
            self.begin(key, run)
            record = self._record(key) or {"run": run, "offset": 0}
        return record

    def _cursor(self, key: InstanceKey, run: int) -> LogCursor:
        """Where the copy of the run stands; the file is cut back to it (a piece written after
        the last record is written again from the stream)."""
        record = self._run_start(key, run)
        start = int(record.get("offset", 0))
        saved = record.get("cursor")
        cursor = LogCursor.from_json(saved, start) if isinstance(saved, dict) else LogCursor(start)
        with self.path(key).open("r+b") as handle:
            handle.truncate(cursor.offset)
        return cursor

    def _advance(self, key: InstanceKey, run: int, cursor: LogCursor, settled: bool) -> None:
        record = self._run_start(key, run)
        record.update(cursor=cursor.to_json(), settled=settled)
        self._save(key, record)

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

    def follow(self, key: InstanceKey, run: int, pod: str, namespace: str | None = None) -> None:
        """Copy the run's output from `pod` (in `namespace`, else the reader's) as it comes,
        from where the copy stands."""
        with self._lock:
            current = self._followers.get(key)
            if current is not None and not current.done.is_set():
                return
            follower = _Follower(pod, namespace)
            self._followers[key] = follower
            loop = self._loop_running()
        follower.future = asyncio.run_coroutine_threadsafe(self._follow(key, run, follower), loop)
        # cancelled before it ran, the coroutine would never say it is done
        follower.future.add_done_callback(lambda _: follower.done.set())

    async def _follow(self, key: InstanceKey, run: int, follower: _Follower) -> None:
        """Follow until the container ended: a stream that ends by itself is opened again
        (a rotation ends it while the container runs); when one more stream ends at once
        with nothing new, the container ended. A cut or a refusal is tried again."""
        try:
            cursor = self._cursor(key, run)
            failures = 0
            ended_once = False
            while failures < _RETRIES:
                try:
                    kept = await self._copy(
                        key, run, follower.pod, follower.namespace, cursor, follow=True
                    )
                except LogNotReadable as exc:
                    if exc.status == 404:
                        return  # the pod is gone: settle keeps what was copied
                    failures += 1  # its container does not run yet
                    await asyncio.sleep(min(0.2 * failures, 2.0))
                    continue
                except (httpx.HTTPError, OSError) as exc:  # a dropped connection: resume
                    log.debug("the log stream of %s broke (%s); resuming", key, exc)
                    failures += 1
                    await asyncio.sleep(min(0.1 * failures, 2.0))
                    continue
                failures = 0
                if not kept and ended_once:
                    return
                ended_once = True
        except Exception as exc:  # settle reads what is left
            log.debug("following the log of %s stopped: %s", key, exc)
        finally:
            follower.done.set()

    async def _copy(
        self,
        key: InstanceKey,
        run: int,
        pod: str,
        namespace: str | None,
        cursor: LogCursor,
        *,
        follow: bool,
    ) -> int:
        """Copy one stream's new lines after `cursor`; the bytes kept. A stream that breaks
        leaves its unfinished line to the next one."""
        kept = 0
        lines = Resumed(cursor)
        opened = self.reader.open(pod, follow=follow, since_ns=cursor.stamp, namespace=namespace)
        async with opened as chunks:
            with self.path(key).open("r+b") as handle:
                handle.seek(cursor.offset)

                def write(text: bytes) -> None:
                    if text:
                        handle.write(text)
                        handle.flush()
                        self._advance(key, run, cursor, settled=False)

                async for chunk in chunks:
                    text = lines.feed(chunk)
                    kept += len(text)
                    write(text)
                text = lines.finish()
                kept += len(text)
                write(text)
        return kept

    def settle(
        self,
        key: InstanceKey,
        run: int,
        pod: str,
        namespace: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        """The run ended: let the follower finish, then copy what it has not (from where the
        copy stands: only the last second's lines are asked for again)."""
        with self._lock:
            follower = self._followers.pop(key, None)
        if follower is not None and not follower.done.wait(timeout):
            self._halt(follower)
        try:
            self._run(self._settle(key, run, pod, namespace), timeout)
        except Exception as exc:  # the pod is gone: what was followed is what there is
            log.debug("the log of %s cannot be read again: %s", key, exc)

    async def _settle(self, key: InstanceKey, run: int, pod: str, namespace: str | None) -> None:
        cursor = self._cursor(key, run)
        await self._copy(key, run, pod, namespace, cursor, follow=False)
        self._advance(key, run, cursor, settled=True)

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

    def followers(self) -> int:
        """How many instances are being followed now."""
        with self._lock:
            return sum(not f.done.is_set() for f in self._followers.values())

    def close(self) -> None:
        with self._lock:
            followers = list(self._followers.values())
            self._followers.clear()
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        for follower in followers:
            self._halt(follower, wait=False)
        if loop is None or thread is None:
            return
        try:  # closing: a reader that fails to close is dropped, saying so
            asyncio.run_coroutine_threadsafe(self.reader.aclose(), loop).result(_HALT_SECONDS)
        except Exception as exc:
            log.debug("the log reader did not close cleanly: %s", exc)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(_HALT_SECONDS)
        if not thread.is_alive():
            loop.close()

    @staticmethod
    def _halt(follower: _Follower, wait: bool = True) -> None:
        """Cancel the follower's reading and, unless told not to, wait until it stopped."""
        if follower.future is not None:
            follower.future.cancel()
        if wait:
            follower.done.wait(_HALT_SECONDS)

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
