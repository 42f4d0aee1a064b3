"""A PostgreSQL server of a test's own (Debian's binaries, its own data directory and port), so
that a test may restart or stop it without touching the one other tests share."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.servers import free_port


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


class PrivatePostgres:
    """initdb, start, restart and stop of one server, run as the `postgres` user."""

    def __init__(self, bin_dir: Path, root: Path) -> None:
        self.bin = bin_dir
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/paigraph"

    def _run(self, *argv: str) -> str:
        done = subprocess.run(
            ["runuser", "-u", "postgres", "--", *argv],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
        return done.stdout

    def _ctl(self, *args: str) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        log = str(self.root / "postgres.log")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", log, *args)

    def create(self) -> None:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")
        self.start()
        self._run(
            str(self.bin / "psql"),
            *("-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"),
            *("-c", "CREATE DATABASE paigraph"),
        )

    def start(self) -> None:
        self._ctl("-w", "start")

    def stop(self) -> None:
        self._ctl("-w", "-m", "fast", "stop")

    def log(self) -> str:
        path = self.root / "postgres.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A fresh server, removed at the end; the test is skipped where none can run."""
    bin_dir = _binaries()
    if bin_dir is None or shutil.which("runuser") is None or os.geteuid() != 0:
        pytest.skip("needs Debian's postgresql package and root (to run it as user postgres)")
    root = Path(tempfile.mkdtemp(prefix="paigraph-pg-", dir="/tmp"))
    shutil.chown(root, "postgres", "postgres")
    server = PrivatePostgres(bin_dir, root)
    try:
        server.create()
        yield server
    finally:
        stop = [str(bin_dir / "pg_ctl"), "-D", str(server.data), "-m", "immediate", "stop"]
        subprocess.run(
            ["runuser", "-u", "postgres", "--", *stop],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)
