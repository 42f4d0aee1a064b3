"""Every example in examples/ run as the README tells a user to: on a real `paigraph serve`
process (SQLite, the Docker simulator) driven by the `paigraph` command, with what the user
then looks at checked: the job's state, the lines in its logs, the port the host reaches, the
marketplace after an import. The marketplace examples also need examples/serve-files, which
is started here as the README says and stopped at the end.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from server.client.remote import Client
from server.protocol import Kind, parse_document
from tests.servers import (
    ROOT,
    Server,
    final_job,
    free_port,
    instances,
    job,
    on_worker_ports,
    served,
)
from tests.simulated import leftovers
from tests.waiting import until

pytestmark = pytest.mark.docker

EXAMPLES = ROOT / "examples"
MARKETPLACE = EXAMPLES / "marketplace"


# what the README's tour asks about a job made of marketplace items
ORIGINS = """query($id: ID!) { job(id: $id) { taskRoles {
  dockerImage { name marketplaceItem { name version } }
  prerequisites { name type uri marketplaceItem { name version } } } } }"""


def example_files() -> list[Path]:
    return sorted(
        p for p in EXAMPLES.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml", ".json")
    )


def user_lines(log: str) -> list[str]:
    """An instance's log without the lines paigraph's entrypoint writes itself."""
    return [line for line in log.splitlines() if not line.startswith("[paigraph]")]


def http_port(instance: dict[str, Any], label: str = "http") -> int:
    return next(p["ports"][0] for p in instance["ports"] if p["label"] == label)


def address(instance: dict[str, Any]) -> str:
    return f"{instance['hostIp']}:{http_port(instance)}"


# --- fixtures: one server for the module, the examples' file server --------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with served("sqlite", tmp_path_factory.mktemp("examples")) as started:
        # as the README says: the example items' files are served on loopback
        started.settings["PAIGRAPH_ALLOWED_FETCH_NETWORKS"] = "127.0.0.1"
        started.start()
        yield started


@pytest.fixture(scope="module")
def client(server: Server) -> Client:
    return server.client()  # the local admin: a loopback server without users


def paigraph(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    """`paigraph ARGS` against the server, checked to have succeeded."""
    done = server.paigraph(*args)
    assert done.returncode == 0, f"paigraph {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done


def submitted(server: Server, example: str, *args: str) -> str:
    """`paigraph submit examples/EXAMPLE --watch`, which exits 0 only when the job SUCCEEDED;
    the job's id (the first line it prints)."""
    watched = paigraph(server, "submit", str(EXAMPLES / example), "--watch", *args)
    assert "SUCCEEDED" in watched.stdout, watched.stdout
    return watched.stdout.split()[0]


def logs(server: Server, job_id: str, role: str, index: int) -> str:
    return paigraph(server, "logs", job_id, role, str(index)).stdout


@pytest.fixture(scope="module")
def files_port() -> int:
    """A free port for examples/serve-files: 8808, the items' own, may be taken by the one
    the README has the user start."""
    return free_port()


@pytest.fixture(scope="module")
def files_address(files_port: int) -> str:
    """What the items' template variable `files` is set to, as serve-files --port prints it."""
    return f"127.0.0.1:{files_port}"


@pytest.fixture(scope="module")
def file_server(files_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """examples/serve-files --port, running; yields the file its requests are logged to."""
    log = tmp_path_factory.mktemp("files") / "serve-files.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(EXAMPLES / "serve-files"), "--port", str(files_port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, like a terminal's foreground job
        )

    def answers() -> bool:
        assert process.poll() is None, log.read_text()
        try:
            return httpx.get(f"http://127.0.0.1:{files_port}/", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        until(answers, "examples/serve-files answering", timeout=30, every=0.1)
        yield log
    finally:
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C, as in the terminal
        process.wait(timeout=15)


@pytest.fixture(scope="module")
def imported(server: Server, files_address: str) -> subprocess.CompletedProcess[str]:
    """`paigraph market import examples/marketplace --set files=ADDRESS`, once for the
    module."""
    return server.paigraph("market", "import", str(MARKETPLACE), "--set", f"files={files_address}")


# --- the examples' files -------------------------------------------------------------------


def test_every_example_is_valid_and_in_the_docs() -> None:
    """docs/examples.md, which the README links, lists every example; neither names one that
    does not exist."""
    files = example_files()
    assert len(files) >= 12, files
    listing = (ROOT / "docs" / "examples.md").read_text()
    for path in files:
        result = parse_document(path.read_bytes())
        assert result.ok, (path, result.errors)
        relative = path.relative_to(ROOT)
        if path.parent != MARKETPLACE:  # items are listed by their directory
            assert f"`{relative}`" in listing, f"docs/examples.md says nothing about {relative}"
    assert "`examples/marketplace/`" in listing and "`examples/serve-files`" in listing
    readme = (ROOT / "README.md").read_text()
    assert "](docs/examples.md)" in readme, "README.md does not link docs/examples.md"
    for name, text in (("README.md", readme), ("docs/examples.md", listing)):
        for mentioned in set(re.findall(r"examples/[\w./-]+", text)):
            assert (ROOT / mentioned.rstrip(".")).exists(), f"{name} names {mentioned}"


# --- ps-worker.yaml ------------------------------------------------------------------------


def test_the_parameter_server_and_its_workers_talk_over_their_ports(
    server: Server, client: Client
) -> None:
    job_id = submitted(server, "ps-worker.yaml")
    found = instances(job(client, job_id))
    ps, workers = found["ps_server-0"], [found["worker-0"], found["worker-1"]]
    assert [w["state"] for w in workers] == ["SUCCEEDED", "SUCCEEDED"]

    # the parameter server serves until the job has succeeded, and is stopped then
    assert found["ps_server-0"]["state"] == "STOPPED"
    heard = user_lines(logs(server, job_id, "ps_server", 0))
    assert heard[:4] == [
        f"ps_server 0: serving resnet20 weights at {address(ps)}",
        f"ps_server: gradient 32 from worker at {address(workers[0])}",
        f"ps_server: gradient 64 from worker at {address(workers[1])}",
        "ps_server: weights after step 1: 96",
    ], heard
    for index, worker in enumerate(workers):
        gradient = 32 * (index + 1)
        assert user_lines(logs(server, job_id, "worker", index)) == [
            f"worker {index}: pulled resnet20 weights 0 from ps_server at {address(ps)}",
            f"worker {index}: serving gradient {gradient} at {address(worker)}",
            f"worker {index}: weights after step 1: 96",
        ]


def test_paigraph_run_runs_the_ps_worker_example_in_the_foreground(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAIGRAPH_")}
    env["PAIGRAPH_SIMULATOR_STATE"] = str(tmp_path / "state")
    env["PAIGRAPH_SIMULATOR_CONFIG"] = str(on_worker_ports(None, tmp_path / "simulator.yaml"))
    process = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "run", str(EXAMPLES / "ps-worker.yaml")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=ROOT,
    )
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output
    assert "job ps-worker: SUCCEEDED" in output
    owner = f"run-{socket.gethostname()}-{process.pid}"
    assert leftovers(owner) == ([], []), "containers or networks left behind"


# --- serving.yaml --------------------------------------------------------------------------


def test_the_serving_job_answers_on_its_ports_from_the_host(server: Server, client: Client) -> None:
    job_id = paigraph(server, "submit", str(EXAMPLES / "serving.yaml")).stdout.strip()
    try:

        def running() -> dict[str, Any] | None:
            found = job(client, job_id)
            return found if found["state"] == "RUNNING" else None

        web = instances(until(running, "the serving job running"))
        status = paigraph(server, "status", "serving").stdout
        for index in (0, 1):
            port = http_port(web[f"web-{index}"], "web")
            assert f"web:{port}" in status, status

            def page(port: int = port) -> str | None:
                try:
                    return httpx.get(f"http://127.0.0.1:{port}/", timeout=2).text
                except httpx.TransportError:
                    return None

            text = until(page, f"web-{index} answering on 127.0.0.1:{port}", timeout=30)
            assert text == f"hello from paigraph: served by web-{index} of job serving\n"
    finally:
        paigraph(server, "stop", job_id)
    assert final_job(client, job_id)["state"] == "STOPPED"
    port = http_port(web["web-0"], "web")
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/", timeout=2)


# --- dialects/ -----------------------------------------------------------------------------


def test_the_three_dialects_give_the_same_output(server: Server, client: Client) -> None:
    outputs = {}
    for name in ("counting.draft.yaml", "counting.v2.yaml", "counting.v1.json"):
        job_id = submitted(server, f"dialects/{name}")
        found = job(client, job_id)
        assert [(r["name"], len(r["instances"])) for r in found["taskRoles"]] == [
            ("counter", 2),
            ("report", 1),
        ]
        outputs[name] = {
            instance: user_lines(logs(server, job_id, *instance.rsplit("-", 1)))  # type: ignore[arg-type]
            for instance in ("counter-0", "counter-1", "report-0")
        }
    expected = {
        "counter-0": ["counter 0 of 2 adds 1..10 = 55"],
        "counter-1": ["counter 1 of 2 adds 11..20 = 155"],
        "report-0": ["job counting runs roles counter,report with 3 instances"],
    }
    assert all(output == expected for output in outputs.values()), outputs


# --- marketplace/ and using-marketplace/ ---------------------------------------------------


def test_one_command_imports_every_marketplace_item(
    server: Server, files_address: str, imported: subprocess.CompletedProcess[str]
) -> None:
    assert imported.returncode == 0, imported.stdout + imported.stderr
    files = sorted(MARKETPLACE.glob("*.yaml"))
    assert imported.stdout.splitlines()[-1] == (
        f"{len(files)} published ({len(files)} new items, 0 new versions), 0 unchanged, "
        f"0 rejected, of {len(files)} files"
    )
    wanted = {}
    for path in files:
        result = parse_document(path.read_bytes())
        if result.kind is Kind.JOB:
            assert result.spec is not None
            wanted[result.spec.name] = "job_template"
        else:
            assert result.component is not None
            wanted[result.component.name] = result.component.type.value
    assert set(wanted.values()) == {"dockerimage", "data", "script", "plugin", "job_template"}
    listed = paigraph(server, "market", "list").stdout.splitlines()
    assert listed[0].split("\t")[:4] == ["ID", "NAME", "VERSION", "TYPE"]
    rows = [line.split("\t") for line in listed[1:]]
    assert {row[1]: row[3] for row in rows} == wanted
    assert {row[2] for row in rows} == {"1.0.0"}

    again = paigraph(
        server, "market", "import", str(MARKETPLACE), "--set", f"files={files_address}"
    )
    assert again.stdout.splitlines()[-1] == (
        f"0 published (0 new items, 0 new versions), {len(files)} unchanged, 0 rejected, "
        f"of {len(files)} files"
    )


def test_a_job_made_of_marketplace_items_reads_their_data_and_runs_their_code(
    server: Server,
    client: Client,
    imported: subprocess.CompletedProcess[str],
    file_server: Path,
    files_address: str,
) -> None:
    # serve-files tells how to point the items at it
    told = f"paigraph market import examples/marketplace --set files={files_address}"
    assert told in file_server.read_text()
    allowing = "start it with: PAIGRAPH_ALLOWED_FETCH_NETWORKS=127.0.0.1 ./scripts/serve"
    assert allowing in file_server.read_text()
    assert imported.returncode == 0, imported.stderr
    job_id = submitted(server, "using-marketplace/train-on-clusters.yaml")
    accuracy = {0: "0.93", 1: "1.00"}
    for index in (0, 1):
        lines = user_lines(logs(server, job_id, "trainer", index))
        assert lines[-1] == (
            f"shard {index} of 2: 15 samples, 3 classes, training accuracy {accuracy[index]}"
        ), lines
        assert {"clusters.csv", "train.sh"} <= set(lines)  # `ls` of the two directories
    (role,) = client.execute(ORIGINS, {"id": job_id})["job"]["taskRoles"]
    assert role["dockerImage"]["marketplaceItem"]["name"] == "busybox"
    came_from = {p["name"]: (p["marketplaceItem"] or {}).get("name") for p in role["prerequisites"]}
    assert came_from == {"busybox": "busybox", "clusters": "clusters", "trainer": "trainer"}
    # two instances, one download of the data
    assert file_server.read_text().count("GET /clusters.csv") == 1


def test_the_callbacks_of_a_cmd_plugin_item_run_around_the_commands(
    server: Server, imported: subprocess.CompletedProcess[str]
) -> None:
    assert imported.returncode == 0, imported.stderr
    job_id = submitted(server, "using-marketplace/callbacks.yaml")
    for index in (0, 1):
        lines = user_lines(logs(server, job_id, "main", index))
        assert lines[:2] == [
            f"[nightly] main-{index} of callbacks starts",
            f"main {index} runs its commands between the callbacks",
        ], lines
        took = re.fullmatch(rf"\[nightly\] main-{index} succeeded after (\d+) s", lines[-1])
        assert len(lines) == 3 and took, lines
        assert int(took[1]) >= 1  # the commands sleep for a second


def test_the_job_template_is_used_from_the_marketplace(
    server: Server, client: Client, imported: subprocess.CompletedProcess[str]
) -> None:
    assert imported.returncode == 0, imported.stderr
    shown = paigraph(server, "market", "show", "pingpong").stdout
    assert "rounds=3" in shown
    config = paigraph(server, "market", "use", "pingpong", "--param", "rounds=2").stdout
    assert yaml.safe_load(config)["parameters"] == {"rounds": 2}
    used = paigraph(server, "market", "use", "pingpong", "--param", "rounds=2", "--submit")
    job_id = used.stdout.strip()
    found = final_job(client, job_id, timeout=90)
    assert found["state"] == "SUCCEEDED", found
    pong = instances(found)["pong-0"]
    assert user_lines(logs(server, job_id, "ping", 0)) == [
        f"ping 1: pong from {pong['hostIp']}",
        f"ping 2: pong from {pong['hostIp']}",
    ]
    assert re.search(r"submits\s+1\b", paigraph(server, "market", "show", "pingpong").stdout)
