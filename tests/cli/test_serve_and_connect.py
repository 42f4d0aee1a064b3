"""`paigraph serve` on a taken port, what it announces and when, and how the client commands
are pointed at a server (`--url`, `--token` or the environment) and told about a bad token."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.servers import Server, free_port, paigraph, served
from tests.simulated import job_config
from tests.waiting import until


def test_serve_on_a_taken_port_says_so_and_never_claims_to_serve(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        db = {"PAIGRAPH_DB": f"sqlite:///{tmp_path / 'paigraph.db'}"}
        by_flag = paigraph("serve", "--port", str(port), env=db)
        by_setting = paigraph("serve", env=db | {"PAIGRAPH_PORT": str(port)})
    for done in (by_flag, by_setting):
        assert done.returncode == 1
        assert done.stderr == f"error: port {port} is in use; use --port or PAIGRAPH_PORT\n"
        assert done.stdout == ""


def test_serve_on_an_unknown_host_says_which(tmp_path: Path) -> None:
    done = paigraph(
        "serve", "--host", "no-such-host.invalid", "--db", f"sqlite:///{tmp_path / 'p.db'}"
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error: cannot listen on no-such-host.invalid: ")
    assert "Traceback" not in done.stderr and "serving" not in done.stderr


@pytest.mark.docker
def test_serve_announces_its_address_only_once_it_answers(tmp_path: Path) -> None:
    with served("sqlite", tmp_path) as server:
        server.launch()
        announcement = f"paigraph serving GraphQL on {server.url}/graphql"

        def announced() -> bool:
            assert server.process.poll() is None, server.output()
            return announcement in server.output()

        until(announced, "the announcement", 60, 0.02)
        # announced: it must answer now, without waiting
        assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
        assert server.output().count(announcement) == 1


@pytest.mark.docker
def test_a_second_server_on_the_same_state_directory_is_refused_naming_the_first(
    tmp_path: Path,
) -> None:
    with served("sqlite", tmp_path) as first:
        first.start()
        assert first.process is not None
        second_port = free_port()
        second = first.paigraph("serve", "--port", str(second_port))
        assert second.returncode == 1
        assert second.stderr.startswith(
            f"error: the docker backend cannot start: the simulator state directory "
            f"{first.state_dir} is in use by another paigraph server (pid {first.process.pid}, "
            f"serving {first.url}/graphql, command: "
        )
        assert f"serve --port {first.port}" in second.stderr
        assert "PAIGRAPH_SIMULATOR_STATE" in second.stderr and "Traceback" not in second.stderr
        assert "serving GraphQL" not in second.stderr
        # the first keeps serving; the second never listened
        assert httpx.get(f"{first.url}/healthz", timeout=5).status_code == 200
        assert first.client().execute("{ viewer { name } }")["viewer"]["name"]
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{second_port}/healthz", timeout=5)
        # a `paigraph run` on the same state directory still runs beside it
        config = tmp_path / "beside.yaml"
        config.write_text(
            job_config(name="beside", roles={"main": {"commands": ["echo beside the server"]}})
        )
        ran = first.paigraph("run", str(config))
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "job beside: SUCCEEDED" in ran.stdout
        # the lock goes with the process, however it ends: a killed server starts again
        first.kill()
        first.start()


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[tuple[Server, str]]:
    """A started server with a user; yields it and the user's token."""
    with served("sqlite", tmp_path) as server:
        added = server.paigraph("users", "add", "ann")
        assert added.returncode == 0, added.stderr
        server.start()
        yield server, added.stdout.strip()


@pytest.mark.docker
def test_client_commands_take_url_and_token_and_say_when_the_token_is_wrong(
    guarded: tuple[Server, str],
) -> None:
    server, token = guarded
    nowhere = {"PAIGRAPH_URL": "http://127.0.0.1:9"}  # the flags win over the environment
    for args in (("status", "nojob"), ("market", "list")):
        right = paigraph(*args, "--url", server.url, "--token", token, env=nowhere)
        assert "token" not in right.stderr and "cannot reach" not in right.stderr, right.stderr

        wrong = paigraph(*args, "--url", server.url, "--token", "not-a-token")
        assert wrong.returncode == 1
        assert wrong.stderr == (
            f"error: the server at {server.url} does not accept the token given (--token or "
            "PAIGRAPH_TOKEN): it is wrong, or was made for another server's database; "
            "paigraph users add prints a new one\n"
        )
        by_setting = paigraph(*args, env={"PAIGRAPH_URL": server.url, "PAIGRAPH_TOKEN": "nope"})
        assert by_setting.stderr == wrong.stderr

        missing = paigraph(*args, "--url", server.url)
        assert missing.returncode == 1
        assert missing.stderr == (
            f"error: the server at {server.url} wants a token: give it with --token or "
            "PAIGRAPH_TOKEN (paigraph users add prints one)\n"
        )
    # status of a job that does not exist, reached with the right token: said as such
    assert paigraph("status", "nojob", "--url", server.url, "--token", token).stderr == (
        "error: no job 'nojob'\n"
    )
