"""What the `paigraph` commands print when their output is not a terminal (a pipe, a file, a
CI log): tables at full width, never cut at 80 columns."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from server import remote_commands
from server.cli import app

runner = CliRunner(env={"COLUMNS": "80", "NO_COLOR": "1"})  # as a terminal of 80 would say

REASON = "waiting: needs 16 cpu, 6 free in vc default; " + "the rest of a long reason " * 6
PORTS = [{"label": f"label{i}", "ports": [15000 + i, 16000 + i]} for i in range(6)]


class FakeServer:
    """What the remote commands ask a server, answered with one long-winded job."""

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


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    fake = FakeServer()
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
