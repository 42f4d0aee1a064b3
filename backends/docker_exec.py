"""A command in a simulator container, through Docker's exec API.

`exec_create` + `exec_start(socket=True)` give the raw connection the Docker CLI uses: without
a terminal the output comes in frames of an 8-byte header (stream, 0, 0, 0, size as a
big-endian 32-bit number) and the data; with one it comes as it is. Half-closing the socket's
write side ends the command's stdin, and `exec_inspect` tells the exit code once it ended.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from typing import Any

import docker
import docker.errors

from backends.base import BackendError
from backends.instance_exec import STDERR, STDOUT, ExecRequest

_HEADER = struct.Struct(">BxxxL")
_CHUNK = 1 << 16
_EXIT_WAIT_SECONDS = 5.0  # Docker records the exit code just after the output ends


class DockerExecSession:
    """One `docker exec` on `container_id` (started by the constructor)."""

    def __init__(self, api: docker.APIClient, container_id: str, request: ExecRequest) -> None:
        self.api = api
        self.tty = request.tty
        try:
            created = api.exec_create(container_id, request.command, stdin=True, tty=request.tty)
            self.exec_id: str = created["Id"]
            raw: Any = api.exec_start(self.exec_id, socket=True, tty=request.tty)
        except docker.errors.APIError as exc:
            raise BackendError(
                f"cannot run {request.command[0]!r} in the instance: {exc.explanation or exc}"
            ) from None
        # a SocketIO over the connection on a unix socket, the socket itself on some transports
        self.sock: socket.socket = getattr(raw, "_sock", raw)
        self.sock.settimeout(None)
        self._buffer = b""
        if request.tty:
            self.resize(request.rows, request.columns)

    def read(self) -> tuple[int, bytes] | None:
        if self.tty:
            received = self._recv()
            return (STDOUT, received) if received else None
        header = self._exactly(_HEADER.size)
        if header is None:
            return None
        stream, size = _HEADER.unpack(header)
        data = self._exactly(size) if size else b""
        if data is None:
            return None
        return (STDERR if stream == 2 else STDOUT, data)

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close_stdin(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)

    def resize(self, rows: int, columns: int) -> None:
        if not self.tty:
            return
        with contextlib.suppress(docker.errors.APIError):  # the command may have just ended
            self.api.exec_resize(self.exec_id, height=rows, width=columns)

    def exit_code(self) -> int:
        deadline = time.monotonic() + _EXIT_WAIT_SECONDS
        while True:
            state = self.api.exec_inspect(self.exec_id)
            if not state.get("Running") and state.get("ExitCode") is not None:
                return int(state["ExitCode"])
            if time.monotonic() > deadline:
                raise BackendError("the command's output ended but Docker tells no exit code")
            time.sleep(0.05)

    def close(self) -> None:
        """Shut the connection down first: that wakes a `read` blocked in another thread."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()

    def _recv(self) -> bytes:
        try:
            return self.sock.recv(_CHUNK)
        except OSError:
            return b""

    def _exactly(self, size: int) -> bytes | None:
        """`size` bytes of the stream, None when it ends first."""
        while len(self._buffer) < size:
            data = self._recv()
            if not data:
                return None
            self._buffer += data
        taken, self._buffer = self._buffer[:size], self._buffer[size:]
        return taken
