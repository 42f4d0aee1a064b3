"""The `/exec` websocket's refusals, on a real uvicorn server without a backend: each comes as
an `error` message with a code and a reason naming the field, then the close code that goes
with it (docs/instance-access.md). Running commands: tests/test_instance_exec.py (Docker) and
tests/test_kubernetes_fake_cluster.py (the Kubernetes exec API)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from server import exec_frames as frames
from server.api.ids import global_id
from server.app import create_app
from tests.api_support import live_server

pytestmark = pytest.mark.anyio

START = {"type": "start", "job": global_id("Job", "nosuch"), "role": "main", "index": 0}


async def refusal(url: str, first: str | bytes, token: str | None = None) -> tuple[Any, int]:
    """The error message the server answers `first` with, and the close code after it."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with websockets.connect(
        url.replace("http", "ws", 1) + frames.PATH,
        subprotocols=[frames.SUBPROTOCOL],  # type: ignore[list-item]
        additional_headers=headers,
    ) as ws:
        assert ws.subprotocol == frames.SUBPROTOCOL
        await ws.send(first)
        message = json.loads(await ws.recv())
        with pytest.raises(ConnectionClosed):
            await ws.recv()
        assert ws.close_code is not None
        return message, ws.close_code


@pytest.mark.parametrize(
    ("first", "code", "words"),
    [
        (b"\x00hello", "bad-request", "the first message must be a start message"),
        ("not json", "bad-request", "start message: a text frame must hold a JSON object"),
        (json.dumps({"type": "resize"}), "bad-request", 'must be of type "start"'),
        (json.dumps({**START, "job": "abc"}), "bad-request", "start.job"),
        (json.dumps({**START, "job": global_id("User", 1)}), "bad-request", "a Job"),
        (json.dumps({**START, "index": -1}), "bad-request", "start.index"),
        (json.dumps(START), "bad-request", "start.command: must be a list of 1 to 1000"),
        (json.dumps({**START, "command": ["a\0b"]}), "bad-request", "without NUL bytes"),
        (json.dumps({**START, "command": ["ls"], "tty": "yes"}), "bad-request", "start.tty"),
        (json.dumps({**START, "command": ["ls"], "rows": 0}), "bad-request", "start.rows"),
        (json.dumps({**START, "command": ["ls"]}), "not-found", "no job has id 'nosuch'"),
    ],
)
async def test_exec_refuses_what_it_cannot_run(
    db_url: str, first: str | bytes, code: str, words: str
) -> None:
    async with live_server(create_app(db_url=db_url, backend=None)) as url:
        message, close = await refusal(url, first)
    assert (message["type"], message["code"]) == ("error", code)
    assert words in message["message"]
    assert close == frames.ERROR_CLOSE[code]


async def test_exec_refuses_an_unknown_token(db_url: str) -> None:
    start = json.dumps({**START, "command": ["ls"]})
    async with live_server(create_app(db_url=db_url, backend=None)) as url:
        message, close = await refusal(url, start, token="wrong")
        in_start, _ = await refusal(url, json.dumps({**START, "command": ["ls"], "token": "x"}))
    assert message["code"] == "unauthorized" and "not valid" in message["message"]
    assert close == 4401
    assert in_start["code"] == "unauthorized"
