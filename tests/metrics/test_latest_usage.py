"""`app.state.latest_usage()`, what the Prometheus endpoint reads: the last round's sample of
each running instance with its job's user, on a real Docker backend; an ended job's instances
drop out."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.docker import DockerBackend
from server.api.ids import parse_global_id
from server.app.asgi import create_app
from server.events import bus_for
from server.jobs.service import JobService
from server.store import open_store
from tests.api_support import data, serving
from tests.simulated import job_config, remove_leftovers, settings
from tests.waiting import until_async

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

SUBMIT = """mutation($config: String!) { submitJob(input: {config: $config}) {
  job { id } errors { message } } }"""
STOP = "mutation($id: ID!) { stopJob(input: {id: $id}) { errors { message } } }"


async def test_latest_usage_gives_each_running_instance_with_its_user(
    tmp_path: Path, owner: str
) -> None:
    db_url = f"sqlite:///{tmp_path / 'paigraph.db'}"
    store = open_store(db_url)
    bus = bus_for(db_url)
    backend = DockerBackend(settings(tmp_path / "state"), owner=owner)
    app = create_app(JobService(store, backend, bus), usage_interval=1)
    latest = app.state.latest_usage
    assert latest() == []  # not started yet
    _, token = store.create_user("ann")
    try:
        async with serving(app) as client:
            config = job_config(
                name="pair", roles={"main": {"instances": 2, "commands": ["sleep 600"]}}
            )
            submitted = (await data(client, SUBMIT, {"config": config}, token=token))["submitJob"]
            assert submitted["errors"] == []
            job_id = parse_global_id(submitted["job"]["id"])[1]

            def both() -> list | None:
                found = [(s, user) for s, user in latest() if s.key.job_id == job_id]
                return found if len(found) == 2 else None

            found = await until_async(both, "both instances measured", timeout=60)
            assert {(s.key.role, s.key.index) for s, _ in found} == {("main", 0), ("main", 1)}
            assert {user for _, user in found} == {"ann"}
            assert all(s.memory_limit_bytes == 128 << 20 for s, _ in found)

            await data(client, STOP, {"id": submitted["job"]["id"]}, token=token)
            await until_async(
                lambda: not [s for s, _ in latest() if s.key.job_id == job_id],
                "the stopped job's instances gone from the latest round",
                timeout=60,
            )
        assert latest() == []  # stopped with the app
    finally:
        await backend.close()
        await bus.close()
        store.close()
        remove_leftovers(owner)
