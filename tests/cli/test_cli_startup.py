"""`paigraph` client commands start without loading what only other commands need: no database
library, no Docker or Kubernetes SDK, no GraphQL server, no protocol engine. Each of these costs
every command a noticeable part of a second; a top-level import of the store (or of anything
that imports it) in a command module brings them back, and these tests then fail."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import ROOT, clean_env, free_port

# Runs `paigraph ARGS` as the console script does, then names every module it loaded.
PROBE = """
import atexit, runpy, sys
atexit.register(lambda: sys.stderr.write("\\nLOADED " + " ".join(sorted(sys.modules)) + "\\n"))
sys.argv = ["paigraph", *sys.argv[1:]]
runpy.run_module("server.cli", run_name="__main__")
"""

# What a client command (talking to a server, or printing help) never needs.
SERVER_SIDE = (
    "sqlalchemy",
    "sqlmodel",
    "alembic",
    "docker",
    "kubernetes",
    "strawberry",
    "uvicorn",
    "server.store",
    "server.protocol",
)


def loaded_by(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, set[str]]:
    """`paigraph ARGS`' exit status, its output (both streams) and the modules it loaded."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        env=clean_env() | {"COLUMNS": "100"} | (env or {}),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    said, _, modules = done.stderr.rpartition("\nLOADED ")
    assert modules, f"the probe named no modules: {done.stderr}"
    return done.returncode, done.stdout + said, set(modules.split())


def server_side(modules: set[str], but: tuple[str, ...] = ()) -> list[str]:
    """The modules of SERVER_SIDE (and their submodules) among `modules`, but those of `but`."""
    return sorted(
        m
        for m in modules
        if any(m == name or m.startswith(f"{name}.") for name in SERVER_SIDE if name not in but)
    )


def unreachable() -> dict[str, str]:
    return {"PAIGRAPH_URL": f"http://127.0.0.1:{free_port()}"}  # nothing listens there


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("--version",),
        ("submit", "--help"),
        ("market", "list", "--help"),
        ("users", "add", "--help"),
        ("serve", "--help"),
    ],
    ids=" ".join,
)
def test_help_and_version_load_nothing_of_the_server(args: tuple[str, ...]) -> None:
    status, said, modules = loaded_by(*args)
    assert status == 0, said
    assert "Usage:" in said or said.startswith("paigraph "), said
    assert server_side(modules) == []


@pytest.mark.parametrize(
    "args",
    [("status", "some-job"), ("market", "list"), ("logs", "some-job", "main", "0")],
    ids=" ".join,
)
def test_a_client_command_without_a_server_loads_nothing_of_the_server(
    args: tuple[str, ...],
) -> None:
    status, said, modules = loaded_by(*args, env=unreachable())
    assert status == 1, said
    assert "cannot reach the paigraph server" in said
    assert server_side(modules) == []
    assert "httpx" in modules  # it did try the server


def test_submit_loads_no_database_or_engine_even_when_refused(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text("protocolVersion: 2\nname: j\n", encoding="utf-8")
    status, said, modules = loaded_by("submit", str(config), env=unreachable())
    assert status == 1, said
    assert "cannot reach the paigraph server" in said
    assert server_side(modules) == []


def test_a_command_that_needs_the_database_loads_it_when_it_runs(tmp_path: Path) -> None:
    """The other side of the tests above: the probe does see a store the command opens."""
    db = f"sqlite:///{tmp_path / 'users.db'}"
    status, said, modules = loaded_by("users", "list", "--db", db)
    assert status == 0, said
    assert "NAME" in said
    assert {"sqlalchemy", "alembic", "server.store"} <= modules


def test_validate_loads_the_protocol_engine_but_no_database(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text("protocolVersion: 2\nname: j\n", encoding="utf-8")
    status, said, modules = loaded_by("validate", str(config))
    assert status == 1, said  # no task roles
    assert "INVALID" in said
    assert "server.protocol.engine" in modules
    assert server_side(modules, but=("server.protocol",)) == []
