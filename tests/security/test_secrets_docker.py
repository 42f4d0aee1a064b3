"""A job's secrets reach its commands on the Docker simulator, and no file the simulator keeps
nor any row of the database holds them: only the job's own output, which printed one."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from backends.secrets_env import secret_variable
from server.jobs import JobState
from server.store import Store
from tests.job_engine.test_job_service import follow, service_on, submitted, user
from tests.service_support import job_config

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


def files_holding(root: Path, value: str) -> list[str]:
    """The files under `root` whose bytes contain `value`."""
    needle = value.encode()
    return [
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and needle in p.read_bytes()
    ]


def rows_holding(store: Store, value: str) -> list[str]:
    """The tables with a row whose text contains `value`, on SQLite and PostgreSQL alike."""
    found = []
    with store.engine.connect() as connection:
        for table in inspect(store.engine).get_table_names():
            rows = connection.execute(text(f'SELECT * FROM "{table}"')).all()
            if any(value in str(tuple(row)) for row in rows):
                found.append(table)
    return found


async def test_a_secret_reaches_the_command_and_is_kept_in_no_file_or_row(
    db_url: str, tmp_path: Path, owner: str
) -> None:
    token, other = f"tok-{secrets.token_hex(8)}", f"pw-{secrets.token_hex(8)}"
    config = json.loads(
        job_config(
            {"main": {"commands": ['echo "token=<% $secrets.api-token %>"', "echo done"]}},
            name="secretive",
        )
    )
    config["secrets"] = {"api-token": token, "unused": other}
    state = tmp_path / "state"
    async with service_on(db_url, state, owner) as service:
        ann = user(service.store, "ann", "default")
        async with service.bus.subscribe() as notices:
            job = await submitted(service, ann, json.dumps(config))
            job, _ = await follow(service.store, notices, job.id)
        assert job.state is JobState.SUCCEEDED, job.state_reason
        log = "".join([chunk.data async for chunk in service.logs(job.id, "main", 0)])
        assert f"token={token}\n" in log
        assert files_holding(state, token) == ["attempts/" + _log_path(state, job.id)]
        assert files_holding(state, other) == []
        kept = "".join(p.read_text() for p in state.rglob("entrypoint.sh"))
        assert secret_variable("api-token") in kept  # the command refers to it by name only
        assert rows_holding(service.store, token) == []
        assert rows_holding(service.store, other) == []


def _log_path(state: Path, job_id: str) -> str:
    (log,) = (state / "attempts").rglob("output.log")
    assert job_id in str(log)
    return str(log.relative_to(state / "attempts"))


def test_every_secret_name_has_a_variable_of_its_own() -> None:
    names = ["a-b", "a_b", "a.b", "a_2Db", "A", "a", "x1"]
    variables = [secret_variable(name) for name in names]
    assert len(set(variables)) == len(names)
    assert all(v.replace("_", "").isalnum() and v.isascii() for v in variables)
