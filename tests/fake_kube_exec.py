"""The exec endpoint of the fake Kubernetes API (tests/fake_kube_api.py): the websocket an API
server opens for `pods/<name>/exec`, with the fake playing the kubelet.

The handshake and the channel protocol are the API server's: the client offers
`v5.channel.k8s.io` and/or `v4.channel.k8s.io`; every message is a binary frame whose first byte
is the channel (0 stdin, 1 stdout, 2 stderr, 3 the final status, 4 resize as JSON
{"Width", "Height"}; on v5, 255 followed by a channel closes that channel). The command runs on
this machine as a child process, on a pseudo-terminal when `tty=true`, so what comes back is
real output and a real exit code. Framing is the `websockets` library's sans-I/O protocol.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import pty
import select
import socket
import struct
import subprocess
import termios
import threading
from typing import Any

from websockets.frames import Opcode
from websockets.protocol import Protocol, Side

WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
_CLOSE_CHANNEL = 255


def accept_key(key: str) -> str:
    """The Sec-WebSocket-Accept answer to a Sec-WebSocket-Key (RFC 6455)."""
    return base64.b64encode(hashlib.sha1((key + WEBSOCKET_GUID).encode()).digest()).decode()


def choose_protocol(offered: str) -> str | None:
    """The channel protocol the API server picks of those offered: v5 first."""
    names = [name.strip() for name in offered.split(",")]
    return next((p for p in (V5, V4) if p in names), None)


def exit_status(code: int, command: list[str]) -> dict[str, Any]:
    """What the API server sends on channel 3 when the command ended with `code`."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"command terminated with non-zero exit code: error executing command "
        f"{command}, exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


class ExecConnection:
    """One exec after the handshake: runs `command` and serves the channels until it ends."""

    def __init__(self, sock: socket.socket, protocol: str, command: list[str], tty: bool) -> None:
        self.sock = sock
        self.v5 = protocol == V5
        self.command = command
        self.tty = tty
        self.ws = Protocol(Side.SERVER, max_size=None)
        self._stdin_file: Any = None  # the pipe to the command's stdin, without a terminal
        self._sending = threading.Lock()

    def serve(self) -> None:
        process, stdin_fd, outputs = self._start()
        readers = [
            threading.Thread(target=self._pump, args=(fd, channel), daemon=True)
            for fd, channel in outputs
        ]
        for reader in readers:
            reader.start()
        try:
            client_left = self._take_input(process, stdin_fd, readers)
        finally:
            if process.poll() is None:
                process.kill()
            code = process.wait()
            for reader in readers:
                reader.join(timeout=5)
        if not client_left:
            self._send(3, json.dumps(exit_status(code, self.command)).encode())
            with self._sending:
                self.ws.send_close(1000)
                self._flush()

    def _start(self) -> tuple[subprocess.Popen[bytes], int, list[tuple[int, int]]]:
        if self.tty:
            leader, follower = pty.openpty()
            process = subprocess.Popen(
                self.command,
                stdin=follower,
                stdout=follower,
                stderr=follower,
                start_new_session=True,
                preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
            )
            os.close(follower)
            return process, leader, [(leader, 1)]
        process = subprocess.Popen(
            self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert process.stdin and process.stdout and process.stderr
        self._stdin_file = process.stdin
        outputs = [(process.stdout.fileno(), 1), (process.stderr.fileno(), 2)]
        return process, process.stdin.fileno(), outputs

    def _pump(self, fd: int, channel: int) -> None:
        """One output of the command to its channel, until it ends."""
        with contextlib.suppress(OSError):  # a pseudo-terminal ends with EIO
            while data := os.read(fd, 1 << 14):
                self._send(channel, data)

    def _take_input(
        self, process: subprocess.Popen[bytes], stdin_fd: int, readers: list[threading.Thread]
    ) -> bool:
        """Serve the client's frames until the command ended and its output is sent; True
        when the client went away first."""
        stdin_open = True
        while process.poll() is None or any(r.is_alive() for r in readers):
            ready, _, _ = select.select([self.sock], [], [], 0.05)
            if not ready:
                continue
            data = self.sock.recv(1 << 16)
            if not data:
                return True
            self.ws.receive_data(data)
            for frame in self.ws.events_received():
                if frame.opcode is Opcode.CLOSE:
                    with self._sending:
                        self._flush()
                    return True
                if frame.opcode not in (Opcode.BINARY, Opcode.TEXT) or not frame.data:
                    continue
                channel, payload = frame.data[0], bytes(frame.data[1:])
                if channel == 0 and stdin_open:
                    with contextlib.suppress(OSError):
                        os.write(stdin_fd, payload)
                elif channel == 4 and self.tty:
                    size = json.loads(payload)
                    winsize = struct.pack("HHHH", size["Height"], size["Width"], 0, 0)
                    fcntl.ioctl(stdin_fd, termios.TIOCSWINSZ, winsize)
                elif channel == _CLOSE_CHANNEL and self.v5 and payload[:1] == b"\0":
                    stdin_open = False
                    if self.tty:
                        os.write(stdin_fd, b"\x04")  # the terminal's end of file
                    else:
                        self._stdin_file.close()
            with self._sending:
                self._flush()
        return False

    def _send(self, channel: int, data: bytes) -> None:
        with self._sending:
            self.ws.send_binary(bytes([channel]) + data)
            self._flush()

    def _flush(self) -> None:
        for chunk in self.ws.data_to_send():
            if chunk:
                self.sock.sendall(chunk)
