"""A command in a task pod's main container, through the Kubernetes exec API.

Each session has its own ApiClient because `stream` swaps the client's request method while it
connects, which would disturb the backend's other calls on a shared one. Closing stdin alone
needs the v5 protocol (Kubernetes 1.30+; docs/instance-access.md).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from kubernetes.stream.ws_client import ERROR_CHANNEL, RESIZE_CHANNEL, STDIN_CHANNEL

from backends.base import BackendError
from backends.instance_exec import STDERR, STDOUT, ExecRequest

_WAIT_SECONDS = 1.0  # how long one wait for output lasts (a close in another thread is seen)

log = logging.getLogger(__name__)


class KubernetesExecSession:
    """One exec in `pod`'s `container` (started by the constructor)."""

    def __init__(
        self,
        configuration: Any,
        namespace: str,
        pod: str,
        container: str,
        request: ExecRequest,
    ) -> None:
        self.api_client = k8s.ApiClient(configuration)
        core = k8s.CoreV1Api(self.api_client)
        self.tty = request.tty
        try:
            self.ws = stream(
                core.connect_get_namespaced_pod_exec,
                pod,
                namespace,
                container=container,
                command=request.command,
                stdin=True,
                stdout=True,
                stderr=True,
                tty=request.tty,
                binary=True,
                _preload_content=False,
            )
        except ApiException as exc:
            self.api_client.close()
            raise BackendError(
                f"the Kubernetes API refuses to run the command in pod {pod}: "
                f"{exc.reason or exc.status}"
            ) from None
        self._writing = threading.Lock()
        if request.tty:
            self.resize(request.rows, request.columns)

    def read(self) -> tuple[int, bytes] | None:
        try:
            while True:
                for channel, name in ((1, STDOUT), (2, STDERR)):
                    data = self.ws.read_channel(channel)
                    if data:
                        return name, data
                if not self.ws.is_open():
                    return None
                self.ws.update(timeout=_WAIT_SECONDS)
        except (OSError, ValueError, AttributeError):  # closed from another thread
            return None

    def write(self, data: bytes) -> None:
        with self._writing:
            self.ws.write_channel(STDIN_CHANNEL, data)

    def close_stdin(self) -> None:
        with self._writing:
            self.ws.close_channel(STDIN_CHANNEL)

    def resize(self, rows: int, columns: int) -> None:
        if not self.tty:
            return
        with self._writing, contextlib.suppress(OSError):
            self.ws.write_channel(
                RESIZE_CHANNEL, json.dumps({"Height": rows, "Width": columns}).encode()
            )

    def exit_code(self) -> int:
        """From the status the API server sends on channel 3 as the command ends."""
        raw = self.ws.read_channel(ERROR_CHANNEL)
        if not raw:
            raise BackendError("the connection ended without the command's exit status")
        status = json.loads(raw)
        if status.get("status") == "Success":
            return 0
        for cause in (status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                return int(cause["message"])
        raise BackendError(f"the command could not run: {status.get('message', status)}")

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception as exc:  # already closed: nothing else to release
            log.debug("closing the exec stream: %s; going on", exc)
        self.api_client.close()
