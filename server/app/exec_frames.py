"""The framed protocol of `/exec`, the websocket `paigraph exec` and `paigraph shell` use.

Shared by the server (server.api.jobs.exec_socket) and the command line
(server.client.exec_client), so both ends frame messages alike; the protocol for other clients
is in docs/instance-access.md.
"""

from __future__ import annotations

import json
from typing import Any

PATH = "/exec"
SUBPROTOCOL = "paigraph.exec.v1"

STDIN = 0
STDOUT = 1
STDERR = 2

# error codes and the websocket close codes that go with them (4000 + the HTTP status)
ERROR_CLOSE = {
    "bad-request": 4400,
    "unauthorized": 4401,
    "forbidden": 4403,
    "not-found": 4404,
    "not-running": 4409,
    "too-many-sessions": 4429,
    "too-many-connections": 4429,
    "unavailable": 4503,
}
# A connection that sends no start message in time is closed: a client sends it at once, and
# a connection that has not said who it is holds the server's resources for nothing.
START_TIMEOUT_SECONDS = 5.0
MAX_COMMAND_ARGS = 1000


class FrameError(ValueError):
    """A message breaks the protocol; the text says how."""


def control(kind: str, **fields: Any) -> str:
    """A control message as the text of a frame."""
    return json.dumps({"type": kind, **fields})


def parse_control(text: str) -> dict[str, Any]:
    """A control message's fields; FrameError unless it is a JSON object with a string `type`."""
    try:
        message = json.loads(text)
    except ValueError:
        raise FrameError("a text frame must hold a JSON object") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise FrameError('a text frame must be a JSON object with a string "type"')
    return message


def data(stream: int, payload: bytes) -> bytes:
    """A binary frame of `stream`."""
    return bytes([stream]) + payload


def split_data(frame: bytes) -> tuple[int, bytes]:
    """(stream, payload) of a binary frame; FrameError when it is empty."""
    if not frame:
        raise FrameError("a binary frame must start with its stream's byte")
    return frame[0], frame[1:]
