"""A real Docker engine restarted under a running `paigraph serve`: a private `dockerd` of the
test's own (its own socket, data root, exec root and pid file, a bridge of its own and no
iptables rules, so the machine's engine and its networks are untouched) is stopped and started
again while a two-instance job runs. See docs/reliability.md.

Not `--bridge=none`: a dockerd started so deletes the host's `docker0`, the bridge of the
machine's own engine, on its way up."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import httpx
import pytest
import requests.exceptions

from simulator.containers import OWNER
from simulator.host_routes import host_routes
from tests.servers import event_log, final_job, instances, served
from tests.servers import job as job_of
from tests.simulated import IMAGE, job_config
from tests.waiting import NotInTime, until
from tests.worker_support import share

# alone: a second dockerd and a time limit on the job's recovery, which the other worker's load
# would stretch
pytestmark = [pytest.mark.docker, pytest.mark.alone]

BRIDGE_POOL = ipaddress.IPv4Network("10.216.0.0/16")  # the private engine's own bridge
TWO_WORKERS = job_config(name="pair", roles={"worker": {"instances": 2, "commands": ["sleep 6"]}})
AFTERWARDS = job_config(name="after", roles={"main": {"commands": ["echo after"]}})


class PrivateEngine:
    """A dockerd on a socket of its own, which can be stopped and started again."""

    def __init__(self, root: Path, bridge: str) -> None:
        self.root = root
        self.bridge = bridge
        self.socket = root / "docker.sock"
        self.url = f"unix://{self.socket}"
        self.log = root / "dockerd.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    "dockerd",
                    f"--host={self.url}",
                    f"--data-root={self.root / 'data'}",
                    f"--exec-root={self.root / 'exec'}",
                    f"--pidfile={self.root / 'docker.pid'}",
                    f"--bridge={self.bridge}",
                    "--iptables=false",
                    "--ip6tables=false",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

        def answers() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"dockerd did not start: {self.tail()}")
            return self.answers()

        try:
            until(answers, "the private dockerd answering", timeout)
        except NotInTime as late:  # the engine fixture skips on RuntimeError
            raise RuntimeError(f"dockerd did not start: {self.tail()}") from late

    def answers(self) -> bool:
        try:
            client = docker.DockerClient(base_url=self.url, timeout=5)
        except docker.errors.DockerException:  # the version is asked for at once
            return False
        try:
            return bool(client.ping())
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError):
            return False
        finally:
            client.close()

    def stop(self) -> None:
        """SIGTERM, as `systemctl stop docker` or a package upgrade does: dockerd stops its
        containers (SIGTERM to their processes) and exits."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.url, timeout=60)


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 for the private engine's bridge that the host routes nowhere yet, from this
    worker's share of the pool (two workers looking at once would otherwise take the same)."""
    taken = host_routes()
    candidates = list(BRIDGE_POOL.subnets(new_prefix=24))
    for candidate in (candidates[i] for i in share(range(len(candidates)))):
        if not any(candidate.overlaps(route) for route in taken):
            return candidate
    pytest.skip(f"a second Docker engine cannot start here: no free /24 in {BRIDGE_POOL}")


@contextlib.contextmanager
def own_bridge() -> Iterator[str]:
    """A bridge interface for the private engine (dockerd makes only docker0 itself)."""
    if shutil.which("ip") is None:
        pytest.skip("a second Docker engine cannot start here: no `ip` (iproute2) for its bridge")
    name = f"pgt{uuid.uuid4().hex[:8]}"
    subnet = free_subnet()
    made = subprocess.run(["ip", "link", "add", name, "type", "bridge"], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"a second Docker engine cannot start here: no bridge for it ({made.stderr!r})")
    try:
        gateway = f"{next(subnet.hosts())}/{subnet.prefixlen}"
        subprocess.run(["ip", "addr", "add", gateway, "dev", name], check=True)
        subprocess.run(["ip", "link", "set", name, "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "link", "del", name], capture_output=True)


@pytest.fixture
def engine() -> Iterator[PrivateEngine]:
    if shutil.which("dockerd") is None:
        pytest.skip("a second Docker engine cannot start here: dockerd is not installed")
    if os.geteuid() != 0:
        pytest.skip("a second Docker engine cannot start here: dockerd needs root")
    root = Path(f"/tmp/pg-dockerd-{uuid.uuid4().hex[:8]}")  # socket paths are short
    root.mkdir()
    with contextlib.ExitStack() as stack:
        private = PrivateEngine(root, stack.enter_context(own_bridge()))
        stack.callback(shutil.rmtree, root, ignore_errors=True)
        stack.callback(private.stop)
        try:
            private.start()
        except RuntimeError as exc:
            pytest.skip(f"a second Docker engine cannot start on this machine: {exc}")
        saved = subprocess.run(["docker", "save", IMAGE], capture_output=True, check=True)
        loaded = subprocess.run(
            ["docker", "-H", private.url, "load"], input=saved.stdout, capture_output=True
        )
        assert loaded.returncode == 0, loaded.stderr
        yield private


def test_a_job_survives_a_restart_of_its_docker_engine(
    engine: PrivateEngine, tmp_path: Path
) -> None:
    with served("sqlite", tmp_path) as server:
        server.settings["DOCKER_HOST"] = engine.url
        server.start()
        client = server.client()
        pair = client.submit(TWO_WORKERS, {})["job"]["id"]
        until(
            lambda: all(i["state"] == "RUNNING" for i in instances(job_of(client, pair)).values()),
            "both workers running",
        )

        engine.stop()  # the workers are killed with it (SIGTERM: exit code 143)
        waiting = until(
            lambda: (
                (j := job_of(client, pair))["stateReason"].startswith(
                    "Docker engine unreachable since "
                )
                and j
            ),
            "the job showing the engine unreachable",
            timeout=20,
        )
        assert waiting["state"] not in ("FAILED", "SUCCEEDED", "STOPPED")
        answer = httpx.get(f"{server.url}/health", timeout=5)
        assert answer.status_code == 503 and answer.json()["reason"] == waiting["stateReason"]

        engine.start()
        back = time.monotonic()
        # the kill was the engine's, a transient failure: the job runs again and succeeds
        ended = final_job(client, pair, timeout=60)
        assert ended["state"] == "SUCCEEDED", ended["stateReason"]
        assert ended["attempt"] == 2
        messages = [e["message"] or "" for e in event_log(client, pair)]
        ends = [m for m in messages if m.startswith("exit code 143")]
        assert len(ends) >= 1, messages
        assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200
        assert time.monotonic() - back < 45

        later = client.submit(AFTERWARDS, {})["job"]["id"]
        assert final_job(client, later, timeout=30)["state"] == "SUCCEEDED"
        api = engine.client().api
        owned = {"label": f"{OWNER}={server.owner}"}
        until(
            lambda: not api.containers(all=True, filters=owned) and not api.networks(filters=owned),
            "the job's containers and networks gone from the restarted engine",
            timeout=30,
        )
