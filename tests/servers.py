"""Real `paigraph serve` processes for the tests that need one, and the `paigraph` command run
against them: a `Server` on its own database, simulator state directory and port (it can be
killed and started again on the same three), `served` for one on a fresh database that is
stopped and cleaned up whatever happens, and what the API says about a server's jobs.

Every process gets the caller's environment without its PAIGRAPH_* settings, so a setting of
the test run never leaks into a server or a command; a server's simulator publishes on the
port range of the pytest-xdist worker (tests.worker_support), never on another worker's."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import docker
import httpx
import yaml

from backends.docker_specs import JOB as JOB_LABEL
from server.api.ids import parse_global_id
from server.app.asgi import server_owner
from server.client.remote import Client
from simulator.containers import OWNER
from simulator.ports import bind_problem
from simulator.settings import CONFIG_ENV
from tests.simulated import leftovers, remove_leftovers
from tests.store_support import fresh_database
from tests.waiting import until
from tests.worker_support import SERVER_PORTS, share, simulator_port_range

ROOT = Path(__file__).resolve().parents[1]
FINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


# --- servers and the command line --------------------------------------------------------------


_server_ports = share(SERVER_PORTS)
_next_server_port = [random.randrange(_server_ports.start, _server_ports.stop)]
_server_port_lock = threading.Lock()


def free_port() -> int:
    """A port for a server of the test to listen on: free now, from this worker's share of
    SERVER_PORTS (below the ephemeral ports, so no outgoing connection takes it before the
    server binds it, and apart from the other workers'), and not one of the last calls' (which
    may not be bound yet): the search goes on from after the last port given."""
    with _server_port_lock:
        size = len(_server_ports)
        for step in range(size):
            port = _server_ports.start + (_next_server_port[0] - _server_ports.start + step) % size
            if bind_problem(port) is None:
                _next_server_port[0] = port + 1
                return port
    raise RuntimeError(f"no free port for a server in {_server_ports.start}-{_server_ports.stop}")


def on_worker_ports(config: Path | None, fallback: Path) -> Path:
    """Simulator settings that publish on this worker's port range: `config` itself when it
    names a port_range (or is not a mapping, for tests of bad settings), else a copy of it with
    the range added, written beside it so that its relative paths still hold; without `config`,
    `fallback` with the range alone."""
    data: Any = {}
    if config is not None:
        try:
            data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            return config
        if not isinstance(data, dict) or "port_range" in data:
            return config
    target = fallback if config is None else config.with_name(f".{config.stem}.worker-ports.yaml")
    text = yaml.safe_dump({**data, "port_range": simulator_port_range()})
    if not target.is_file() or target.read_text(encoding="utf-8") != text:
        target.parent.mkdir(parents=True, exist_ok=True)
        written = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        written.write_text(text, encoding="utf-8")
        os.replace(written, target)  # a server reading it never sees half of it
    return target


def clean_env() -> dict[str, str]:
    """The caller's environment without any PAIGRAPH_* setting: each test says its own."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PAIGRAPH_")}


def paigraph(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`paigraph ARGS` run to its end, with none of the caller's PAIGRAPH_* settings but
    `env`'s, reading `stdin` when given."""
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        env=clean_env() | (env or {}),
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Server:
    """`python -m server.cli serve` on its own database, state directory and port; it can be
    killed and started again on the same three."""

    def __init__(
        self, db_url: str, state_dir: Path, log: Path, serve_args: tuple[str, ...] = ()
    ) -> None:
        self.db_url = db_url
        self.serve_args = serve_args  # more options of `paigraph serve`
        self.state_dir = state_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.owner = server_owner(state_dir)
        self.log = log
        self.settings: dict[str, str] = {}  # more PAIGRAPH_* settings of this server
        self.process: subprocess.Popen[bytes] | None = None

    def env(self, **extra: str) -> dict[str, str]:
        """The caller's environment without any PAIGRAPH_* setting of its own, plus ours; the
        simulator publishes on this worker's ports (see `on_worker_ports`)."""
        settings = {**self.settings, **extra}
        config = settings.get(CONFIG_ENV)
        fallback = self.state_dir.parent / "simulator-on-worker-ports.yaml"
        settings[CONFIG_ENV] = str(on_worker_ports(Path(config) if config else None, fallback))
        return clean_env() | {
            "PAIGRAPH_DB": self.db_url,
            "PAIGRAPH_SIMULATOR_STATE": str(self.state_dir),
            "PAIGRAPH_URL": self.url,
            **settings,
        }

    def launch(self) -> None:
        """Start the server process, its output going to the log, without waiting for it."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    *(sys.executable, "-m", "server.cli", "serve"),
                    *("--port", str(self.port), *self.serve_args),
                ],
                env=self.env(),
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def start(self) -> None:
        """Start the server process and wait until it answers."""
        self.launch()

        def answers() -> bool:
            assert self.process is not None and self.process.poll() is None, self.output()
            try:
                return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        # patient: a start imports everything and migrates the database, which two workers and
        # the machine's other load can stretch past half a minute
        until(answers, f"the server on port {self.port} answering", timeout=90, every=0.1)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, the containers keep going."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.process = None

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def paigraph(
        self, *args: str, token: str | None = None, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """The `paigraph` command pointed at this server, as a user with `token` (or none),
        reading `stdin` when given."""
        settings = self.env(**({"PAIGRAPH_TOKEN": token} if token else {}))
        return paigraph(*args, env=settings, stdin=stdin)

    def ann_bob_and_root(self) -> dict[str, str]:
        """Users ann and bob, and root an admin, added with `paigraph users add`: their tokens
        by name (before `start`, as an operator would)."""
        tokens = {}
        for name, admin in (("ann", False), ("bob", False), ("root", True)):
            added = self.paigraph("users", "add", name, *(["--admin"] if admin else []))
            assert added.returncode == 0, added.stderr
            tokens[name] = added.stdout.strip()
        return tokens

    def start_paigraph(self, *args: str, token: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "server.cli", *args],
            env=self.env(PAIGRAPH_TOKEN=token),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def client(self, token: str | None = None) -> Client:
        return Client(self.url, token or "")


@contextmanager
def served(kind: str, tmp_path: Path, name: str = "server") -> Iterator[Server]:
    """A server (not started yet) on a fresh database of `kind`; stopped, and its containers
    and networks removed, at the end whatever happened."""
    (tmp_path / name).mkdir()
    with fresh_database(kind, tmp_path / name) as url:
        server = Server(url, tmp_path / name / "state", tmp_path / f"{name}.log")
        try:
            yield server
        finally:
            server.stop()
            remove_leftovers(server.owner)


# --- what the API says about a server's jobs ---------------------------------------------------


JOB = """query($id: ID!) { job(id: $id) {
  id name state stateReason attempt retries
  taskRoles { name instances {
    index attempt taskAttempt state exitCode node hostIp startedAt ports { label ports } } }
} }"""

EVENTS = """query($id: ID!, $after: String) { job(id: $id) {
  events(first: 100, after: $after) {
    edges { node { cursor sequence type state attempt taskRole index message } }
    pageInfo { hasNextPage endCursor }
  }
} }"""

FOLLOW = """subscription($id: ID!, $after: String) { jobEvents(jobId: $id, after: $after) {
  cursor sequence type state attempt taskRole index message } }"""


def job(client: Client, job_id: str) -> dict[str, Any]:
    found = client.execute(JOB, {"id": job_id})["job"]
    assert found is not None, f"no job {job_id}"
    return found


def instances(found: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        f"{role['name']}-{i['index']}": i for role in found["taskRoles"] for i in role["instances"]
    }


def event_log(client: Client, job_id: str) -> list[dict[str, Any]]:
    """The job's whole event log, page after page from the first event."""
    events: list[dict[str, Any]] = []
    after = None
    while True:
        page = client.execute(EVENTS, {"id": job_id, "after": after})["job"]["events"]
        events += [edge["node"] for edge in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            return events
        after = page["pageInfo"]["endCursor"]


def final_job(client: Client, job_id: str, timeout: float = 60) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        found = job(client, job_id)
        return found if found["state"] in FINAL else None

    return until(ended, f"job {job_id} ending", timeout)


def containers(owner: str, status: str) -> list[str]:
    api = docker.from_env().api
    found = api.containers(all=True, filters={"label": f"{OWNER}={owner}", "status": status})
    return sorted(c["Names"][0].lstrip("/") for c in found)


def job_containers(job_id: str, status: str) -> list[str]:
    """The names of the containers of the job (by its API id) that Docker has in `status`."""
    labels = f"{JOB_LABEL}={parse_global_id(job_id)[1]}"
    found = docker.from_env().api.containers(all=True, filters={"label": labels, "status": status})
    return sorted(c["Names"][0].lstrip("/") for c in found)


def nothing_left(owner: str) -> None:
    until(lambda: leftovers(owner) == ([], []), f"containers and networks of {owner} gone", 30)
