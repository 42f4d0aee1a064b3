"""The container entrypoint, run for real with busybox sh on the host and in a container."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from backends.base import (
    WORK_DIR,
    Fetch,
    Hooks,
    LaunchRequest,
    Material,
    Placement,
    ResourceRequest,
    RoleLaunch,
)
from backends.entrypoint import (
    ENTRYPOINT,
    ENV_FILE,
    LOG_FILE,
    RUN_DIR,
    RUNTIME_DIR,
    SETUP_FAILED,
    entrypoint_script,
)
from backends.runtime_env import runtime_env, shell_env_file
from tests.waiting import until

BUSYBOX = "/usr/bin/busybox"
IMAGE = "paigraph/busybox:test"


def make_role(
    commands: list[str],
    *,
    on_start: list[str] | None = None,
    on_success: list[str] | None = None,
    on_failure: list[str] | None = None,
    materials: list[Material] | None = None,
) -> RoleLaunch:
    return RoleLaunch(
        name="worker",
        instances=1,
        image=IMAGE,
        resources=ResourceRequest(cpu=1, memory_mb=128),
        commands=commands,
        hooks=Hooks(
            on_start=on_start or [], on_success=on_success or [], on_failure=on_failure or []
        ),
        materials=materials or [],
    )


@dataclass
class Instance:
    """A runtime directory and a work directory on the host standing in for the container's."""

    root: Path

    @property
    def runtime(self) -> Path:
        return self.root / "runtime"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def log(self) -> str:
        path = self.runtime / "run" / "output.log"
        return path.read_text() if path.exists() else ""

    def prepare(self, role: RoleLaunch, env: dict[str, str] | None = None) -> Path:
        self.runtime.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)
        (self.runtime / "runtime_env.sh").write_text(shell_env_file(env or {"PAI_X": "x"}))
        script = self.runtime / "entrypoint.sh"
        script.write_text(
            entrypoint_script(role, runtime_dir=str(self.runtime), work_dir=str(self.work))
        )
        return script

    def start(self, role: RoleLaunch, env: dict[str, str] | None = None) -> subprocess.Popen:
        # As under the container's init: its own process group, only busybox's sh on PATH first.
        bin_dir = self.root / "bin"
        bin_dir.mkdir(exist_ok=True)
        if not (bin_dir / "sh").exists():
            (bin_dir / "sh").symlink_to(BUSYBOX)
        return subprocess.Popen(
            [BUSYBOX, "sh", str(self.prepare(role, env))],
            env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def run(self, role: RoleLaunch, env: dict[str, str] | None = None) -> int:
        process = self.start(role, env)
        try:
            return process.wait(timeout=30)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)


@pytest.fixture
def instance(tmp_path: Path) -> Instance:
    return Instance(tmp_path)


def output(log: str) -> list[str]:
    """The lines the commands and hooks printed, without the entrypoint's own markers."""
    return [line for line in log.splitlines() if not line.startswith("[paigraph]")]


def test_success_runs_start_hooks_then_commands_then_success_hooks(instance: Instance) -> None:
    role = make_role(
        ["echo main-1", "echo main-2"],
        on_start=["echo start-1", "echo start-2"],
        on_success=["echo success-1", "echo success-2"],
        on_failure=["echo failure"],
    )
    assert instance.run(role) == 0
    assert output(instance.log) == [
        "start-1",
        "start-2",
        "main-1",
        "main-2",
        "success-1",
        "success-2",
    ]
    assert "[paigraph] user commands exited with code 0" in instance.log
    assert instance.log.rstrip().endswith("[paigraph] instance exits with code 0")


def test_exit_inside_the_commands_is_the_instance_exit_code(instance: Instance) -> None:
    role = make_role(
        ["echo before", "exit 3", "echo after"],
        on_success=["echo success"],
        on_failure=["echo failure-1", "echo failure-2"],
    )
    assert instance.run(role) == 3
    assert output(instance.log) == ["before", "failure-1", "failure-2"]
    assert "[paigraph] user commands exited with code 3" in instance.log
    assert "[paigraph] instance exits with code 3" in instance.log


def test_a_failing_failure_hook_does_not_change_the_exit_code(instance: Instance) -> None:
    role = make_role(["exit 4"], on_failure=["echo one; exit 9", "echo two"])
    assert instance.run(role) == 4
    assert output(instance.log) == ["one", "two"]
    assert "[paigraph] failure hook 1/2 failed with exit code 9" in instance.log


def test_a_failing_start_hook_prevents_the_commands(instance: Instance) -> None:
    role = make_role(
        ["echo main > ran"],
        on_start=["echo start-1", "echo start-2; exit 5", "echo start-3"],
        on_success=["echo success"],
        on_failure=["echo failure"],
    )
    assert instance.run(role) == 5
    assert output(instance.log) == ["start-1", "start-2", "failure"]
    assert "[paigraph] start hook 2/3 failed with exit code 5" in instance.log
    assert not (instance.work / "ran").exists()


def test_hooks_stop_at_their_first_failing_command(instance: Instance) -> None:
    role = make_role(["echo main"], on_start=["false\necho not-reached"])
    assert instance.run(role) == 1
    assert output(instance.log) == []


def test_a_failing_success_hook_fails_the_instance(instance: Instance) -> None:
    role = make_role(
        ["echo main"], on_success=["exit 6", "echo success-2"], on_failure=["echo failure"]
    )
    assert instance.run(role) == 6
    assert output(instance.log) == ["main", "failure"]


def test_a_missing_prerequisite_fails_with_its_name(instance: Instance) -> None:
    (instance.work / "cifar").mkdir(parents=True)
    role = make_role(
        ["echo main"],
        on_start=["echo start"],
        materials=[
            Material(name="cifar", kind=Fetch.DOWNLOAD, uris=["http://127.0.0.1:1/c.tgz"]),
            Material(name="bench", kind=Fetch.CLONE, uris=["file:///srv/bench.git@abc123"]),
        ],
    )
    assert instance.run(role) == SETUP_FAILED
    assert output(instance.log) == []
    assert (
        "[paigraph] prerequisite 'bench' (clone from file:///srv/bench.git@abc123) is not in"
        f" place: {instance.work}/bench is missing"
    ) in instance.log
    assert "cifar" not in instance.log


def test_materials_in_place_and_the_environment_are_there_for_the_commands(
    instance: Instance,
) -> None:
    (instance.work / "cifar").mkdir(parents=True)
    (instance.work / "cifar" / "part-0").write_text("data\n")
    nasty = "it's a\nmulti-line $value"
    role = make_role(
        ["pwd", "cat cifar/part-0", 'printf "%s|\\n" "$NASTY"', "echo $PAI_WORK_DIR"],
        on_start=['test "$NASTY" = "$(printenv NASTY)"'],
        materials=[Material(name="cifar", kind=Fetch.DOWNLOAD, uris=["http://x/c"])],
    )
    env = {"NASTY": nasty, "PAI_WORK_DIR": str(instance.work)}
    assert instance.run(role, env) == 0
    lines = output(instance.log)
    assert lines == [str(instance.work), "data", "it's a", "multi-line $value|", str(instance.work)]


def test_commands_are_trimmed_and_joined_by_newlines_in_one_shell(instance: Instance) -> None:
    role = make_role(
        ["  A=1  ", 'if [ "$A" = 1 ]; then\n  echo joined\nfi', 'cd /; echo "$(pwd)"'],
        on_success=["pwd"],
    )
    assert instance.run(role) == 0
    # one shell for all commands (A survives), but a shell of its own (its cd does not leak)
    assert output(instance.log) == ["joined", "/", str(instance.work)]


def test_a_missing_environment_file_fails_the_instance(instance: Instance) -> None:
    role = make_role(["echo main"])
    script = instance.prepare(role)
    (instance.runtime / "runtime_env.sh").unlink()
    code = subprocess.run(
        [BUSYBOX, "sh", str(script)], env={"PATH": "/usr/bin:/bin"}, timeout=30
    ).returncode
    assert code == SETUP_FAILED
    assert f"runtime environment {instance.runtime}/runtime_env.sh is missing" in instance.log
    assert output(instance.log) == []


def test_the_log_is_appended_to(instance: Instance) -> None:
    role = make_role(["echo second"])
    (instance.runtime / "run").mkdir(parents=True)
    (instance.runtime / "run" / "output.log").write_text("first\n")
    assert instance.run(role) == 0
    assert output(instance.log) == ["first", "second"]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.alone  # it times the stop
def test_sigterm_stops_the_user_command_promptly_with_143(instance: Instance) -> None:
    role = make_role(
        ["echo $$ > shell.pid", "sh -c 'echo $$ > sleep.pid; exec sleep 1000'"],
        on_success=["echo success"],
        on_failure=["echo failure"],
    )
    process = instance.start(role)
    pid_file = instance.work / "sleep.pid"
    try:
        until(
            lambda: pid_file.exists() and pid_file.read_text().strip() != "",
            "sleep.pid written",
            10,
            0.05,
        )
        sleeper = int(pid_file.read_text())
        shell = int((instance.work / "shell.pid").read_text())
        assert alive(sleeper)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 143
        assert time.monotonic() - started < 3
        until(lambda: not alive(sleeper) and not alive(shell), "the shell and sleep gone", 3, 0.05)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        if pid_file.exists() and alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert "[paigraph] received SIGTERM, stopping" in instance.log
    assert "[paigraph] instance exits with code 143" in instance.log
    assert "success" not in output(instance.log)


def test_sigterm_during_a_start_hook_stops_it(instance: Instance) -> None:
    role = make_role(["echo main"], on_start=["touch started; sleep 1000"])
    process = instance.start(role)
    try:
        until(lambda: (instance.work / "started").exists(), "the start hook running", 10, 0.05)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 143
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert "main" not in output(instance.log)


def test_the_script_is_plain_posix_sh(tmp_path: Path) -> None:
    role = make_role(
        ["echo 'quoted'", "exit 2"],
        on_start=["echo s"],
        on_success=["echo ok"],
        on_failure=["echo no"],
        materials=[Material(name="d", kind=Fetch.MOUNT)],
    )
    script = tmp_path / "entrypoint.sh"
    script.write_text(entrypoint_script(role))
    for shell in ([BUSYBOX, "sh"], ["dash"]):
        result = subprocess.run([*shell, "-n", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    assert script.read_text().startswith("#!/bin/sh\n")
    assert f"exec >>{LOG_FILE} 2>&1" in script.read_text()


# --- in a real container --------------------------------------------------------------------


def container_request(role: RoleLaunch) -> tuple[LaunchRequest, dict[tuple[str, int], Placement]]:
    request = LaunchRequest(job_id="ep", job_name="entrypoint", roles=[role])
    placement = Placement(node="local", host_ip="127.0.0.1", ports={"ssh": [0], "http": [0]})
    return request, {(role.name, 0): placement}


def run_container(tmp_path: Path, role: RoleLaunch, stop_after: str | None = None):
    """Run `role`'s instance 0 in the test image with an init; return (exit code, log, seconds)."""
    docker = pytest.importorskip("docker")
    client = docker.from_env()
    runtime, data = tmp_path / "runtime", tmp_path / "data"
    writable = runtime / "run"
    writable.mkdir(parents=True)
    data.mkdir()
    (data / "hello.txt").write_text("hello from the host\n")
    request, placements = container_request(role)
    env = runtime_env(request, placements, role.name, 0)
    (runtime / Path(ENV_FILE).name).write_text(shell_env_file(env))
    (runtime / Path(ENTRYPOINT).name).write_text(entrypoint_script(role))
    container = client.containers.run(
        IMAGE,
        ["sh", ENTRYPOINT],
        detach=True,
        init=True,
        network_mode="none",
        volumes={
            str(runtime): {"bind": RUNTIME_DIR, "mode": "ro"},
            str(writable): {"bind": RUN_DIR, "mode": "rw"},
            str(data): {"bind": f"{WORK_DIR}/data", "mode": "ro"},
        },
    )
    log_file = writable / Path(LOG_FILE).name
    try:
        started = time.monotonic()
        if stop_after is not None:
            until(
                lambda: log_file.exists() and stop_after in log_file.read_text(),
                f"{stop_after!r} in the log",
                10,
                0.05,
            )
            started = time.monotonic()
            container.stop(timeout=10)
        code = container.wait(timeout=30)["StatusCode"]
        return code, log_file.read_text(), time.monotonic() - started
    finally:
        container.remove(force=True)


@pytest.mark.docker
def test_in_a_container_with_init(tmp_path: Path) -> None:
    role = make_role(
        [
            'echo "$PAI_CURRENT_TASK_ROLE_NAME-$PAI_TASK_INDEX in $(pwd)"',
            "cat data/hello.txt",
            "exit 7",
        ],
        on_start=["echo start"],
        on_failure=["echo failure"],
        materials=[Material(name="data", kind=Fetch.MOUNT)],
    )
    code, log, _ = run_container(tmp_path, role)
    assert code == 7
    assert output(log) == ["start", "worker-0 in /work", "hello from the host", "failure"]


@pytest.mark.docker
def test_stopping_the_container_stops_the_user_command(tmp_path: Path) -> None:
    role = make_role(["echo ready", "sleep 1000"], on_failure=["echo failure"])
    code, log, seconds = run_container(tmp_path, role, stop_after="ready")
    assert code == 143
    assert seconds < 5
    assert "[paigraph] received SIGTERM, stopping" in log
