"""The remote commands pointed at an HTTP server that answers JSON, but not paigraph's API: the
user reads which answer was wrong, not a traceback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.servers import paigraph


class _Answers:
    """A server that answers every POST with the JSON it was given last."""

    def __init__(self) -> None:
        self.body: object = {}
        answers = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                payload = json.dumps(answers.body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()


@pytest.fixture
def foreign() -> Iterator[_Answers]:
    answers = _Answers()
    yield answers
    answers.server.shutdown()
    answers.server.server_close()


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ([1, 2], "answered JSON that is not an object"),
        ({"result": "ok"}, "answered neither data nor errors"),
        ({"data": {"job": "SUCCEEDED"}}, "the server's answer has no job object"),
    ],
)
def test_status_against_a_server_of_another_api_says_what_was_wrong(
    foreign: _Answers, body: object, said: str
) -> None:
    foreign.body = body
    done = paigraph("status", "some-job", "--url", foreign.url)
    assert done.returncode == 1, done.stderr
    assert said in " ".join(done.stderr.split())  # the terminal's width may break the line
    assert "Traceback" not in done.stderr
