"""A private image pulled with the job's credentials: a real registry (Debian's
`docker-registry`, with htpasswd authentication, on loopback), a real `paigraph serve` whose
simulator has `image_pull: true`, and jobs that name an image only that registry has.

The test image is pushed there under new names and removed from this machine, so each job's
start needs a pull; nothing comes from outside this machine.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import httpx
import pytest

from tests.servers import Server, free_port, served
from tests.waiting import until

pytestmark = pytest.mark.docker

IMAGE = "paigraph/busybox:test"
PASSWORD = "s3cret-Registry-Pa55"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """host:port of a registry that lets only alice (with PASSWORD) in."""
    for program in ("docker-registry", "htpasswd"):
        if shutil.which(program) is None:
            pytest.skip(f"needs {program} (Debian packages docker-registry and apache2-utils)")
    root = tmp_path_factory.mktemp("registry")
    users = subprocess.run(
        ["htpasswd", "-Bbn", "alice", PASSWORD], capture_output=True, text=True, check=True
    ).stdout
    (root / "htpasswd").write_text(users)
    address = f"127.0.0.1:{free_port()}"
    (root / "config.yml").write_text(
        "version: 0.1\n"
        "log: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}}}\n"
        f"http: {{addr: {address}, secret: test-only}}\n"
        f"auth: {{htpasswd: {{realm: paigraph-test, path: {root / 'htpasswd'}}}}}\n"
    )
    with (root / "registry.log").open("ab") as log:
        process = subprocess.Popen(
            ["docker-registry", "serve", str(root / "config.yml")], stdout=log, stderr=log
        )
    try:

        def answers() -> bool:
            try:
                return httpx.get(f"http://{address}/v2/", timeout=1).status_code == 401
            except httpx.TransportError:
                return False

        until(answers, "the registry answering", timeout=20, every=0.1)
        yield address
    finally:
        process.terminate()
        process.wait(timeout=10)


def pushed(registry: str, name: str) -> str:
    """The test image pushed to the registry as `name`, and gone from this machine."""
    client = docker.from_env()
    repository = f"{registry}/team/{name}"
    client.images.get(IMAGE).tag(repository, "1")
    client.images.push(repository, tag="1", auth_config={"username": "alice", "password": PASSWORD})
    client.images.remove(f"{repository}:1")
    return f"{repository}:1"


@pytest.fixture
def private(registry: str) -> Iterator[str]:
    image = pushed(registry, f"trainer-{uuid.uuid4().hex[:8]}")
    yield image
    with contextlib.suppress(docker.errors.ImageNotFound):
        docker.from_env().images.remove(image)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("auth-files")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, files: Path) -> Iterator[Server]:
    state = tmp_path_factory.mktemp("pulling")
    settings = state / "simulator.yaml"
    settings.write_text(f"image_pull: true\nallowed_file_roots: [{files}]\n")
    with served("sqlite", state) as started:
        started.settings["PAIGRAPH_SIMULATOR_CONFIG"] = str(settings)
        started.start()
        yield started


V2_JOB = """\
protocolVersion: 2
name: private-image
type: job
secrets:
  registry_password: {password}
prerequisites:
  - name: private
    type: dockerimage
    uri: {image}
    auth:
      username: alice
      password: <% $secrets.registry_password %>
      registryuri: {registry}
taskRoles:
  main:
    dockerImage: private
    resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: 0}}
    commands: [echo ran from the private image]
"""


def no_password_anywhere(server: Server) -> None:
    """The password is in no file the server or its simulator wrote."""
    leaked = [
        p
        for p in [server.log, *server.state_dir.rglob("*")]
        if p.is_file() and PASSWORD.encode() in p.read_bytes()
    ]
    assert leaked == []


def test_a_private_image_is_pulled_with_the_dockerimage_auth(
    server: Server, registry: str, private: str, tmp_path: Path
) -> None:
    job = tmp_path / "private.yaml"
    job.write_text(V2_JOB.format(password=PASSWORD, image=private, registry=registry))
    watched = server.paigraph("submit", str(job), "--watch")
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert "SUCCEEDED" in watched.stdout
    job_id = watched.stdout.split()[0]
    logs = server.paigraph("logs", job_id, "main", "0")
    assert "ran from the private image" in logs.stdout
    assert PASSWORD not in watched.stdout + logs.stdout
    no_password_anywhere(server)


def test_a_wrong_password_fails_the_start_saying_so_without_showing_it(
    server: Server, registry: str, private: str, tmp_path: Path
) -> None:
    wrong = "not-" + PASSWORD
    job = tmp_path / "wrong.yaml"
    job.write_text(V2_JOB.format(password=wrong, image=private, registry=registry))
    watched = server.paigraph("submit", str(job), "--watch")
    said = watched.stdout + watched.stderr
    assert watched.returncode == 1, said
    assert f"image '{private}' could not be pulled as alice" in said
    assert wrong not in said


V1_JOB = """\
{{"jobName": "private-v1", "image": "{image}", "authFile": "{files}/$PAI_USER_NAME/auth",
  "taskRoles": [{{"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128,
  "command": "echo v1 ran from the private image"}}]}}
"""


def test_a_v1_auth_file_logs_the_pull_in(
    server: Server, registry: str, private: str, files: Path, tmp_path: Path
) -> None:
    (files / "local").mkdir(exist_ok=True)  # $PAI_USER_NAME: the loopback server's local admin
    (files / "local" / "auth").write_text(f"{registry}\nalice\n{PASSWORD}\n")
    job = tmp_path / "v1.json"
    job.write_text(V1_JOB.format(image=private, files=files))
    watched = server.paigraph("submit", str(job), "--watch")
    assert watched.returncode == 0, watched.stdout + watched.stderr
    logs = server.paigraph("logs", watched.stdout.split()[0], "main", "0")
    assert "v1 ran from the private image" in logs.stdout
