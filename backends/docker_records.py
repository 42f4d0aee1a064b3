"""The simulator's state directory: where an attempt's records and files live, and their formats.

Everything an attempt needs to be found again after a restart is here, one folder per attempt
(`<job>/<attempt>/`) holding its launch request (`launch.json`, secrets left out) and the
addresses of its network (`network.json`), and one folder per instance (`<role>-<index>/`)
holding its runtime files (mounted into its container), its log, its run number (after a
relaunch) and, once it ended, its exit record. Logs and exit records stay until the folder is
removed; the launch request goes when the attempt is forgotten.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from backends.base import InstanceEvent, LaunchRequest, Placement, RoleLaunch
from backends.docker_specs import safe
from backends.entrypoint import MARKER, entrypoint_script
from backends.runtime_env import shell_env_file

_LAUNCH = "launch.json"
_NETWORK = "network.json"
_EXIT = "exit.json"
_RUN = "relaunch.json"
_LOG = "output.log"


class RunRecord(NamedTuple):
    """An instance's run number, and whether that run still waits to be placed."""

    run: int
    queued: bool
    placement: Placement | None


def attempt_dir(attempts_dir: Path, job_id: str, attempt: int) -> Path:
    return attempts_dir / safe(job_id) / str(attempt)


def instance_dir(attempt_dir: Path, role: str, index: int) -> Path:
    return attempt_dir / f"{safe(role)}-{index}"


# --- attempt records ---------------------------------------------------------------------------


def write_launch(attempt_dir: Path, request: LaunchRequest) -> None:
    attempt_dir.mkdir(parents=True, exist_ok=True)
    (attempt_dir / _LAUNCH).write_text(
        request.model_dump_json(exclude={"secrets"}), encoding="utf-8"
    )


def recorded_launches(attempts_dir: Path) -> list[tuple[Path, LaunchRequest]]:
    """Every attempt not forgotten yet, with its folder, in the order of their folders."""
    return [
        (launch.parent, LaunchRequest.model_validate_json(launch.read_text(encoding="utf-8")))
        for launch in sorted(attempts_dir.glob(f"*/*/{_LAUNCH}"))
    ]


def remove_launch(attempt_dir: Path) -> None:
    (attempt_dir / _LAUNCH).unlink(missing_ok=True)


def write_network(attempt_dir: Path, name: str, addresses: list[str]) -> None:
    """A relaunch after a restart gives an instance its address on this network from here."""
    (attempt_dir / _NETWORK).write_text(
        json.dumps({"name": name, "addresses": addresses}), encoding="utf-8"
    )


def read_network(attempt_dir: Path) -> tuple[str, list[str]] | None:
    """The network's name and its addresses in the gang's order; None when not (well) kept."""
    try:
        network = json.loads((attempt_dir / _NETWORK).read_text("utf-8"))
        return network["name"], network["addresses"]
    except (FileNotFoundError, ValueError, KeyError):
        return None


# --- instance records --------------------------------------------------------------------------


def write_exit(instance_dir: Path, event: InstanceEvent) -> None:
    instance_dir.mkdir(parents=True, exist_ok=True)
    (instance_dir / _EXIT).write_text(event.model_dump_json(), encoding="utf-8")


def has_exit(instance_dir: Path) -> bool:
    return (instance_dir / _EXIT).exists()


def read_exit(instance_dir: Path) -> InstanceEvent | None:
    """The event the instance ended with; None while it has not ended."""
    try:
        text = (instance_dir / _EXIT).read_text("utf-8")
    except FileNotFoundError:
        return None
    return InstanceEvent.model_validate_json(text)


def remove_exit(instance_dir: Path) -> None:
    (instance_dir / _EXIT).unlink()


def write_run(instance_dir: Path, record: RunRecord) -> None:
    placement = record.placement.model_dump() if record.placement else None
    data = {"run": record.run, "queued": record.queued, "placement": placement}
    (instance_dir / _RUN).write_text(json.dumps(data), encoding="utf-8")


def read_run(instance_dir: Path) -> RunRecord | None:
    """None for an instance never relaunched: it is in its first run."""
    path = instance_dir / _RUN
    if not path.exists():
        return None
    data = json.loads(path.read_text("utf-8"))
    placement = data["placement"]
    return RunRecord(
        data["run"],
        data["queued"],
        Placement.model_validate(placement) if placement is not None else None,
    )


def write_runtime_files(instance_dir: Path, env: dict[str, str], role: RoleLaunch) -> None:
    """The environment and entrypoint the container runs with, from its runtime folder."""
    instance_dir.mkdir(parents=True, exist_ok=True)
    (instance_dir / "runtime_env.sh").write_text(shell_env_file(env), encoding="utf-8")
    (instance_dir / "entrypoint.sh").write_text(entrypoint_script(role), encoding="utf-8")


# --- logs --------------------------------------------------------------------------------------


def log_file(instance_dir: Path) -> Path:
    """The instance's output, every run of it in one file."""
    return instance_dir / _LOG


def log_retry(instance_dir: Path, run: int) -> None:
    """Mark in the log where a new run of the instance begins."""
    with log_file(instance_dir).open("a", encoding="utf-8") as log:
        log.write(f"{MARKER} task retry {run - 1}: starting task attempt {run}\n")


def read_from(path: Path, offset: int, limit: int = 1 << 16) -> bytes:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read(limit)
    except FileNotFoundError:
        return b""


def tail_offset(path: Path, lines: int) -> int:
    """The byte offset where the last `lines` lines of the file begin."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    if lines <= 0:
        return len(data)
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    position = end
    for _ in range(lines):
        position = data.rfind(b"\n", 0, position)
        if position < 0:
            return 0
    return position + 1
