"""The `/exec` websocket's refusals, on a real uvicorn server without a backend: each comes as
an `error` message with a code and a reason naming the field, then the close code that goes
with it (docs/instance-access.md). Running commands: tests/cli/test_instance_exec.py (Docker) and
tests/backends/test_kubernetes_fake_cluster.py (the Kubernetes exec API)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from server.api.ids import global_id
from server.api.jobs.exec_socket import MAX_ANONYMOUS_PER_ADDRESS
from server.app import exec_frames as frames
from server.app.asgi import create_app
from tests.api_support import live_server
from tests.waiting import until_async

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


def _exec_url(url: str) -> str:
    return url.replace("http", "ws", 1) + frames.PATH


async def test_a_connection_that_sends_nothing_is_closed_within_seconds(db_url: str) -> None:
    async with (
        live_server(create_app(db_url=db_url, backend=None)) as url,
        websockets.connect(_exec_url(url), subprotocols=[frames.SUBPROTOCOL]) as ws,  # type: ignore[list-item]
    ):
        # it was held for 30 seconds; the bound here only tells 5 from 30
        message = json.loads(await asyncio.wait_for(ws.recv(), 20))
        with pytest.raises(ConnectionClosed):
            await ws.recv()
    assert message == {
        "type": "error",
        "code": "bad-request",
        "message": f"no start message within {frames.START_TIMEOUT_SECONDS:g} seconds",
    }
    assert frames.START_TIMEOUT_SECONDS <= 5
    assert ws.close_code == 4400


async def test_one_address_holds_at_most_8_connections_that_have_not_started(
    db_url: str,
) -> None:
    async with live_server(create_app(db_url=db_url, backend=None)) as url:
        async with contextlib.AsyncExitStack() as waiting:
            for _ in range(MAX_ANONYMOUS_PER_ADDRESS):
                ws = await waiting.enter_async_context(
                    websockets.connect(_exec_url(url), subprotocols=[frames.SUBPROTOCOL])  # type: ignore[list-item]
                )
            # the next is refused before it sends anything
            async with websockets.connect(
                _exec_url(url),
                subprotocols=[frames.SUBPROTOCOL],  # type: ignore[list-item]
            ) as extra:
                message = json.loads(await extra.recv())
                with pytest.raises(ConnectionClosed):
                    await extra.recv()
                close = extra.close_code
            assert message["code"] == "too-many-connections"
            assert message["message"] == (
                "127.0.0.1 has 8 exec connections that have not sent their start message yet, "
                "the most one address may have (limit 8); send `start` on those first"
            )
            assert close == 4429
            await ws.send(json.dumps({**START, "command": ["ls"]}))  # the last one starts
            assert json.loads(await ws.recv())["code"] == "not-found"
            # so another may come: refused for its own reason only
            message, _ = await refusal(url, json.dumps({**START, "command": ["ls"]}))
            assert message["code"] == "not-found"
        # all gone: a new one is heard out
        message, _ = await refusal(url, json.dumps({**START, "command": ["ls"]}))
        assert message["code"] == "not-found"


async def test_a_client_leaving_before_start_is_one_info_line(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with live_server(create_app(db_url=db_url, backend=None)) as url:
        for _ in range(3):
            async with websockets.connect(_exec_url(url), subprotocols=[frames.SUBPROTOCOL]):  # type: ignore[list-item]
                pass
        await until_async(lambda: len(_left(caplog)) == 3, "three clients logged as gone", 20)
    assert [r.levelno for r in _left(caplog)] == [logging.INFO] * 3
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]


def _left(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "left before its session started" in r.getMessage()]
