"""The ssh runtime plugin on a real `paigraph serve` with the Docker simulator: in an image with
an sshd (tests/images/sshd, built once on the local Debian base), instances reach each other as
`<role>-<index>` with the job's key pair, and the user logs in from the host with their own key
on the instance's published `ssh` port; in an image without one, the instance says so in its
log and runs its commands as usual."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.servers import ROOT, Server, final_job, instances, job, served
from tests.simulated import IMAGE
from tests.waiting import until

# one worker for the module, so that the sshd image (a fixed name) is built once
pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("sshd-image")]

BASE_IMAGE = "paigraph/debian-base:local"
SSHD_IMAGE = "paigraph/sshd:test"


def _docker(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def sshd_image() -> str:
    """The test image with OpenSSH's server and client, built (or taken from the cache)."""
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("needs Debian's openssh-client on this machine (.ci/run installs it)")
    if _docker("image", "inspect", BASE_IMAGE).returncode != 0:
        pytest.skip(f"needs {BASE_IMAGE}: build it with ./scripts/build-base-image")
    built = _docker(
        "build", "-q", "-t", SSHD_IMAGE, str(ROOT / "tests" / "images" / "sshd"), timeout=900
    )
    assert built.returncode == 0, built.stderr
    return SSHD_IMAGE


def _key(path: Path) -> Path:
    made = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    return path


def _job(name: str, image: str, commands: list[str], instances: int, user_key: str) -> str:
    return json.dumps(
        {
            "protocolVersion": 2,
            "name": name,
            "type": "job",
            "prerequisites": [{"name": "image", "type": "dockerimage", "uri": image}],
            "taskRoles": {
                "worker": {
                    "instances": instances,
                    "dockerImage": "image",
                    "resourcePerInstance": {"cpu": 1, "memoryMB": 256, "gpu": 0},
                    "commands": commands,
                }
            },
            "extras": {
                "com.microsoft.pai.runtimeplugin": [
                    {
                        "plugin": "ssh",
                        "parameters": {
                            "jobssh": True,
                            "userssh": {"type": "custom", "value": user_key},
                        },
                    }
                ]
            },
        }
    )


def _submit(server: Server, tmp_path: Path, token: str, config: str) -> str:
    path = tmp_path / "job.json"
    path.write_text(config)
    submitted = server.paigraph("submit", str(path), token=token)
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip()


def _exec(server: Server, token: str, job_id: str, index: int, *command: str) -> tuple[int, str]:
    done = server.paigraph("exec", job_id, "worker", str(index), "--", *command, token=token)
    return done.returncode, done.stdout + done.stderr


SSH_OPTIONS = [
    f"-o{option}"
    for option in (
        "StrictHostKeyChecking=no",
        "UserKnownHostsFile=/dev/null",
        "BatchMode=yes",
        "IdentitiesOnly=yes",
        "ConnectTimeout=10",
    )
]


def _ssh(key: Path, port: int, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ssh", "-i", str(key), "-p", str(port), *SSH_OPTIONS, "root@127.0.0.1", *command],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _ssh_port(found: dict[str, Any], name: str) -> int:
    ports = instances(found)[name]["ports"]
    return next(p["ports"][0] for p in ports if p["label"] == "ssh")


def test_instances_reach_each_other_by_name_and_the_user_logs_in_with_their_key(
    sshd_image: str, tmp_path: Path
) -> None:
    user_key, other_key = _key(tmp_path / "user_key"), _key(tmp_path / "other_key")
    public = (tmp_path / "user_key.pub").read_text().strip()
    with served("sqlite", tmp_path) as server:
        token = server.paigraph("users", "add", "ann").stdout.strip()
        server.start()
        config = _job("with-sshd", sshd_image, ["sleep 300"], 2, public)
        job_id = _submit(server, tmp_path, token, config)
        client = server.client(token)
        until(
            lambda: all(i["state"] == "RUNNING" for i in instances(job(client, job_id)).values()),
            "both instances running",
            timeout=120,
        )
        try:
            # worker-0 reaches worker-1 by name, with the job's key (no key given here)
            code, hostname = _exec(server, token, job_id, 1, "hostname")
            assert code == 0, hostname

            def peer() -> str | None:
                code, out = _exec(server, token, job_id, 0, "ssh", "-o", "BatchMode=yes",
                                  "worker-1", "hostname")  # fmt: skip
                return out if code == 0 else None

            assert until(peer, "worker-0 runs `ssh worker-1 hostname`", timeout=60) == hostname

            # the host logs in with the user's key on worker-0's published ssh port ...
            port = _ssh_port(job(client, job_id), "worker-0")
            done = until(
                lambda: (d := _ssh(user_key, port, "echo $HOME")).returncode == 0 and d,
                f"ssh with the user's key to 127.0.0.1:{port}",
                timeout=60,
            )
            assert done.stdout.strip() == "/root"
            # ... and with another key it is refused
            refused = _ssh(other_key, port, "true")
            assert refused.returncode == 255 and "Permission denied" in refused.stderr

            logs = server.paigraph("logs", job_id, "worker", "0", token=token)
            assert f"ssh plugin: sshd listens on port {port}" in logs.stdout
        finally:
            server.paigraph("stop", job_id, token=token)


def test_without_an_sshd_the_instance_says_so_and_runs_its_commands(tmp_path: Path) -> None:
    public = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ann"
    with served("sqlite", tmp_path) as server:
        token = server.paigraph("users", "add", "ann").stdout.strip()
        server.start()
        job_id = _submit(server, tmp_path, token, _job("no-sshd", IMAGE, ["echo ran"], 1, public))
        assert final_job(server.client(token), job_id, timeout=120)["state"] == "SUCCEEDED"
        logs = server.paigraph("logs", job_id, "worker", "0", token=token).stdout
        assert "ssh plugin: the image has no sshd, so no SSH server runs" in logs
        assert "ran\n" in logs
