"""`paigraph doctor` against the real Docker engine, real ports and real databases: what it
finds on a healthy machine, and the advice it gives for each kind of problem."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import text

from server.cli.doctor import (
    TEST_IMAGE,
    Finding,
    check_database,
    check_gpus,
    check_images,
    check_ports,
    check_publish_address,
    check_settings,
    check_state_dir,
    diagnose,
)
from server.store import create_store_engine, head_revision, open_store, session_scope
from server.store.migrate import alembic_config
from simulator.containers import Engine
from simulator.settings import STATE_ENV, settings_from_data
from tests.worker_support import SPARE_PORTS as WORKERS_SPARE_PORTS
from tests.worker_support import share

ROOT = Path(__file__).resolve().parents[2]
# this worker's spare ports: below Linux's ephemeral ports and the simulator's range, and apart
# from the other workers', so that no outgoing connection and no job or test running beside this
# one takes a port the test holds
SPARE_PORTS = share(WORKERS_SPARE_PORTS)


@pytest.fixture(autouse=True)
def _no_state_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STATE_ENV, raising=False)


@pytest.fixture(autouse=True)
def no_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The URL the doctor asks for a server's health: a port of this worker's held bound but
    never listening, so no server answers there. Without it the doctor would ask
    127.0.0.1:8000, and whatever runs there (./scripts/serve, its engine away) would decide
    the tests."""
    for port in SPARE_PORTS:
        with socket.socket() as held:
            try:
                held.bind(("127.0.0.1", port))
            except OSError:
                continue
            url = f"http://127.0.0.1:{port}"
            monkeypatch.setenv("PAIGRAPH_URL", url)
            yield url
            return
    pytest.fail(f"no free port in {SPARE_PORTS}")


def doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`paigraph doctor` as a user runs it, on a terminal wide enough for whole sentences; it
    asks the server at `no_server`'s URL."""
    base = {
        k: v for k, v in os.environ.items() if not k.startswith("PAIGRAPH_") or k == "PAIGRAPH_URL"
    }
    return subprocess.run(
        [sys.executable, "-m", "server.cli", "doctor", *args],
        cwd=ROOT,
        env={**base, "NO_COLOR": "1", "COLUMNS": "400", **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def row(output: str, check: str) -> str:
    """The table row of `check` in the doctor's output (one line on a wide terminal)."""
    lines = [line for line in output.splitlines() if line.startswith(f"│ {check} ")]
    assert len(lines) == 1, f"no single row for {check!r} in:\n{output}"
    return lines[0]


def settings_file(tmp_path: Path, start: int, end: int) -> Path:
    path = tmp_path / "simulator.yaml"
    path.write_text(
        f"port_range: {{start: {start}, end: {end}}}\nstate_dir: {tmp_path / 'state'}\n"
    )
    return path


@contextlib.contextmanager
def held_ports(count: int) -> Iterator[list[socket.socket]]:
    """TCP sockets listening on `count` consecutive ports of SPARE_PORTS, on all interfaces."""
    for start in range(SPARE_PORTS.start, SPARE_PORTS.stop - count, count):
        sockets: list[socket.socket] = []
        try:
            for port in range(start, start + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("0.0.0.0", port))
                sock.listen()
        except OSError:
            for sock in sockets:
                sock.close()
            continue
        try:
            yield sockets
        finally:
            for sock in sockets:
                sock.close()
        return
    pytest.fail(f"no {count} consecutive free ports in {SPARE_PORTS}")


def migrated(url: str) -> str:
    open_store(url).close()
    return url


# --- a healthy machine ------------------------------------------------------------------------


@pytest.mark.docker
def test_a_healthy_machine_passes_every_check(db_url: str, tmp_path: Path, no_server: str) -> None:
    with held_ports(8) as sockets:
        start = sockets[0].getsockname()[1]  # eight ports free once the sockets are closed
    config = settings_file(tmp_path, start, start + 8)
    done = doctor("--db", migrated(db_url), "--config", str(config))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All checks passed." in done.stdout and "PROBLEM" not in done.stdout

    version = docker.from_env().version()["Version"]
    assert f"Docker {version}" in row(done.stdout, "Docker engine")
    assert f"from {config}" in row(done.stdout, "Simulator settings")
    assert f"8 of 8 ports in {start}-{start + 7} can be bound" in row(done.stdout, "Port range")
    state = row(done.stdout, "State directory")
    assert f"{tmp_path / 'state'} will be created on first use" in state
    assert f"schema up to date (revision {head_revision()})" in row(done.stdout, "Database")
    assert "present" in row(done.stdout, f"Image {TEST_IMAGE}")
    assert f"no paigraph server answers at {no_server}" in row(done.stdout, "Server")


def test_a_database_not_created_yet_is_fine_for_a_first_start(tmp_path: Path) -> None:
    finding = check_database(f"sqlite:///{tmp_path / 'new.db'}")
    assert finding.ok, finding
    assert "no file yet; paigraph serve creates it" in finding.detail
    assert not (tmp_path / "new.db").exists()  # the doctor creates nothing


# --- ports --------------------------------------------------------------------------------------


def test_a_port_range_held_by_other_programs_is_a_problem_until_ports_are_free(
    tmp_path: Path,
) -> None:
    with held_ports(3) as sockets:
        start = sockets[0].getsockname()[1]
        config = settings_file(tmp_path, start, start + 3)
        settings_finding, settings = check_settings(config)
        assert settings_finding.ok and settings is not None

        full = check_ports(settings)
        assert not full.ok
        assert f"no port in {start}-{start + 2} can be bound" in full.detail
        assert "choose a free range with port_range" in full.advice

        shown = doctor("--config", str(config))
        assert shown.returncode == 1
        port_row = row(shown.stdout, "Port range")
        assert "PROBLEM" in port_row and "To do: stop what holds them" in shown.stdout

        sockets[0].close()
        one = check_ports(settings)
        assert not one.ok and "an instance needs at least 2" in one.detail

        sockets[1].close()
        two = check_ports(settings)
        assert two.ok, two
        assert two.detail == f"2 of 3 ports in {start}-{start + 2} can be bound"


def test_the_publish_address_says_who_reaches_job_ports_and_must_be_this_machines(
    tmp_path: Path,
) -> None:
    default = check_publish_address(settings_from_data({"state_dir": str(tmp_path)}))
    assert default.ok and default.detail == "ports are published on 127.0.0.1: this machine only"

    every = check_publish_address(
        settings_from_data({"state_dir": str(tmp_path), "publish_address": "0.0.0.0"})
    )
    assert every.ok and "reachable from every network this machine is on" in every.detail

    config = tmp_path / "simulator.yaml"
    config.write_text(f"publish_address: 203.0.113.7\nstate_dir: {tmp_path / 'state'}\n")
    shown = doctor("--config", str(config))
    assert shown.returncode == 1
    assert "PROBLEM" in row(shown.stdout, "Publish address")
    assert "cannot be published on 203.0.113.7: cannot assign requested address" in shown.stdout
    assert "set publish_address in the simulator settings" in shown.stdout

    config.write_text("publish_address: localhost\n")
    finding, _ = check_settings(config)
    assert not finding.ok and "publish_address" in finding.detail
    assert "is not an IP address" in finding.detail


def test_bad_simulator_settings_name_the_setting(tmp_path: Path) -> None:
    config = tmp_path / "simulator.yaml"
    config.write_text("port_range: lots\n")
    finding, settings = check_settings(config)
    assert settings is None and not finding.ok
    assert "port_range" in finding.detail and "start-end" in finding.detail
    assert "--config or $PAIGRAPH_SIMULATOR_CONFIG" in finding.advice


# --- the state directory ----------------------------------------------------------------------


def test_a_state_directory_that_cannot_be_made_is_a_problem(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    settings = settings_from_data({"state_dir": str(blocker / "state")})
    finding = check_state_dir(settings)
    assert not finding.ok
    assert f"{blocker} is in the way of {blocker / 'state'}" in finding.detail
    assert "PAIGRAPH_SIMULATOR_STATE" in finding.advice

    existing = settings_from_data({"state_dir": str(tmp_path)})
    assert check_state_dir(existing) == Finding("State directory", True, f"{tmp_path} is writable")


# --- the database -------------------------------------------------------------------------------


def test_an_unreachable_database_is_a_problem_with_advice() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]  # nothing listens there once the probe is closed
    url = f"postgresql://paigraph:s3cret-pass@127.0.0.1:{closed}/paigraph"
    finding = check_database(url)
    assert not finding.ok
    assert "Connection refused" in finding.detail and f"127.0.0.1:{closed}" in finding.detail
    assert "s3cret-pass" not in finding.detail
    assert "PAIGRAPH_DB" in finding.advice

    shown = doctor(env={"PAIGRAPH_DB": url})
    assert shown.returncode == 1
    assert "PROBLEM" in row(shown.stdout, "Database") and "s3cret-pass" not in shown.stdout
    assert "To do: check that the database server runs" in shown.stdout


def _migrate_to(url: str, revision: str) -> None:
    engine = create_store_engine(url)
    try:
        config = alembic_config()
        with session_scope(engine, write=True) as session:
            config.attributes["connection"] = session.connection()
            command.upgrade(config, revision)
    finally:
        engine.dispose()


def test_a_database_of_an_older_paigraph_needs_migrating(db_url: str) -> None:
    scripts = ScriptDirectory.from_config(alembic_config())
    base, head = scripts.get_base(), scripts.get_current_head()
    if base == head:
        pytest.skip("only one migration exists: no older schema to find")
    _migrate_to(db_url, base)
    finding = check_database(db_url)
    assert not finding.ok
    assert f"schema at revision {base}, this paigraph needs {head}" in finding.detail
    assert "paigraph serve" in finding.advice

    _migrate_to(db_url, "head")
    assert check_database(db_url).ok


def test_a_database_of_a_newer_paigraph_is_a_problem(db_url: str) -> None:
    engine = create_store_engine(migrated(db_url))
    try:
        with session_scope(engine) as session:
            session.execute(text("UPDATE alembic_version SET version_num = '9999_future'"))
    finally:
        engine.dispose()
    finding = check_database(db_url)
    assert not finding.ok
    assert "schema revision '9999_future' is unknown to this paigraph" in finding.detail
    assert "upgrade paigraph" in finding.advice


# --- images and the engine ----------------------------------------------------------------------


@pytest.mark.docker
def test_a_missing_image_is_a_problem_and_says_how_to_get_it(tmp_path: Path) -> None:
    missing = f"paigraph/doctor-missing:{uuid.uuid4().hex[:8]}"
    engine = Engine()
    try:
        found = check_images(engine, [TEST_IMAGE, missing], settings=None)
    finally:
        engine.client.close()
    assert [f.ok for f in found] == [True, False]
    assert found[1].detail == "not on this machine"
    assert "the simulator does not pull images" in found[1].advice

    pulling = settings_from_data({"state_dir": str(tmp_path), "image_pull": True})
    engine = Engine()
    try:
        allowed = check_images(engine, [missing], settings=pulling)
    finally:
        engine.client.close()
    assert allowed[0].ok and "pulled on first use" in allowed[0].detail

    findings = diagnose(db=f"sqlite:///{tmp_path / 'x.db'}", images=[missing])
    assert [f.check for f in findings if not f.ok] == [f"Image {missing}"]


class _RuntimesOf(Engine):
    """The real engine, reporting other runtimes."""

    def __init__(self, default: str, runtimes: dict[str, str]) -> None:
        super().__init__()
        self.faked = (default, runtimes)

    def runtimes(self) -> tuple[str, dict[str, str]]:
        return self.faked


@pytest.mark.docker
def test_the_gpus_are_counted_and_a_default_nvidia_runtime_needs_a_plain_one(
    tmp_path: Path,
) -> None:
    defaults = settings_from_data({"state_dir": str(tmp_path), "use_host_gpus": False})
    engine = Engine()
    try:
        plain = check_gpus(engine, defaults)
    finally:
        engine.client.close()
    assert plain.ok and plain.detail == "32 on 4 nodes: 32 simulated", plain

    nvidia = "nvidia-container-runtime"
    engine = _RuntimesOf("nvidia", {"nvidia": nvidia, "runc": "runc"})
    try:
        replaced = check_gpus(engine, defaults)
    finally:
        engine.client.close()
    assert replaced.ok and "simulated ones run with runc" in replaced.detail

    engine = _RuntimesOf("nvidia", {"nvidia": nvidia})
    try:
        stuck = check_gpus(engine, defaults)
        none = check_gpus(engine, defaults.model_copy(update={"gpus_per_node": 0}))
    finally:
        engine.client.close()
    assert not stuck.ok and "register runc" in stuck.advice
    assert none.ok and "none (gpus_per_node: 0)" in none.detail


def test_without_a_docker_engine_it_says_how_to_start_one(tmp_path: Path) -> None:
    shown = doctor(
        "--db",
        f"sqlite:///{tmp_path / 'x.db'}",
        env={"DOCKER_HOST": f"unix://{tmp_path / 'no-docker.sock'}"},
    )
    assert shown.returncode == 1
    assert "PROBLEM" in row(shown.stdout, "Docker engine")
    assert "To do: start the engine (./scripts/start-docker as root" in shown.stdout
    image = row(shown.stdout, f"Image {TEST_IMAGE}")
    assert "PROBLEM" in image and "not checked: no Docker engine" in image
    assert "To do: build it: ./scripts/build-test-image" in shown.stdout
    assert "Traceback" not in shown.stdout + shown.stderr
