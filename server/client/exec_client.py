"""The client side of `/exec` (server.app.exec_frames): `paigraph exec` and `paigraph shell`.

The main thread receives the command's output and writes it to this process's stdout and
stderr; a daemon thread sends this process's stdin. For a shell the local terminal is put in
raw mode, so every key (Ctrl-C, Ctrl-D, Ctrl-Z ...) goes to the instance's terminal as typed,
and a SIGWINCH sends the terminal's new size.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
import termios
import threading
import tty
from collections.abc import Iterator
from typing import Any, BinaryIO

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from server.app import exec_frames as frames
from server.client.remote import Client, RemoteError

CLIENT_ERROR = 255  # the exit status when the command did not run to its end (as ssh's)
_READ_SIZE = 1 << 14
# How long the server may take to start the command once it has the start message (a busy
# Docker engine or cluster can be slow to open an exec); the server's own wait for the start
# message is much shorter.
STARTED_WAIT_SECONDS = 60.0


def shell_command(term: str | None) -> list[str]:
    """An interactive shell in the instance's working directory: bash where the image has it,
    else sh, with the caller's TERM."""
    script = (
        f"export TERM={shlex.quote(term or 'xterm')}; cd /work 2>/dev/null; "
        "if command -v bash >/dev/null 2>&1; then exec bash; fi; exec sh"
    )
    return ["/bin/sh", "-c", script]


def terminal_size(fd: int) -> tuple[int, int]:
    """(rows, columns) of the terminal on `fd`; 24 x 80 when it is none."""
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return 24, 80
    return size.lines or 24, size.columns or 80


class ExecClient:
    """One command in one instance, through the server at `client.url`."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.ws_url = "ws" + client.url[len("http") :] + frames.PATH

    def run(
        self,
        job_id: str,
        role: str,
        index: int,
        command: list[str],
        *,
        tty_mode: bool,
        stdin: BinaryIO,
        stdout: BinaryIO,
        stderr: BinaryIO,
    ) -> int:
        """Run `command` and pass its streams through; its exit code, or RemoteError."""
        rows, columns = terminal_size(stdout.fileno()) if tty_mode else (24, 80)
        start = frames.control(
            "start",
            job=job_id,
            role=role,
            index=index,
            command=command,
            tty=tty_mode,
            rows=rows,
            columns=columns,
        )
        headers = {"Authorization": f"Bearer {self.client.token}"} if self.client.token else {}
        try:
            with connect(
                self.ws_url,
                subprotocols=[frames.SUBPROTOCOL],  # type: ignore[list-item]
                additional_headers=headers,
                max_size=None,
                ping_interval=20,
                ping_timeout=None,
            ) as ws:
                ws.send(start)
                self._expect_started(ws)
                with _raw_terminal(stdin, tty_mode), _resizing(ws, stdout, tty_mode):
                    threading.Thread(
                        target=_send_stdin, args=(ws, stdin), name="exec-stdin", daemon=True
                    ).start()
                    return _receive(ws, stdout, stderr)
        except ConnectionClosed as exc:
            raise RemoteError(f"the connection to {self.ws_url} ended: {exc}") from None
        except OSError as exc:
            raise RemoteError(f"cannot reach the paigraph server at {self.ws_url}: {exc}") from None

    def _expect_started(self, ws: ClientConnection) -> None:
        """Wait for `started`; RemoteError with the server's reason when it refused."""
        try:
            reply = ws.recv(timeout=STARTED_WAIT_SECONDS)
        except TimeoutError:
            raise RemoteError("the server did not start the command in time") from None
        if isinstance(reply, bytes):
            raise RemoteError("the server answered with data before starting the command")
        message = frames.parse_control(reply)
        if message["type"] == "error":
            if message.get("code") == "unauthorized":
                raise RemoteError(self.client.unauthorized())
            raise RemoteError(str(message.get("message")))
        if message["type"] != "started":
            raise RemoteError(f"the server answered {message['type']!r} instead of starting")


def _receive(ws: ClientConnection, stdout: BinaryIO, stderr: BinaryIO) -> int:
    """Write the output as it comes; the exit code at the end."""
    for message in ws:
        if isinstance(message, bytes):
            stream, payload = frames.split_data(message)
            target = stderr if stream == frames.STDERR else stdout
            target.write(payload)
            target.flush()
            continue
        control = frames.parse_control(message)
        if control["type"] == "exit":
            return int(control["code"])
        if control["type"] == "error":
            raise RemoteError(str(control.get("message")))
    raise RemoteError("the server closed the connection before the command ended")


def _send_stdin(ws: ClientConnection, stdin: BinaryIO) -> None:
    """This process's stdin to the command, then its end."""
    fd = stdin.fileno()
    with contextlib.suppress(ConnectionClosed, OSError):
        while data := os.read(fd, _READ_SIZE):
            ws.send(frames.data(frames.STDIN, data))
        ws.send(frames.control("eof"))


@contextlib.contextmanager
def _raw_terminal(stdin: BinaryIO, wanted: bool) -> Iterator[None]:
    """Raw mode on the local terminal while a shell runs; restored whatever happens."""
    fd = stdin.fileno()
    if not wanted or not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    tty.setraw(fd, termios.TCSADRAIN)  # not TCSAFLUSH: what was typed ahead is kept
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def _resizing(ws: ClientConnection, stdout: BinaryIO, wanted: bool) -> Iterator[None]:
    """Send the terminal's size whenever it changes (SIGWINCH), while a shell runs."""
    if not wanted or threading.current_thread() is not threading.main_thread():
        yield
        return

    def resized(*_: Any) -> None:
        rows, columns = terminal_size(stdout.fileno())
        with contextlib.suppress(ConnectionClosed):
            ws.send(frames.control("resize", rows=rows, columns=columns))

    previous = signal.signal(signal.SIGWINCH, resized)
    try:
        yield
    finally:
        signal.signal(signal.SIGWINCH, previous)


def std_streams() -> tuple[BinaryIO, BinaryIO, BinaryIO]:
    return sys.stdin.buffer, sys.stdout.buffer, sys.stderr.buffer
