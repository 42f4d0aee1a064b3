"""Host ports for task instances: real, bindable, and never given to two live instances.

Ports are published 1:1 on the host, so each is bound before it is handed out and held in a
table shared under a lock by every simulator process of the state directory; a request is all
or none (docs/architecture.md, How the simulator places an attempt).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from simulator.settings import SimulatorSettings

_MAX_PORT = 65535


class PortAsk(NamedTuple):
    """``count`` ports for ``label``; ``begin_at`` > 0 asks for the ports from there on."""

    label: str
    count: int = 1  # type: ignore[assignment]  # shadows tuple.count, as callers expect
    begin_at: int = 0


class PortError(Exception):
    """Ports could not be allocated; the message says which and why."""


class PortRequestError(PortError, ValueError):
    """The request itself is wrong (a negative count, a label twice, a port above 65535)."""


class PortConflict(PortError):
    """A fixed (``beginAt``) port is held by another instance or used on the host."""


class PortsExhausted(PortError):
    """The range has fewer free, bindable ports than asked for."""


def bind_problem(port: int, host: str = "0.0.0.0") -> str | None:
    """Why ``port`` cannot be bound on the host now (TCP or UDP), or None when it can."""
    for kind, proto in ((socket.SOCK_STREAM, "tcp"), (socket.SOCK_DGRAM, "udp")):
        with socket.socket(socket.AF_INET, kind) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
            try:
                sock.bind((host, port))
            except OSError as exc:
                what = exc.strerror or errno.errorcode.get(exc.errno or 0, str(exc))
                return f"{proto}: {what.lower()}"
    return None


@dataclass(slots=True)
class _Table:
    """The shared held-port table as read under the lock."""

    cursor: int | None = None
    entries: list[dict[str, Any]] = field(default_factory=list)


class PortAllocator:
    """Hands out host ports to owners (task instances); every method is thread-safe."""

    def __init__(
        self,
        start: int,
        end: int,
        *,
        state_file: Path | None = None,
        bind_host: str = "0.0.0.0",
    ) -> None:
        if not 1 <= start < end <= _MAX_PORT + 1:
            raise ValueError(f"port range {start}-{end} must satisfy 1 <= start < end <= 65536")
        self.start = start
        self.end = end
        self.state_file = state_file
        self.bind_host = bind_host
        self._held: dict[str, list[int]] = {}
        self._cursor = start
        self._lock = threading.Lock()
        self._token = uuid.uuid4().hex

    @classmethod
    def from_settings(cls, settings: SimulatorSettings, *, shared: bool = True) -> PortAllocator:
        """The allocator of the configured range; ``shared`` uses the state dir's port table."""
        return cls(
            settings.port_range.start,
            settings.port_range.end,
            state_file=settings.port_state_file if shared else None,
        )

    # -- public --

    def allocate(
        self, owner: str, requests: Sequence[PortAsk | tuple[Any, ...]]
    ) -> dict[str, list[int]]:
        """Ports for one owner: label -> ports, labels in request order."""
        return self.allocate_many([(owner, requests)])[0]

    def allocate_many(
        self, asks: Sequence[tuple[str, Sequence[PortAsk | tuple[Any, ...]]]]
    ) -> list[dict[str, list[int]]]:
        """Ports for several owners at once (e.g. every instance of a gang): all or none."""
        wanted = [(owner, _normalize(owner, reqs)) for owner, reqs in asks]
        owners = [owner for owner, _ in wanted]
        if len(set(owners)) != len(owners):
            raise PortRequestError("an owner appears twice in one allocation")
        with self._lock, self._shared() as table:
            holders = self._holders(table)
            fresh: dict[int, str] = {}
            result: list[dict[str, list[int]]] = []
            for owner, reqs in wanted:
                labels: dict[str, list[int]] = {}
                for ask in reqs:
                    if ask.begin_at > 0:
                        labels[ask.label] = self._fixed(owner, ask, holders, fresh)
                    else:
                        labels[ask.label] = []
                result.append(labels)
            need = sum(a.count for _, reqs in wanted for a in reqs if a.begin_at == 0)
            cursor = (
                table.cursor
                if table and table.cursor is not None and self._in_range(table.cursor)
                else self._cursor
            )
            found, cursor = self._scan(need, cursor, holders, fresh, owners)
            picks = iter(found)
            for (owner, reqs), labels in zip(wanted, result, strict=True):
                for ask in reqs:
                    if ask.begin_at == 0:
                        labels[ask.label] = [next(picks) for _ in range(ask.count)]
                    self._held.setdefault(owner, []).extend(labels[ask.label])
            self._cursor = cursor
            if table is not None:
                table.cursor = cursor
                self._write(table)
            return result

    def release(self, owner: str) -> None:
        """Give back every port of ``owner``; unknown owners are ignored."""
        with self._lock:
            if owner not in self._held:
                return
            with self._shared() as table:
                del self._held[owner]
                if table is not None:
                    self._write(table)

    def adopt(self, owner: str, ports: Iterable[int]) -> None:
        """Record ports a running instance already has (found after a restart)."""
        adopted = sorted(set(ports))
        bad = [p for p in adopted if not 1 <= p <= _MAX_PORT]
        if bad:
            raise PortRequestError(f"port {bad[0]} of {owner} is not between 1 and 65535")
        with self._lock, self._shared() as table:
            mine = self._held.setdefault(owner, [])
            mine.extend(p for p in adopted if p not in mine)
            if table is not None:
                self._write(table)

    def held(self) -> dict[str, tuple[int, ...]]:
        """The owners this allocator serves and their ports."""
        with self._lock:
            return {owner: tuple(ports) for owner, ports in self._held.items()}

    # -- allocation --

    def _holders(self, table: _Table | None) -> dict[int, str]:
        """Port -> who holds it, for this allocator and every live process sharing the table."""
        holders: dict[int, str] = {}
        if table is not None:
            for entry in table.entries:
                if not self._is_mine(entry):
                    for port in entry["ports"]:
                        holders[port] = f"{entry['owner']} (process {entry['pid']})"
        for owner, ports in self._held.items():
            for port in ports:
                holders[port] = owner
        return holders

    def _fixed(
        self, owner: str, ask: PortAsk, holders: dict[int, str], fresh: dict[int, str]
    ) -> list[int]:
        ports = list(range(ask.begin_at, ask.begin_at + ask.count))
        for port in ports:
            what = f"port {port} (label {ask.label}, beginAt {ask.begin_at}) for {owner}"
            if port in fresh:
                raise PortConflict(f"{what} is also asked for by {fresh[port]}")
            if port in holders:
                raise PortConflict(f"{what} is already held by {holders[port]}")
            problem = bind_problem(port, self.bind_host)
            if problem is not None:
                raise PortConflict(f"{what} cannot be bound on this host ({problem})")
        for port in ports:
            fresh[port] = owner
        return ports

    def _scan(
        self,
        need: int,
        cursor: int,
        holders: dict[int, str],
        fresh: dict[int, str],
        owners: list[str],
    ) -> tuple[list[int], int]:
        """``need`` free, bindable ports from the cursor on, and the cursor after them."""
        if need == 0:
            return [], cursor
        size = self.end - self.start
        found: list[int] = []
        held = busy = 0
        for step in range(size):
            port = self.start + (cursor - self.start + step) % size
            if port in holders or port in fresh:
                held += 1
                continue
            if bind_problem(port, self.bind_host) is not None:
                busy += 1
                continue
            found.append(port)
            if len(found) == need:
                after = self.start + (port + 1 - self.start) % size
                return found, after
        who = owners[0] if len(owners) == 1 else f"{len(owners)} instances"
        raise PortsExhausted(
            f"no free ports: {who} need{'s' if len(owners) == 1 else ''} {need}, only "
            f"{len(found)} free in {self.start}-{self.end - 1} ({held} held by running "
            f"instances, {busy} in use by other programs on this host)"
        )

    def _in_range(self, port: int | None) -> bool:
        return port is not None and self.start <= port < self.end

    # -- the shared table --

    def _is_mine(self, entry: dict[str, Any]) -> bool:
        return entry.get("pid") == os.getpid() and entry.get("token") == self._token

    @contextlib.contextmanager
    def _shared(self) -> Iterator[_Table | None]:
        """The shared table, locked against other processes for the duration."""
        if self.state_file is None:
            yield None
            return
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.state_file.with_name(self.state_file.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self._read()
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _read(self) -> _Table:
        assert self.state_file is not None
        try:
            data = json.loads(self.state_file.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return _Table()
        if not isinstance(data, dict):
            return _Table()
        alive: dict[tuple[int, Any], bool] = {}
        entries = []
        for entry in data.get("holders", []):
            if not _valid_entry(entry):
                continue
            process = (entry["pid"], entry.get("started"))
            if process not in alive:
                alive[process] = _alive(entry)
            if alive[process]:
                entries.append(entry)
        cursor = data.get("cursor")
        return _Table(cursor if isinstance(cursor, int) else None, entries)

    def _write(self, table: _Table) -> None:
        assert self.state_file is not None
        pid, started = os.getpid(), _start_time(os.getpid())
        entries = [e for e in table.entries if not self._is_mine(e)]
        entries += [
            {"pid": pid, "started": started, "token": self._token, "owner": o, "ports": p}
            for o, p in self._held.items()
            if p
        ]
        text = json.dumps({"version": 1, "cursor": table.cursor, "holders": entries})
        tmp = self.state_file.with_name(f".{self.state_file.name}.{pid}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self.state_file)


def _normalize(owner: str, requests: Sequence[PortAsk | tuple[Any, ...]]) -> list[PortAsk]:
    asks: list[PortAsk] = []
    for raw in requests:
        ask = PortAsk(*raw)
        if not isinstance(ask.label, str) or not ask.label:
            raise PortRequestError(f"a port label of {owner} is empty")
        if not isinstance(ask.count, int) or ask.count < 0:
            raise PortRequestError(f"port count of label {ask.label} must be >= 0")
        if not isinstance(ask.begin_at, int) or ask.begin_at < 0:
            raise PortRequestError(f"beginAt of label {ask.label} must be >= 0")
        if ask.begin_at and ask.begin_at + ask.count - 1 > _MAX_PORT:
            raise PortRequestError(
                f"label {ask.label} asks for ports {ask.begin_at}-"
                f"{ask.begin_at + ask.count - 1}, beyond the last port 65535"
            )
        if any(a.label == ask.label for a in asks):
            raise PortRequestError(f"port label {ask.label} appears twice for {owner}")
        asks.append(ask)
    return asks


def _valid_entry(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("pid"), int)
        and isinstance(entry.get("owner"), str)
        and isinstance(entry.get("ports"), list)
        and all(isinstance(p, int) for p in entry["ports"])
    )


def _alive(entry: dict[str, Any]) -> bool:
    """Whether the process that wrote ``entry`` still runs (not a later one with its pid)."""
    pid = entry["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by someone else
    stat = _proc_stat(pid)
    if stat is None:
        return True  # no /proc: trust the pid
    if stat[0] in ("Z", "X"):
        return False
    started = entry.get("started")
    return started is None or len(stat) <= 19 or stat[19] == str(started)


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def _start_time(pid: int) -> int | None:
    stat = _proc_stat(pid)
    return int(stat[19]) if stat is not None and len(stat) > 19 else None
