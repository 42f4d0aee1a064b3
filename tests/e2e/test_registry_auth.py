"""A private image pulled with the job's credentials: a real registry (Debian's
`docker-registry`, with htpasswd authentication, on loopback), a real `paigraph serve` whose
simulator has `image_pull: true`, and jobs that name an image only that registry has.

The test image is pushed there under new names and removed from this machine, so each job's
start needs a pull; nothing comes from outside this machine.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import httpx
import pytest

from server.client.remote import Client
from tests.servers import Server, final_job, free_port, served
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


def pulling_settings(state: Path, files: Path) -> Path:
    settings = state / "simulator.yaml"
    settings.write_text(f"image_pull: true\nallowed_file_roots: [{files}]\n")
    return settings


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("auth-files")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, files: Path) -> Iterator[Server]:
    state = tmp_path_factory.mktemp("pulling")
    settings = pulling_settings(state, files)
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
    """The password is in no file the server or its simulator wrote: its log, the state
    directory, and a SQLite database with its write-ahead log."""
    database = Path(server.db_url.removeprefix("sqlite:///"))
    kept = [database.parent / f"{database.name}{end}" for end in ("", "-wal", "-shm")]
    leaked = [
        p
        for p in [server.log, *kept, *server.state_dir.rglob("*")]
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
    assert f"image '{private}' could not be pulled with the credentials of its auth" in said
    assert wrong not in said and "alice" not in said


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


LITERAL_JOB = """\
protocolVersion: 2
name: literal-credentials
type: job
prerequisites:
  - name: private
    type: dockerimage
    uri: {image}
    auth:
      username: alice
      password: {password}  # written here, not under secrets
      registryuri: {registry}
taskRoles:
  main:
    dockerImage: private
    resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: 0}}
    commands: [echo ran with written credentials]
"""

EVERYTHING = """query($id: ID!) {
  job(id: $id) {
    name state stateReason config warnings { path code message }
    taskRoles { name commands dockerImage { name uri reference }
      prerequisites { name uri reference }
      instances { state stateReason exitReason } }
    events(first: 100) { edges { node { type message } } }
  }
  jobs(first: 100) { edges { node { name config stateReason } } }
}"""

ITEM = """query($id: ID!) { marketplaceItem(id: $id) {
  name versions { version content } } }"""


def test_a_credential_written_into_a_job_is_handled_as_a_secret_for_every_reader(
    tmp_path: Path, registry: str, private: str, files: Path
) -> None:
    """ann writes the registry password into her job; the pull works, and neither she, bob nor
    an admin is ever shown it (job, list, events, resolving, the template she publishes), and
    it is in no file the server keeps: the database and its log, the state directory."""
    config = LITERAL_JOB.format(image=private, password=PASSWORD, registry=registry)
    with served("sqlite", tmp_path) as server:
        server.settings["PAIGRAPH_SIMULATOR_CONFIG"] = str(pulling_settings(tmp_path, files))
        tokens = server.ann_bob_and_root()
        server.start()
        ann = Client(server.url, tokens["ann"])

        submitted = ann.submit(config, {})
        assert submitted["errors"] == [], submitted
        job_id = submitted["job"]["id"]
        warned = {".".join(w["path"]): w["message"] for w in submitted["warnings"]}
        assert "handled as the secret 'private-password'" in warned["prerequisites.0.auth.password"]
        assert "<% $secrets.private-password %>" in warned["prerequisites.0.auth.password"]
        assert "prerequisites.0.auth.username" in warned
        assert final_job(ann, job_id, timeout=120)["state"] == "SUCCEEDED"
        logs = server.paigraph("logs", job_id, "main", "0", token=tokens["ann"])
        assert "ran with written credentials" in logs.stdout

        published = ann.execute(
            "mutation($job: ID!) { publishMarketplaceItem(input: {jobId: $job}) {"
            " item { id } errors { message } warnings { path code message } } }",
            {"job": job_id},
        )["publishMarketplaceItem"]
        assert published["errors"] == [] and published["item"], published
        assert "secrets-not-published" in {w["code"] for w in published["warnings"]}

        answers = []
        for token in tokens.values():
            reader = Client(server.url, token)
            answers.append(reader.execute(EVERYTHING, {"id": job_id}))
            answers.append(reader.execute(ITEM, {"id": published["item"]["id"]}))
            answers.append(
                reader.execute(
                    "mutation($c: String!) { resolveJob(input: {config: $c}) {"
                    " job { config taskRoles { prerequisites { name uri } } } } }",
                    {"c": config},
                )
            )
        shown = json.dumps(answers)
        assert PASSWORD not in shown and "alice" not in shown
        [stored] = {a["job"]["config"] for a in answers if "job" in a and "state" in a["job"]}
        assert 'password: "<% $secrets.private-password %>"' in stored
        [content] = {
            v["content"]
            for a in answers
            if "marketplaceItem" in a
            for v in a["marketplaceItem"]["versions"]
        }
        # the template declares the secrets its user supplies, without their values
        assert '"private-password": ""' in content and '"private-username": ""' in content
        no_password_anywhere(server)  # the database (and its log) included, while it runs
        server.stop()
        no_password_anywhere(server)
