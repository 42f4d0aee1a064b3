"""A fault-injecting proxy in front of a Docker engine's unix socket, for the fault tests.

Point a client at `proxy.url` (DOCKER_HOST) and it talks to the real engine through the
proxy, which can, on demand:

- `cut_events()`: break every open event stream (`GET /events`), as an engine restart or a
  broken connection does; the other connections go on;
- `refuse()` ... `accept()`: cut every connection and close each new one at once, as a stopped
  engine does; `accept()` lets them through again;
- `delay = s`: hold each request from the client for `s` seconds before passing it on.

Threads, one pair per connection: the tests are small and the proxy must not share an event
loop with the code it tests.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from pathlib import Path

DOCKER_SOCKET = "/var/run/docker.sock"


class _Link:
    """One client connection and its upstream twin."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.events = False  # carries an event stream: `cut_events` breaks it

    def close(self) -> None:
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


class DockerProxy:
    """Listens on `path`, forwards to `upstream`; see the module docstring."""

    def __init__(self, path: Path, upstream: str = DOCKER_SOCKET) -> None:
        self.path = path
        self.upstream = upstream
        self.delay = 0.0
        self.refused = 0  # connections closed at once while refusing
        self.events_opened = 0  # event streams seen, cut or not
        self._refusing = False
        self._links: set[_Link] = set()
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self._server.bind(str(path))
        self._server.listen(64)
        self._closed = False
        threading.Thread(target=self._accept, name="docker-proxy", daemon=True).start()

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    # --- faults ----------------------------------------------------------------------------

    def cut_events(self) -> int:
        """Break every open event stream; how many were broken."""
        with self._lock:
            cut = [link for link in self._links if link.events]
        for link in cut:
            link.close()
        return len(cut)

    def refuse(self) -> None:
        """Act as a stopped engine: cut every connection, close each new one at once."""
        with self._lock:
            self._refusing = True
            links = list(self._links)
        for link in links:
            link.close()

    def accept(self) -> None:
        with self._lock:
            self._refusing = False

    def close(self) -> None:
        self._closed = True
        self.refuse()
        with contextlib.suppress(OSError):
            self._server.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    # --- the threads -------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                refusing = self._refusing
            if refusing:
                self.refused += 1
                client.close()
                continue
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.upstream)
            except OSError:
                client.close()
                upstream.close()
                continue
            link = _Link(client, upstream)
            with self._lock:
                self._links.add(link)
            threading.Thread(target=self._forward, args=(link, True), daemon=True).start()
            threading.Thread(target=self._forward, args=(link, False), daemon=True).start()

    def _forward(self, link: _Link, from_client: bool) -> None:
        source, target = (
            (link.client, link.upstream) if from_client else (link.upstream, link.client)
        )
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if from_client:
                    if not link.events and (b" /events" in data or b"/events?" in data):
                        link.events = True
                        self.events_opened += 1
                    if self.delay:
                        time.sleep(self.delay)
                target.sendall(data)
        except OSError:
            pass  # the other side or a fault closed it: the link ends below
        finally:
            link.close()
            with self._lock:
                self._links.discard(link)
