"""`paigraph run` end to end: a real process, real containers, its exit status and output."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.simulated import IMAGE, job_config, leftovers

pytestmark = pytest.mark.docker


def _start(tmp_path: Path, text: str, *args: str, suffix: str = ".yaml") -> subprocess.Popen:
    config = tmp_path / f"job{suffix}"
    config.write_text(text)
    env = {**os.environ, "PAIGRAPH_SIMULATOR_STATE": str(tmp_path / "state")}
    return subprocess.Popen(
        [sys.executable, "-m", "server.cli", "run", str(config), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
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
    assert "FAILED" in output and "largest node has 16 cpu" in output


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
    assert "attempt 1" in output and "attempt 2" not in output
