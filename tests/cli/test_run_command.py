"""`paigraph run` end to end: a real process, real containers, its exit status and output."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.servers import on_worker_ports
from tests.simulated import IMAGE, job_config, leftovers

pytestmark = pytest.mark.docker


def _start(tmp_path: Path, text: str, *args: str, suffix: str = ".yaml") -> subprocess.Popen:
    config = tmp_path / f"job{suffix}"
    config.write_text(text)
    env = {
        **os.environ,
        "PAIGRAPH_SIMULATOR_STATE": str(tmp_path / "state"),
        "PAIGRAPH_SIMULATOR_CONFIG": str(on_worker_ports(None, tmp_path / "simulator.yaml")),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "server.cli", "run", str(config), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )


def _finish(process: subprocess.Popen, timeout: float = 120) -> tuple[int, str]:
    output, _ = process.communicate(timeout=timeout)
    owner = f"run-{socket.gethostname()}-{process.pid}"
    assert leftovers(owner) == ([], []), "containers or networks left behind"
    return process.returncode, output


def test_a_multi_role_job_runs_to_success(tmp_path: Path) -> None:
    text = job_config(
        name="runjob",
        roles={
            "ps": {"commands": ["sleep 2"], "completion": {"minSucceededInstances": -1}},
            "worker": {
                "instances": 2,
                "commands": ["echo worker $PAI_TASK_INDEX sees $PAI_TASK_ROLE_ps_HOST_LIST"],
            },
        },
    )
    code, output = _finish(_start(tmp_path, text))
    assert code == 0, output
    assert "job runjob: SUCCEEDED" in output
    assert "worker-1" in output and "ps-0" in output
    assert not (tmp_path / "state" / "attempts" / "run").exists()


def test_a_failing_instance_fails_the_job_and_shows_its_log(tmp_path: Path) -> None:
    text = job_config(
        name="runjob",
        roles={
            "worker": {"instances": 2, "commands": ["echo about to fail $PAI_TASK_INDEX", "exit 3"]}
        },
    )
    code, output = _finish(_start(tmp_path, text))
    assert code == 1, output
    assert "job runjob: FAILED" in output
    assert "exit code 3" in output
    assert "about to fail" in output  # the failed instance's log is printed at the end


def _paigraph(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PAIGRAPH_SIMULATOR_STATE": str(tmp_path / "state")}
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
    )


TALKING = {
    "ps": {"commands": ["echo ps says hi"], "completion": {"minSucceededInstances": -1}},
    "worker": {"instances": 2, "commands": ["echo worker $PAI_TASK_INDEX says hi", "printf end"]},
}


def test_the_instances_output_is_shown_prefixed_and_kept_for_logs_local(tmp_path: Path) -> None:
    code, output = _finish(_start(tmp_path, job_config(name="talking", roles=TALKING)))
    assert code == 0, output
    assert "ps-0     | ps says hi\n" in output
    assert "worker-0 | worker 0 says hi\n" in output
    assert "worker-1 | worker 1 says hi\n" in output
    assert "worker-1 | end" in output  # a last line without its newline is shown too
    assert "logs kept: paigraph logs --local talking ps 0" in output

    kept = _paigraph(tmp_path, "logs", "--local", "talking", "worker", "1")
    assert kept.returncode == 0, kept.stderr
    assert "worker 1 says hi\nend" in kept.stdout and "worker 0" not in kept.stdout
    missing = _paigraph(tmp_path, "logs", "--local", "talking", "worker", "7")
    assert missing.returncode == 1
    assert "its instances: ps-0, worker-0, worker-1" in missing.stderr
    unknown = _paigraph(tmp_path, "logs", "--local", "silent", "worker", "0")
    assert unknown.returncode == 1 and "jobs kept: talking" in unknown.stderr


def test_quiet_shows_the_table_without_the_output(tmp_path: Path) -> None:
    code, output = _finish(_start(tmp_path, job_config(name="talking", roles=TALKING), "--quiet"))
    assert code == 0, output
    assert "says hi" not in output and " | " not in output
    assert "job talking: SUCCEEDED" in output
    kept = _paigraph(tmp_path, "logs", "--local", "talking", "ps", "0")
    assert "\nps says hi\n" in kept.stdout, kept


def test_only_the_last_runs_logs_are_kept(tmp_path: Path) -> None:
    from server.cli.run_logs import KEEP_RUNS, find_run, runs_dir

    state = tmp_path / "state"
    for n in range(KEEP_RUNS + 2):
        folder = runs_dir(state) / f"old-{n}"
        folder.mkdir(parents=True)
        (folder / "job.json").write_text(json.dumps({"id": folder.name, "name": f"old{n}"}))
        os.utime(folder / "job.json", (n, n))
    code, output = _finish(_start(tmp_path, job_config(name="talking", roles=TALKING), "-q"))
    assert code == 0, output
    kept = sorted(p.name for p in runs_dir(state).iterdir())
    assert len(kept) == KEEP_RUNS and find_run(state, "talking") is not None
    assert "old-0" not in kept and "old-2" not in kept and f"old-{KEEP_RUNS + 1}" in kept


def test_each_instance_keeps_its_own_colour() -> None:
    import io

    from rich.console import Console

    from server.cli.run_output import OutputStreamer
    from server.shapes.job_record import InstanceView

    class Machine:
        def __init__(self, attempt: int) -> None:
            self.instances = [
                InstanceView(role=r, index=i, attempt=attempt)
                for r, i in (("ps", 0), ("worker", 0), ("worker", 1))
            ]

    def prefixes(attempt: int) -> dict[str, str]:
        screen = io.StringIO()
        console = Console(file=screen, force_terminal=True, color_system="standard", width=80)
        streamer = OutputStreamer(backend=None, console=console)  # type: ignore[arg-type]
        streamer._name_instances(Machine(attempt))  # type: ignore[arg-type]
        for (role, index), label in streamer._labels.items():
            streamer._print(label, f"{role} {index}")
        lines = screen.getvalue().splitlines()
        return {line.split("|")[0].split("m", 1)[1].strip(): line.split("|")[0] for line in lines}

    first, again = prefixes(1), prefixes(2)
    assert first == again  # the same colour in every attempt
    assert len(set(first.values())) == 3  # and a colour of its own


def test_ctrl_c_stops_the_job_cleanly(tmp_path: Path) -> None:
    process = _start(
        tmp_path,
        job_config(name="runjob", roles={"sleeper": {"instances": 2, "commands": ["sleep 1000"]}}),
    )
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line)
        if line.startswith("job: RUNNING"):
            break
    began = time.monotonic()
    process.send_signal(signal.SIGINT)
    code, output = _finish(process, timeout=60)
    assert code == 130, "".join(seen) + output
    assert time.monotonic() - began < 20
    assert "job runjob: STOPPED" in output


def test_a_job_that_can_never_fit_is_refused(tmp_path: Path) -> None:
    code, output = _finish(
        _start(
            tmp_path, job_config(name="runjob", roles={"huge": {"cpu": 64, "commands": ["true"]}})
        )
    )
    assert code == 1
    assert "FAILED" in output and "largest node has 32 cpu" in output


def test_an_invalid_config_is_refused_before_anything_runs(tmp_path: Path) -> None:
    code, output = _finish(_start(tmp_path, "protocolVersion: 2\nname: x\ntype: job\n"))
    assert code == 1
    assert "taskRoles" in output


def test_a_v1_job_gets_its_directories_and_job_envs(tmp_path: Path) -> None:
    text = json.dumps(
        {
            "jobName": "v1job",
            "image": IMAGE,
            "dataDir": "hdfs://namenode/data",
            "jobEnvs": {"LEARNING_RATE": "0.1"},
            "taskRoles": [
                {
                    "name": "main",
                    "taskNumber": 1,
                    "cpuNumber": 1,
                    "memoryMB": 128,
                    "command": 'test "$PAI_DATA_DIR" = hdfs://namenode/data'
                    ' && test "$LEARNING_RATE" = 0.1',
                }
            ],
        }
    )
    code, output = _finish(_start(tmp_path, text, suffix=".json"))
    assert code == 0, output
    assert "job v1job: SUCCEEDED" in output


def test_parameters_from_the_command_line_reach_the_commands(tmp_path: Path) -> None:
    text = """
protocol_version: 2
name: drafted
type: job
parameters:
  greeting: hello
prerequisites:
  - protocol_version: 2
    name: bb
    type: dockerimage
    uri: paigraph/busybox:test
tasks:
  - role: main
    dockerimage: bb
    resource:
      instances: 1
      resourcePerInstance: {cpu: 1, memoryMB: 128, gpu: 0}
    command:
      - test "$$greeting$$" = bonjour
"""
    code, output = _finish(_start(tmp_path, text, "--param", "greeting=bonjour"))
    assert code == 0, output


def test_cmd_plugin_callbacks_run_around_the_commands(tmp_path: Path) -> None:
    text = f"""
protocolVersion: 2
name: hooked
type: job
prerequisites:
  - {{name: bb, type: dockerimage, uri: "{IMAGE}"}}
  - name: announce
    type: script
    plugin: com.microsoft.pai.runtimeplugin.cmd
    callbacks:
      - {{event: taskStarts, commands: ["echo hook-start"]}}
      - {{event: taskSucceeds, commands: ["echo hook-succeeded"]}}
      - {{event: taskFails, commands: ["echo hook-failed with $PAI_CURRENT_TASK_ROLE_NAME"]}}
taskRoles:
  main:
    dockerImage: bb
    prerequisites: [announce]
    resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: 0}}
    commands: ["echo user-command", "exit 7"]
"""
    code, output = _finish(_start(tmp_path, text))
    assert code == 1, output
    assert "exit code 7" in output
    start, user, failed = (output.index(s) for s in ("hook-start", "user-command", "hook-failed"))
    assert start < user < failed
    assert "hook-failed with main" in output
    assert "hook-succeeded" not in output


RETRIED = """
protocolVersion: 2
name: flaky
type: job
jobRetryCount: {job_retries}
prerequisites:
  - {{name: bb, type: dockerimage, uri: "{image}"}}
  - {{name: marks, type: output, uri: ""}}
taskRoles:
  main:
    instances: 2
    taskRetryCount: {task_retries}
    dockerImage: bb
    output: marks
    resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: 0}}
    commands:
      - if [ -f marks/$PAI_TASK_INDEX ]; then echo second try; exit 0; fi
      - touch marks/$PAI_TASK_INDEX
      - if [ $PAI_TASK_INDEX = 1 ]; then echo first try fails; exit 1; fi
{extras}"""


def test_a_failed_attempt_is_retried_as_a_whole_job(tmp_path: Path) -> None:
    text = RETRIED.format(job_retries=1, task_retries=0, image=IMAGE, extras="")
    code, output = _finish(_start(tmp_path, text))
    assert code == 0, output
    assert "job flaky: SUCCEEDED" in output
    assert "attempt 2" in output


def test_with_gang_allocation_off_only_the_failed_instance_runs_again(tmp_path: Path) -> None:
    extras = "extras:\n  gangAllocation: false\n"
    text = RETRIED.format(job_retries=0, task_retries=1, image=IMAGE, extras=extras)
    code, output = _finish(_start(tmp_path, text))
    assert code == 0, output
    assert "job flaky: SUCCEEDED" in output
    # one job attempt; the instance's own retry is followed too, its output shown
    assert re.search(r"job flaky-\w+  attempt 1 ", output), output
    assert not re.search(r"job flaky-\w+  attempt 2 ", output), output
    assert "main-1 | first try fails\n" in output and "main-1 | second try\n" in output
