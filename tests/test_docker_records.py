"""The simulator's records and logs on disk: whatever lies in their place, reading them never
follows a symlink, never blocks and never raises into the server."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backends import docker_records as records
from backends.base import EventKind, InstanceEvent, LaunchRequest
from tests.simulated import role


def test_records_that_are_not_files_read_as_absent(tmp_path: Path) -> None:
    instance = tmp_path / "main-0"
    instance.mkdir()
    (instance / "exit.json").mkdir()
    (instance / "relaunch.json").symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_text('{"run": 2, "queued": false, "placement": null}')
    assert records.read_exit(instance) is None
    assert records.read_run(instance) is None


def test_records_that_do_not_parse_read_as_absent(tmp_path: Path) -> None:
    (tmp_path / "exit.json").write_text("{not json")
    (tmp_path / "relaunch.json").write_text('{"run": "many"}')
    (tmp_path / "network.json").write_bytes(b"\xff\xfe")
    assert records.read_exit(tmp_path) is None
    assert records.read_run(tmp_path) is None
    assert records.read_network(tmp_path) is None


def test_an_unreadable_launch_record_is_left_out_of_a_restart(tmp_path: Path) -> None:
    good = records.attempt_dir(tmp_path, "good", 1)
    records.write_launch(good, LaunchRequest(job_id="good", job_name="g", roles=[role("a", [])]))
    bad = records.attempt_dir(tmp_path, "bad", 1)
    bad.mkdir(parents=True)
    (bad / "launch.json").mkdir()
    assert [request.job_id for _, request in records.recorded_launches(tmp_path)] == ["good"]


def test_records_are_written_over_a_symlink_not_through_it(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("kept\n")
    instance = tmp_path / "main-0"
    instance.mkdir()
    (instance / "exit.json").symlink_to(target)
    event = InstanceEvent(job_id="j", attempt=1, role="main", index=0, kind=EventKind.EXITED)
    records.write_exit(instance, event)
    assert target.read_text() == "kept\n"
    assert records.read_exit(instance) == event


@pytest.mark.parametrize("kind", ["symlink", "directory", "fifo"])
def test_a_log_that_is_not_a_regular_file_is_not_read(tmp_path: Path, kind: str) -> None:
    instance = tmp_path / "main-0"
    records.create_log(instance)
    log = records.log_file(instance)
    log.unlink()
    secret = tmp_path / "secret"
    secret.write_text("secret\n")
    if kind == "symlink":
        log.symlink_to(secret)
    elif kind == "directory":
        log.mkdir()
    else:
        os.mkfifo(log)  # opening it for reading would block without O_NONBLOCK
    text = records.read_from(log, 0).decode()
    assert "secret" not in text
    assert "the log cannot be read" in text
    assert records.read_from(log, len(text)) == b""
    assert records.tail_offset(log, 5) == 0
    records.log_retry(instance, 2)  # appends nothing anywhere, raises nothing
    assert secret.read_text() == "secret\n"


def whole_file_tail(data: bytes, lines: int) -> int:
    """Where the last `lines` lines begin, found the obvious way in memory."""
    if lines <= 0:
        return len(data)
    kept = data.splitlines(keepends=True)[-lines:]
    return len(data) - sum(len(line) for line in kept)


@given(
    chunks=st.lists(st.sampled_from([b"a", b"bc", b"\n", b"x" * 70_000]), max_size=12),
    lines=st.integers(min_value=0, max_value=6),
)
def test_the_tail_is_found_from_the_end(chunks: list[bytes], lines: int) -> None:
    data = b"".join(chunks)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "output.log"
        path.write_bytes(data)
        assert records.tail_offset(path, lines) == whole_file_tail(data, lines)
