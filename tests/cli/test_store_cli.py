"""`paigraph users add` and `paigraph serve --db`, run as a user runs them, and database URLs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from server.shapes.store_errors import DatabaseError
from server.store import (
    create_store_engine,
    current_revision,
    database_url,
    head_revision,
    open_store,
)
from tests import servers
from tests.servers import Server, free_port
from tests.store_support import fresh_database

TOKEN = re.compile(r"pgt_[A-Za-z0-9_-]{43}\n")


def paigraph(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return servers.paigraph(*args, env={"NO_COLOR": "1", **(env or {})}, timeout=60)


def test_users_add_prints_only_the_token_and_the_token_authenticates(db_url: str) -> None:
    done = paigraph("users", "add", "alice", "--admin", "--db", db_url)
    assert done.returncode == 0, done.stderr
    assert TOKEN.fullmatch(done.stdout)
    plain = paigraph("users", "add", "bob", "--db", db_url)
    assert plain.returncode == 0, plain.stderr

    store = open_store(db_url)
    try:
        alice = store.user_for_token(done.stdout.strip())
        bob = store.user_for_token(plain.stdout.strip())
        assert alice is not None and (alice.name, alice.admin) == ("alice", True)
        assert bob is not None and (bob.name, bob.admin) == ("bob", False)
    finally:
        store.close()

    again = paigraph("users", "add", "alice", "--db", db_url)
    assert (again.returncode, again.stdout) == (1, "")
    assert "error: a user named 'alice' exists already" in again.stderr
    assert "Traceback" not in again.stderr


def test_users_add_grants_virtual_clusters_and_keeps_local_reserved(db_url: str) -> None:
    done = paigraph("users", "add", "carl", "--vc", "research", "--vc", "gpu", "--db", db_url)
    assert done.returncode == 0, done.stderr
    assert TOKEN.fullmatch(done.stdout)
    store = open_store(db_url)
    try:
        carl = store.user_for_token(done.stdout.strip())
        assert carl is not None
        assert store.user_vcs(carl.id) == ["gpu", "research"]
    finally:
        store.close()
    reserved = paigraph("users", "add", "local", "--db", db_url)
    assert (reserved.returncode, reserved.stdout) == (1, "")
    assert "reserved" in reserved.stderr


def test_users_add_finds_the_database_in_paigraph_db_or_the_data_directory(
    tmp_path: Path,
) -> None:
    from_env = paigraph(
        "users", "add", "ann", env={"PAIGRAPH_DB": f"sqlite:///{tmp_path / 'e.db'}"}
    )
    assert from_env.returncode == 0, from_env.stderr
    assert (tmp_path / "e.db").is_file()

    data_home = tmp_path / "data"
    default = paigraph("users", "add", "ann", env={"XDG_DATA_HOME": str(data_home)})
    assert default.returncode == 0, default.stderr
    store = open_store(f"sqlite:///{data_home / 'paigraph' / 'paigraph.db'}", upgrade=False)
    try:
        user = store.user_for_token(default.stdout.strip())
        assert user is not None and user.name == "ann"
    finally:
        store.close()


@pytest.mark.parametrize("command", [["users", "add", "ann"], ["serve", "--port", "1"]])
def test_a_bad_database_url_is_one_clear_error(command: list[str], tmp_path: Path) -> None:
    done = paigraph(*command, "--db", "mysql://root:pw@localhost/paigraph")
    assert (done.returncode, done.stdout) == (1, "")
    assert "unsupported database URL scheme 'mysql'" in done.stderr
    assert "Traceback" not in done.stderr
    assert "pw@" not in done.stderr


def test_serve_migrates_the_database_before_it_serves(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'served.db'}"
    server = Server(url, tmp_path / "state", tmp_path / "serve.log")
    try:
        server.start()  # it answers only once it has migrated
        engine = create_store_engine(url)
        assert current_revision(engine) == head_revision() is not None
        engine.dispose()
    finally:
        server.stop()


# --- URLs --------------------------------------------------------------------------------------


def test_the_default_database_is_a_file_in_the_users_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PAIGRAPH_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert database_url() == f"sqlite:///{tmp_path / 'xdg' / 'paigraph' / 'paigraph.db'}"
    assert (tmp_path / "xdg" / "paigraph").is_dir()

    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = tmp_path / "home" / ".local" / "share" / "paigraph" / "paigraph.db"
    assert database_url() == f"sqlite:///{expected}"
    assert expected.parent.is_dir()

    monkeypatch.setenv("PAIGRAPH_DB", "sqlite:///from-env.db")
    assert database_url() == "sqlite:///from-env.db"
    assert database_url("sqlite:///given.db") == "sqlite:///given.db"


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+psycopg"])
def test_postgresql_urls_use_psycopg_3(scheme: str) -> None:
    engine = create_store_engine(f"{scheme}://u:p@127.0.0.1:5432/db", check=False)
    assert (engine.dialect.name, engine.dialect.driver) == ("postgresql", "psycopg")
    engine.dispose()


@pytest.mark.postgres
def test_a_postgres_scheme_url_opens_the_store(tmp_path: Path) -> None:
    with fresh_database("postgres", tmp_path) as url:
        store = open_store(url.replace("postgresql://", "postgres://", 1))
        try:
            user, token = store.create_user("pat")
            assert store.user_for_token(token) == user
        finally:
            store.close()


def test_unusable_urls_say_what_is_wrong(tmp_path: Path) -> None:
    closed = free_port()
    missing = tmp_path / "missing"
    cases = {
        "mysql://u:pw@localhost/db": "unsupported database URL scheme 'mysql'",
        "postgresql+psycopg2://u:pw@localhost/db": "unsupported database URL scheme",
        "just words": "'just words' is not a database URL",
        f"postgresql://u:pw@127.0.0.1:{closed}/db": f"cannot open the database postgresql://u:***@127.0.0.1:{closed}/db",
        f"sqlite:///{missing / 'x.db'}": f"the directory {missing} does not exist",
    }
    for url, message in cases.items():
        with pytest.raises(DatabaseError) as caught:
            create_store_engine(url)
        assert message in str(caught.value)
        assert ":pw@" not in str(caught.value)
    with pytest.raises(DatabaseError, match="refused"):
        create_store_engine(f"postgresql://u:pw@127.0.0.1:{closed}/db")
