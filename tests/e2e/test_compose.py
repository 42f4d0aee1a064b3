"""docker-compose.yml as a user runs it: build the images, start PostgreSQL and the server,
bootstrap a token, run a two-role job through the published endpoint, and tear it all down.

Runs only with PAIGRAPH_TEST_COMPOSE=1 (.ci/run sets it): it builds images and takes a minute
or two. The base image is PAIGRAPH_BASE_IMAGE, default paigraph/debian-base:local from
scripts/build-base-image; the dependencies come from wheels downloaded on this machine
(deploy/compose/build-wheels), since `docker build` may not reach PyPI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import docker
import httpx
import pytest

from server.app.asgi import server_owner
from server.client.remote import Client, RemoteError
from tests.simulated import job_config, leftovers, remove_leftovers
from tests.waiting import until

pytestmark = [
    pytest.mark.docker,
    pytest.mark.compose,
    pytest.mark.alone,  # builds images, a whole stack and its fixed image names: nothing beside it
    pytest.mark.skipif(
        os.environ.get("PAIGRAPH_TEST_COMPOSE") != "1",
        reason="builds images: set PAIGRAPH_TEST_COMPOSE=1 to run it (.ci/run does)",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = os.environ.get("PAIGRAPH_BASE_IMAGE") or "paigraph/debian-base:local"
FINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
T = TypeVar("T")

PS_WORKER = job_config(
    name="composed",
    roles={
        "ps": {"commands": ["sleep 2"], "completion": {"minSucceededInstances": -1}},
        "worker": {
            "instances": 2,
            "commands": ["echo worker $PAI_TASK_INDEX sees $PAI_TASK_ROLE_ps_HOST_LIST"],
        },
    },
)


def compose_command() -> list[str]:
    """Debian's docker-compose, else the docker compose plugin."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    plugin = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    if plugin.returncode == 0:
        return ["docker", "compose"]
    pytest.fail("neither docker-compose nor the docker compose plugin is installed")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return sock.getsockname()[1]


@dataclass
class Stack:
    """One compose project of docker-compose.yml, on its own port and state directory."""

    project: str
    env: dict[str, str]
    url: str
    state_dir: Path

    def compose(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*compose_command(), "-p", self.project, "-f", str(ROOT / "docker-compose.yml"), *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def ok(self, *args: str, timeout: float = 120) -> str:
        done = self.compose(*args, timeout=timeout)
        assert done.returncode == 0, f"compose {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def healthy(self, service: str) -> bool:
        container = self.ok("ps", "-q", service).strip()
        if not container:
            return False
        state = docker.from_env().api.inspect_container(container)["State"]
        health = (state.get("Health") or {}).get("Status")
        assert health != "unhealthy", f"{service} is unhealthy: {json.dumps(state)[-2000:]}"
        return health == "healthy"

    def wait_healthy(self) -> None:
        for service in ("postgres", "paigraph"):
            until(lambda s=service: self.healthy(s), f"{service} healthy", timeout=120)

    def resources(self) -> dict[str, list[str]]:
        """Containers and volumes of the project that still exist."""
        api = docker.from_env().api
        label = f"com.docker.compose.project={self.project}"
        return {
            "containers": [c["Id"] for c in api.containers(all=True, filters={"label": label})],
            "volumes": [v["Name"] for v in api.volumes(filters={"label": label})["Volumes"] or []],
        }


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    if not docker.from_env().images.list(name=BASE_IMAGE):
        pytest.fail(f"base image {BASE_IMAGE} is missing: run scripts/build-base-image")
    wheels = subprocess.run(
        [str(ROOT / "deploy/compose/build-wheels"), BASE_IMAGE],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert wheels.returncode == 0, wheels.stdout + wheels.stderr
    web = subprocess.run(  # the image copies the web UI built here
        [str(ROOT / "scripts/build-web")], capture_output=True, text=True, timeout=600, check=False
    )
    assert web.returncode == 0, web.stdout + web.stderr
    port = free_port()
    state_dir = tmp_path.resolve() / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAIGRAPH_")} | {
        "PAIGRAPH_BASE_IMAGE": BASE_IMAGE,
        "PAIGRAPH_PORT": str(port),
        "PAIGRAPH_HOST": "0.0.0.0",
        "PAIGRAPH_STATE_DIR": str(state_dir),
        "PAIGRAPH_DB_PASSWORD": uuid.uuid4().hex,
    }
    found = Stack(
        f"paigraph-test-{uuid.uuid4().hex[:8]}", env, f"http://127.0.0.1:{port}", state_dir
    )
    try:
        yield found
    finally:
        logs = found.compose("logs", "--no-color", "--tail", "200")
        print(logs.stdout[-20000:], logs.stderr[-2000:])  # shown when the test failed
        found.compose("down", "-v", "--remove-orphans", "--timeout", "10")
        remove_leftovers(server_owner(state_dir))


def test_compose_up_serves_jobs_on_the_published_endpoint(stack: Stack) -> None:
    started = time.monotonic()
    stack.ok("up", "-d", "--build", timeout=1200)
    stack.wait_healthy()
    print(f"built and healthy in {time.monotonic() - started:.0f} s")

    # the web UI is served from the image: the app at / and at its routes, its assets, GraphiQL
    app_page = httpx.get(f"{stack.url}/jobs/composed", headers={"Accept": "text/html"})
    assert app_page.status_code == 200 and "<title>paigraph</title>" in app_page.text
    asset = re.search(r'src="(/assets/[^"]+\.js)"', app_page.text)
    assert asset and httpx.get(stack.url + asset.group(1)).status_code == 200
    graphiql = httpx.get(f"{stack.url}/graphql", headers={"Accept": "text/html"})
    assert graphiql.status_code == 200 and "paigraph GraphiQL" in graphiql.text

    with pytest.raises(RemoteError, match="wants a token"):
        Client(stack.url, "").execute("{ viewer { name } }")
    token = stack.ok("exec", "-T", "paigraph", "paigraph", "users", "add", "ci", "--admin").strip()
    client = Client(stack.url, token)
    assert client.execute("{ viewer { name } }")["viewer"]["name"] == "ci"

    submitted = client.submit(PS_WORKER, {})
    assert submitted["errors"] == []
    job_id = submitted["job"]["id"]
    job = until(
        lambda: (found := client.job(job_id))["state"] in FINAL and found,
        "the job ending",
        timeout=120,
    )
    assert job["state"] == "SUCCEEDED", job
    ps = job["taskRoles"][0]["instances"][0]
    ps_http = next(p["ports"][0] for p in ps["ports"] if p["label"] == "http")
    assert 15000 <= ps_http < 40000  # a port of the host's range, checked on the host
    logs = "".join(client.task_logs(job_id, "worker", 1, follow=False))
    assert f"worker 1 sees {ps['hostIp']}:{ps_http}\n" in logs

    # the doctor in the server's container sees the engine, ports, database, images, state
    doctor = stack.compose("exec", "-T", "-e", "COLUMNS=300", "paigraph", "paigraph", "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr

    # new containers on the same volumes: the user, the token and the job are still there
    stack.ok("up", "-d", "--force-recreate", timeout=300)
    stack.wait_healthy()
    assert Client(stack.url, token).job(job_id)["state"] == "SUCCEEDED"

    stack.ok("down", "-v", "--remove-orphans", "--timeout", "10", timeout=300)
    assert stack.resources() == {"containers": [], "volumes": []}
    assert leftovers(server_owner(stack.state_dir)) == ([], [])
