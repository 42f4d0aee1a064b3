"""What the `paigraph` commands print when their output is not a terminal (a pipe, a file, a
CI log): tables at full width, never cut at 80 columns, and a newline at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from server.cli.main import app
from server.client import remote_commands

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1"})  # as a terminal of 80 would say

REASON = "waiting: needs 16 cpu, 6 free in vc default; " + "the rest of a long reason " * 6
PORTS = [{"label": f"label{i}", "ports": [15000 + i, 16000 + i]} for i in range(6)]


class FakeServer:
    """What the remote commands ask a server, answered with one long-winded job."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def job(self, reference: str) -> dict[str, Any]:
        instance = {
            "index": 0,
            "state": "WAITING",
            "exitCode": None,
            "exitReason": REASON,
            "node": "node-0",
            "hostIp": "10.222.1.3",
            "ports": PORTS,
        }
        return {
            "id": "Sm9iOmxvbmc=",
            "name": reference,
            "state": "WAITING",
            "stateReason": REASON,
            "attempt": 1,
            "taskRoles": [{"name": "a_role_with_a_long_name", "instances": [instance]}],
        }

    def task_logs(self, job_id: str, role: str, index: int, follow: bool) -> Iterator[str]:
        yield from self.log


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    fake = FakeServer([])
    monkeypatch.setattr(remote_commands, "_client", lambda url, token: fake)
    return fake


def test_status_prints_its_table_whole_when_the_output_is_not_a_terminal(
    server: FakeServer,
) -> None:
    done = runner.invoke(app, ["status", "a-job-with-a-long-name"])
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert REASON.strip() in lines[0]  # the job's reason, on the title line
    row = next(line for line in lines if line.startswith("a_role_with_a_long_name-0"))
    assert REASON.strip() in row and "label5:15005,16005" in row
    assert "…" not in done.stdout
    assert done.stdout.endswith("\n")


@pytest.mark.parametrize(
    ("chunks", "shown"),
    [
        (["step 1\n", "step 2 without a newline"], "step 1\nstep 2 without a newline\n"),
        (["step 1\n", "step 2\n"], "step 1\nstep 2\n"),
        ([], ""),
    ],
    ids=["no final newline", "final newline", "empty"],
)
def test_logs_end_with_a_newline_and_add_nothing_else(
    server: FakeServer, chunks: list[str], shown: str
) -> None:
    server.log = chunks
    done = runner.invoke(app, ["logs", "job", "worker", "0"])
    assert done.exit_code == 0, done.output
    assert done.stdout == shown


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["validate", str(ROOT / "examples" / "ps-worker.yaml")],
        ["validate", "--json", str(ROOT / "examples" / "serving.yaml")],
        ["resolve", str(ROOT / "examples" / "ps-worker.yaml")],
        ["schema"],
    ],
    ids=["version", "validate", "validate --json", "resolve", "schema"],
)
def test_offline_commands_end_their_output_with_a_newline(args: list[str]) -> None:
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    assert done.stdout.endswith("\n") and not done.stdout.endswith("\n\n")
