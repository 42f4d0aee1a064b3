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
from backends.log_files import LogFile
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
    path = records.log_file(instance)
    path.unlink()
    secret = tmp_path / "secret"
    secret.write_text("secret\n")
    if kind == "symlink":
        path.symlink_to(secret)
    elif kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)  # opening it for reading would block without O_NONBLOCK
    log = records.instance_log(instance)
    data, after = log.read(0)
    assert b"secret" not in data
    assert b"the log cannot be read" in data
    assert log.read(after) == (b"", after)
    assert log.tail_offset(5) == 0
    assert log.keep_within(4096) is None
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
        log = LogFile(Path(folder) / "output.log", Path(folder) / "dropped.json")
        log.path.write_bytes(data)
        assert log.tail_offset(lines) == whole_file_tail(data, lines)


def read_all(log: LogFile, offset: int = 0) -> bytes:
    out = b""
    while True:
        data, offset = log.read(offset)
        if not data:
            return out
        out += data


def disk_bytes(path: Path) -> int:
    return path.stat().st_blocks * 512


def test_a_long_log_keeps_its_head_and_tail_and_says_what_was_dropped(tmp_path: Path) -> None:
    log = LogFile(tmp_path / "output.log", tmp_path / "dropped.json")
    lines = [f"line {n:07d}\n".encode() for n in range(200_000)]  # 2.6 MB
    with log.path.open("ab") as out:
        out.write(b"".join(lines[:100_000]))
        out.flush()
        first = log.keep_within(256 << 10)
        out.write(b"".join(lines[100_000:]))  # the job goes on printing
        out.flush()
        second = log.keep_within(256 << 10)
    assert first is not None and second is not None
    assert second.start == first.start and second.end > first.end
    size = log.path.stat().st_size
    assert size == sum(len(line) for line in lines)  # offsets stay valid
    assert disk_bytes(log.path) < 600 << 10  # the middle no longer takes disk

    text = read_all(log).decode()
    head, note, _ = text.partition("bytes of output were dropped here")
    assert note, "the reader is told where output was dropped"
    assert head.startswith("line 0000000\n")
    assert text.endswith("line 0199999\n")
    assert "\0" not in text
    assert len(text) < 600 << 10
    # the last lines are found after the dropped range, and a reader inside it skips it
    assert read_all(log, log.tail_offset(2)) == b"line 0199998\nline 0199999\n"
    inside, after = log.read(second.start + 10)
    assert b"dropped" in inside and after == second.end


def test_a_short_log_is_left_whole(tmp_path: Path) -> None:
    log = LogFile(tmp_path / "output.log", tmp_path / "dropped.json")
    log.path.write_bytes(b"short\n" * 100)
    assert log.keep_within(256 << 10) is None
    assert read_all(log) == b"short\n" * 100
