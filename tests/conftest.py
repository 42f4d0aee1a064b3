"""Test-wide fixtures: async tests run on asyncio (through anyio's pytest plugin); `db_url`
runs a test on SQLite and, when PAIGRAPH_TEST_PG is set, on a fresh PostgreSQL database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from server.store import Store, open_store
from tests.store_support import KINDS, fresh_database


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
