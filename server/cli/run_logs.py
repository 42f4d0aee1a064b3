"""The logs of the last jobs `paigraph run` ran, kept under the simulator's state directory.

`paigraph run` removes what it started when it returns, its attempt folders too; a newcomer
whose job printed something still wants to read it afterwards. So each instance's output of
the job's last attempt is copied to `runs/<job id>/<role>-<index>.log`, with `job.json` saying
which job it was, and only the last KEEP_RUNS runs are kept. `paigraph logs --local` reads them
by job id or by job name (the latest run of that name).
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

from backends.base import Backend, BackendError, InstanceKey
from server.jobs import JobMachine

KEEP_RUNS = 10
_RUNS = "runs"
_JOB = "job.json"


def runs_dir(state_dir: Path) -> Path:
    return Path(state_dir) / _RUNS


def log_name(role: str, index: int) -> str:
    return f"{role}-{index}.log"


async def keep_logs(backend: Backend, machine: JobMachine, name: str, state_dir: Path) -> Path:
    """Copy every instance's log of the machine's current attempt into the job's run folder
    (read through the backend, which reads a log the job wrote safely); returns the folder."""
    folder = runs_dir(state_dir) / machine.job_id
    folder.mkdir(parents=True, exist_ok=True)
    for view in machine.instances:
        key = InstanceKey(
            job_id=machine.job_id, attempt=view.attempt, role=view.role, index=view.index
        )
        with (folder / log_name(view.role, view.index)).open("w", encoding="utf-8") as kept:
            try:
                async for chunk in backend.logs(key):
                    kept.write(chunk.data)
            except BackendError:
                continue  # never placed: no log to keep
    record = {
        "id": machine.job_id,
        "name": name,
        "state": machine.state.value,
        "attempt": machine.attempt,
        "finished": datetime.now(UTC).isoformat(),
    }
    (folder / _JOB).write_text(json.dumps(record), encoding="utf-8")
    prune(state_dir)
    return folder


def prune(state_dir: Path, keep: int = KEEP_RUNS) -> None:
    """Remove all but the `keep` latest runs' folders."""
    for old in _runs(state_dir)[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def find_run(state_dir: Path, job: str) -> Path | None:
    """The kept run of job id `job`, else the latest kept run of a job named `job`."""
    for folder in _runs(state_dir):
        record = _record(folder)
        if folder.name == job or record.get("name") == job:
            return folder
    return None


def kept_jobs(state_dir: Path) -> list[str]:
    """The names of the jobs whose logs are kept, latest first, each once."""
    return list(dict.fromkeys(str(_record(f).get("name", f.name)) for f in _runs(state_dir)))


def _runs(state_dir: Path) -> list[Path]:
    """Every kept run's folder, the latest first."""
    base = runs_dir(state_dir)
    if not base.is_dir():
        return []
    folders = [f for f in base.iterdir() if (f / _JOB).is_file()]
    return sorted(folders, key=lambda f: (f / _JOB).stat().st_mtime, reverse=True)


def _record(folder: Path) -> dict[str, object]:
    try:
        data = json.loads((folder / _JOB).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
