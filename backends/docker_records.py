"""The simulator's state directory: where an attempt's records and files live, and their formats.

Everything needed to find an attempt again after a restart is here, and nothing the server reads
lies where the container can write but its log; a record that is missing or damaged reads as
absent. The layout: docs/architecture.md, The Docker backend's state directory and entrypoint.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from backends import host_files
from backends.base import InstanceEvent, LaunchRequest, Placement, RoleLaunch
from backends.entrypoint import MARKER, entrypoint_script
from backends.log_files import LogFile
from backends.runtime_env import shell_env_file
from backends.secrets_env import kept_request
from simulator.names import safe

log = logging.getLogger(__name__)

_LAUNCH = "launch.json"
_NETWORK = "network.json"
_EXIT = "exit.json"
_RUN = "relaunch.json"
_RUNTIME = "pai"  # mounted read-only at RUNTIME_DIR
_WRITABLE = "run"  # inside it, mounted read-write at RUN_DIR
_TOOLS = "bin"  # inside it: stand-in commands (hdfs_standin.TOOLS_DIR)
_DFS = "dfs"  # inside it: where the user's simulated file systems are mounted (DFS_DIR)
_GATE = "go"  # inside the read-only folder: the commands may start (docker_specs.GATE)
_LOG = "output.log"
_DROPPED = "log-dropped.json"  # which range of a long log was dropped (the server's own)


class RunRecord(NamedTuple):
    """An instance's run number (its containers'), whether that run still waits to be placed,
    and the task attempt the job engine knows the run by (its events carry it)."""

    run: int
    queued: bool
    placement: Placement | None
    task_attempt: int


def attempt_dir(attempts_dir: Path, job_id: str, attempt: int) -> Path:
    return attempts_dir / safe(job_id) / str(attempt)


def instance_dir(attempt_dir: Path, role: str, index: int) -> Path:
    return attempt_dir / f"{safe(role)}-{index}"


def runtime_dir(instance_dir: Path) -> Path:
    """The folder mounted read-only at RUNTIME_DIR."""
    return instance_dir / _RUNTIME


def writable_dir(instance_dir: Path) -> Path:
    """The folder mounted read-write at RUN_DIR: the only one the container may write."""
    return instance_dir / _RUNTIME / _WRITABLE


# --- attempt records ---------------------------------------------------------------------------


def write_launch(attempt_dir: Path, request: LaunchRequest) -> None:
    """Keep the request for a restart: without its secrets or ssh private key, and with a
    registry credential written as itself (not a `<% $secrets.x %>` reference) masked."""
    attempt_dir.mkdir(parents=True, exist_ok=True)
    kept = kept_request(request)
    # the job's ssh private key is left out too: an instance run again after a restart can
    # still be reached by its peers (its public key stays authorised), not reach them
    text = kept.model_dump_json(exclude={"secrets": True, "ssh": {"job_private_key"}})
    host_files.write_atomic(attempt_dir / _LAUNCH, text)


def recorded_launches(attempts_dir: Path) -> list[tuple[Path, LaunchRequest]]:
    """Every attempt not forgotten yet, with its folder, in the order of their folders; a
    launch record that cannot be read is logged and left out."""
    found = []
    for launch in sorted(attempts_dir.glob(f"*/*/{_LAUNCH}")):
        try:
            request = LaunchRequest.model_validate_json(host_files.read_text(launch, 64 << 20))
        except (OSError, ValueError) as exc:
            log.error("ignoring the unreadable launch record %s: %s", launch, exc)
            continue
        found.append((launch.parent, request))
    return found


def remove_launch(attempt_dir: Path) -> None:
    (attempt_dir / _LAUNCH).unlink(missing_ok=True)


def write_network(attempt_dir: Path, name: str, addresses: list[str]) -> None:
    """A relaunch after a restart gives an instance its address on this network from here."""
    host_files.write_atomic(
        attempt_dir / _NETWORK, json.dumps({"name": name, "addresses": addresses})
    )


def read_network(attempt_dir: Path) -> tuple[str, list[str]] | None:
    """The network's name and its addresses in the gang's order; None when not (well) kept."""
    try:
        network = json.loads(host_files.read_text(attempt_dir / _NETWORK))
        return str(network["name"]), [str(a) for a in network["addresses"]]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.error("ignoring the unreadable network record in %s: %s", attempt_dir, exc)
        return None


# --- instance records --------------------------------------------------------------------------


def write_exit(instance_dir: Path, event: InstanceEvent) -> None:
    instance_dir.mkdir(parents=True, exist_ok=True)
    host_files.write_atomic(instance_dir / _EXIT, event.model_dump_json())


def has_exit(instance_dir: Path) -> bool:
    return (instance_dir / _EXIT).exists()


def read_exit(instance_dir: Path) -> InstanceEvent | None:
    """The event the instance ended with; None while it has not ended. A record that cannot
    be read is logged and taken as absent: the instance is then found lost or still running."""
    try:
        text = host_files.read_text(instance_dir / _EXIT)
        return InstanceEvent.model_validate_json(text)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, ValidationError) as exc:
        log.error("ignoring the unreadable exit record in %s: %s", instance_dir, exc)
        return None


def remove_exit(instance_dir: Path) -> None:
    (instance_dir / _EXIT).unlink(missing_ok=True)


def write_run(instance_dir: Path, record: RunRecord) -> None:
    placement = record.placement.model_dump() if record.placement else None
    data = {
        "run": record.run,
        "queued": record.queued,
        "placement": placement,
        "task_attempt": record.task_attempt,
    }
    host_files.write_atomic(instance_dir / _RUN, json.dumps(data))


def read_run(instance_dir: Path) -> RunRecord | None:
    """None for an instance never relaunched (it is in its first run), or whose record cannot
    be read (logged)."""
    try:
        data = json.loads(host_files.read_text(instance_dir / _RUN))
        placement = data["placement"]
        return RunRecord(
            int(data["run"]),
            bool(data["queued"]),
            Placement.model_validate(placement) if placement is not None else None,
            int(data.get("task_attempt", data["run"])),  # a record from before it was kept
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.error("ignoring the unreadable relaunch record in %s: %s", instance_dir, exc)
        return None


def write_runtime_files(
    instance_dir: Path,
    env: dict[str, str],
    role: RoleLaunch,
    ssh: dict[str, str] | None = None,
    tools: dict[str, str] | None = None,
    *,
    notes: Sequence[str] = (),
) -> None:
    """The environment and entrypoint the container runs with, in the folder it sees read-only,
    and the empty folder it may write (its mount point, made here since the read-only folder
    cannot be written from inside). `ssh`: the ssh plugin's files (backends.ssh_access), in
    `ssh/`, readable by the server's user only. `tools`: commands put last on the PATH (the
    `hdfs` stand-in), in `bin/`, with the mount point `dfs/` of the file systems they use.
    `notes`: lines the entrypoint prints first (what is simulated for this instance)."""
    runtime = runtime_dir(instance_dir)
    writable_dir(instance_dir).mkdir(parents=True, exist_ok=True)
    if tools:
        (runtime / _DFS).mkdir(exist_ok=True)
        (runtime / _TOOLS).mkdir(exist_ok=True)
        for name, text in tools.items():
            host_files.write_atomic(runtime / _TOOLS / name, text, mode=0o755)
    host_files.write_atomic(runtime / "runtime_env.sh", shell_env_file(env))
    if ssh:
        (runtime / "ssh").mkdir(mode=0o700, exist_ok=True)
        for name, text in ssh.items():
            host_files.write_atomic(runtime / "ssh" / name, text, mode=0o600)
    script = entrypoint_script(role, ssh=bool(ssh), notes=notes)
    host_files.write_atomic(runtime / "entrypoint.sh", script)


def open_gate(instance_dir: Path) -> None:
    """Let the instance's commands start (its container waits for this file; see GATE)."""
    host_files.write_atomic(runtime_dir(instance_dir) / _GATE, "")


def gate_opened(instance_dir: Path) -> bool:
    """Whether the instance's commands were let start (in any run)."""
    return (runtime_dir(instance_dir) / _GATE).exists()


def close_gate(instance_dir: Path) -> None:
    """Make the instance's next container wait at the gate (an earlier run opened it)."""
    (runtime_dir(instance_dir) / _GATE).unlink(missing_ok=True)


# --- logs --------------------------------------------------------------------------------------


def log_file(instance_dir: Path) -> Path:
    """The instance's output, every run of it in one file, in the folder the container writes:
    read it only through `instance_log`."""
    return writable_dir(instance_dir) / _LOG


def instance_log(instance_dir: Path) -> LogFile:
    """The instance's log, with the record of what was dropped from it kept where the job
    cannot write."""
    return LogFile(log_file(instance_dir), instance_dir / _DROPPED)


def create_log(instance_dir: Path) -> None:
    """An empty log, so that a reader finds the instance before its first line."""
    writable_dir(instance_dir).mkdir(parents=True, exist_ok=True)
    host_files.create(log_file(instance_dir))


def log_retry(instance_dir: Path, run: int) -> None:
    """Mark in the log where a new run of the instance begins; a log the job replaced by
    something else is left alone (logged)."""
    line = f"{MARKER} task retry {run - 1}: starting task attempt {run}\n"
    try:
        host_files.append(log_file(instance_dir), line.encode())
    except OSError as exc:
        log.warning("cannot mark the retry in the log of %s: %s", instance_dir, exc)
