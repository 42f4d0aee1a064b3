"""Test-wide fixtures: async tests run on asyncio (through anyio's pytest plugin); `db_url`
runs a test on SQLite and, when PAIGRAPH_TEST_PG is set, on a fresh PostgreSQL database;
`owner` names a simulator owner of the test's own, whose containers and networks are removed
at the end.

Under pytest-xdist (scripts/test runs two workers) each worker has its own ports, names and
databases (tests.worker_support); a test marked `alone` runs while no other worker runs a test,
for the few that load the whole machine or time something the other worker's load would slow.

Tests marked `shared(folder)` read ../shared/<folder>: without it they are skipped with the
folder named, so that a clone on its own runs everything else; under CI=true (where the folder
is always there) they run, and fail, instead."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.store import Store, open_store
from tests.browser_support import Site, chromium, site_on
from tests.corpus import missing
from tests.seed_images import seed_images_in_use
from tests.simulated import remove_leftovers
from tests.store_support import KINDS, SCRATCH, fresh_database
from tests.worker_support import unique_name
from tests.xdist_groups import add_group_suffixes, group_modules_with_module_fixtures


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own group suffixes
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep each xdist_group, and each module whose tests share a module fixture, on one worker
    (tests/xdist_groups.py), and skip the tests whose ../shared folder is missing, saying which
    (not under CI)."""
    group_modules_with_module_fixtures(items)
    add_group_suffixes(config, items)
    if in_ci():
        return
    for item in items:
        for marker in item.iter_markers("shared"):
            absent = missing(marker.args[0])
            if absent is not None:
                reason = f"needs {absent} (../shared beside the repository), which is missing"
                item.add_marker(pytest.mark.skip(reason=reason), append=False)
                break


@pytest.fixture(autouse=True)
def _alone_when_marked(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Under pytest-xdist, hold the run's lock shared for a test, or alone for one marked
    `alone`. A turnstile taken first lets a waiting `alone` test in before the next shared one
    (flock alone would let the other worker's tests starve it)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    run = tmp_path_factory.getbasetemp().parent  # the workers' base directories share it
    mode = fcntl.LOCK_EX if request.node.get_closest_marker("alone") else fcntl.LOCK_SH
    turnstile = os.open(run / "alone.turnstile", os.O_RDWR | os.O_CREAT, 0o600)
    lock = os.open(run / "alone.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, mode)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield
    finally:
        os.close(lock)  # closing releases the lock
        os.close(turnstile)


@pytest.fixture(scope="session")
def seed_images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The seeds' images (tests/seed_images.py), built once for the session and removed at its
    end unless another session on this machine (the other worker, another run) still uses
    them."""
    with seed_images_in_use(tmp_path_factory.mktemp("seed-image")):
        yield


@pytest.fixture(scope="session", autouse=True)
def _scratch_databases_dropped() -> Iterator[None]:
    """The PostgreSQL databases of the tests are dropped in the background (tests/store_support.py):
    the session ends once every one of them is gone."""
    yield
    SCRATCH.finish()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=KINDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    opened = open_store(db_url)
    yield opened
    opened.close()


@pytest.fixture
def owner() -> Iterator[str]:
    name = unique_name("test")
    yield name
    remove_leftovers(name)


def pytest_report_header() -> str:
    """Which GraphQL executor the API tests run under (scripts/test runs them under both)."""
    from server.api.schema import executor_setting

    return f"GraphQL executor: {executor_setting()} (PAIGRAPH_EXECUTOR)"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The browser tests' server, one per module (a module may define its own `site`)."""
    with site_on(tmp_path_factory.mktemp("web")) as opened:
        yield opened


@pytest.fixture(scope="module")
def web_browser(site: Site) -> Iterator[Any]:
    """Debian's chromium, headless, for a module of browser tests."""
    with chromium() as opened:
        yield opened
