"""The README's two commands as a newcomer on Debian or Ubuntu runs them: scripts/test and
scripts/serve on the distribution's own python3 (which refuses `pip install` into itself),
from a copy of the repository with nothing installed and no ../shared beside it. Both must
make the project's virtual environment .venv, install into it, and the second must reuse it.
scripts/test without PostgreSQL or the corpus runs the rest and says what it left out, except
under CI=true, where both are required.

This installs paigraph's dependencies from PyPI into a fresh environment: a few minutes.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.servers import ROOT, free_port
from tests.waiting import until

# one worker for the module, so that the copy and its environment are made once
pytestmark = [pytest.mark.docker, pytest.mark.venv, pytest.mark.xdist_group("repository-copy")]

SYSTEM_PYTHON = Path("/usr/bin/python3")
INSTALL_TIMEOUT = 1200


def system_python_makes_venvs() -> bool:
    """Debian's python3 with python3-venv (ensurepip) installed."""
    if not SYSTEM_PYTHON.exists():
        return False
    check = [str(SYSTEM_PYTHON), "-c", "import ensurepip, venv"]
    return subprocess.run(check, capture_output=True, check=False).returncode == 0


def copy_of_the_repository(destination: Path) -> Path:
    """The repository's files as they are on disk (committed or not), without anything
    installed or generated: what a fresh clone holds."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def debian_environment(home: Path) -> dict[str, str]:
    """A login-like environment whose first python3 is Debian's, with no virtual
    environment, PYTHONPATH, paigraph setting or pytest-xdist worker inherited from the test
    run."""
    bin_dir = home / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python3").symlink_to(SYSTEM_PYTHON)
    dropped = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "CI", "PYENV_VERSION")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in dropped and not k.startswith(("PAIGRAPH_", "PYTEST_XDIST_"))
    }
    env["PATH"] = f"{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return env


@contextmanager
def serve(repository: Path, env: dict[str, str], work: Path, port: int) -> Iterator[Path]:
    """scripts/serve on `port` until the block ends; yields the file its output goes to."""
    log = work / "serve.log"
    settings = {
        "PAIGRAPH_DB": f"sqlite:///{work / 'paigraph.db'}",
        "PAIGRAPH_SIMULATOR_STATE": str(work / "state"),
    }
    with log.open("wb") as output:
        process = subprocess.Popen(
            ["./scripts/serve", "--port", str(port)],
            cwd=repository,
            env=env | settings,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield log
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@dataclass(frozen=True)
class Clone:
    """A copy of the repository with no ../shared beside it, and a Debian environment."""

    repository: Path
    env: dict[str, str]
    work: Path

    def test_script(self, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
        """./scripts/test ARGS with more environment `settings`."""
        return subprocess.run(
            ["./scripts/test", *args],
            cwd=self.repository,
            env=self.env | settings,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
            check=False,
        )


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Clone:
    if not system_python_makes_venvs():
        pytest.skip(f"needs Debian's {SYSTEM_PYTHON} with venv: apt-get install python3-venv")
    work = tmp_path_factory.mktemp("clone")
    return Clone(copy_of_the_repository(work / "paigraph"), debian_environment(work / "home"), work)


def test_scripts_test_then_serve_run_on_debian_python_in_one_virtual_environment(
    clone: Clone, tmp_path: Path
) -> None:
    # scripts/test makes .venv with Debian's python3, installs into it, lints and runs pytest
    tested = clone.test_script(
        "tests/cli/test_cli.py",
        "-k",
        "version",
        PAIGRAPH_SKIP_POSTGRES="1",
        PAIGRAPH_SKIP_DOCKER="1",
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "making the virtual environment" in tested.stderr
    # pip's own progress: a line per package it installs
    assert "Successfully installed" in tested.stderr, tested.stderr
    assert "1 passed" in tested.stdout
    venv = clone.repository / ".venv"
    base = [str(venv / "bin" / "python"), "-c", "import sys; print(sys.base_prefix)"]
    assert subprocess.run(base, capture_output=True, text=True, check=True).stdout == "/usr\n"
    assert (venv / "bin" / "paigraph").exists()

    # scripts/serve reuses it as it is (pyproject.toml has not changed) and serves
    port = free_port()
    with serve(clone.repository, clone.env, tmp_path, port) as log:
        until(lambda: answers(port), f"scripts/serve answering on {port}", timeout=120)
        said = log.read_text()
    assert "making the virtual environment" not in said and "installing" not in said, said
    # each step says when it starts, so a long first run is never silent
    for step in ("step 1 of 3: the virtual environment", "step 2 of 3: the web UI"):
        assert f"==> {step}" in said, said
    assert f"==> step 3 of 3: paigraph serve --port {port}" in said, said
    assert f"serving GraphQL on http://127.0.0.1:{port}/graphql" in said


def without_postgres(clone: Clone) -> dict[str, str]:
    """The clone's environment where no PostgreSQL can be found or started."""
    fake = clone.work / "no-postgres"
    fake.mkdir(exist_ok=True)
    lister = fake / "pg_lsclusters"
    lister.write_text("#!/bin/sh\nexit 1\n")
    lister.chmod(0o755)
    return {"PATH": f"{fake}:{clone.env['PATH']}", "PAIGRAPH_SKIP_DOCKER": "1"}


def test_scripts_test_without_postgres_or_the_corpus_runs_the_rest_and_says_what_it_left_out(
    clone: Clone,
) -> None:
    tested = clone.test_script("tests/cli/test_cli.py", "-rs", **without_postgres(clone))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    note = "Left out: the PostgreSQL cases of the store and API tests (pytest -m 'not postgres'):"
    assert tested.stderr.count(note) == 2  # before the tests, and again after them
    assert "set PAIGRAPH_TEST_PG to a database URL" in tested.stderr
    # the tests that read ../shared/corpus are skipped, naming the folder; the others pass
    missing = clone.repository.parent / "shared" / "corpus"
    assert f"needs {missing} (../shared beside the repository), which is missing" in tested.stdout
    assert re.search(r"\d+ passed, \d+ skipped", tested.stdout), tested.stdout


def test_scripts_test_in_ci_requires_postgres_and_the_corpus(clone: Clone) -> None:
    no_postgres = clone.test_script("tests/cli/test_cli.py", CI="true", **without_postgres(clone))
    assert no_postgres.returncode == 1
    assert "No PostgreSQL for the tests, and CI must run them." in no_postgres.stderr
    python = str(clone.repository / ".venv" / "bin" / "python")
    no_corpus = subprocess.run(
        [python, "-m", "pytest", "-q", "tests/cli/test_cli.py", "-k", "corpus_files_used_here"],
        cwd=clone.repository,
        env=clone.env | {"CI": "true"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert no_corpus.returncode == 1, no_corpus.stdout
    assert "1 failed" in no_corpus.stdout
