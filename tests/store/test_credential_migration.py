"""Credentials an earlier version stored as written are scrubbed by migration 0005, on real
SQLite and PostgreSQL databases: the job's config, resolved spec and event messages, and the
versions of published items. The database is left as an earlier version would have left it
(the schema of revision 0003 is the same tables) and migrated again."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from alembic import command
from sqlalchemy import select, text
from sqlalchemy.engine import make_url

from server.marketplace.service import ItemFields, MarketplaceService
from server.protocol import parse_document
from server.store import Store, create_store_engine, migrate
from server.store.marketplace_tables import MarketplaceVersionRow
from server.store.migrate import alembic_config
from server.store.tables import EventRow, JobRow
from tests.marketplace_support import image_item
from tests.store_support import submit

PASSWORD = "old-Registry-Pa55"
USERNAME = "robot-account"
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

OLD_CONFIG = f"""\
protocolVersion: 2
name: old_private
type: job
prerequisites:
  - name: private
    type: dockerimage
    uri: registry.example.org:5000/team/trainer:1
    auth:
      username: {USERNAME}  # the robot
      password: "{PASSWORD}"
      registryuri: registry.example.org:5000
taskRoles:
  main:
    dockerImage: private
    resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: 0}}
    commands: [echo hi]
"""

OLD_COMPONENT = f"""\
name: busybox
type: dockerimage
uri: registry.example.org:5000/team/busybox:1
auth: {{username: {USERNAME}, password: {PASSWORD}}}
"""


def _plant_old_rows(store: Store) -> str:
    """A job and an item version as an earlier version stored them: credentials as written."""
    owner, _ = store.create_user("ann")
    job, _ = submit(store, owner.id, "old_private", T0)
    with store.engine.connect() as connection:  # closed: an open read would hold the log
        spec = json.loads(connection.execute(select(JobRow.spec)).scalar_one())
    spec["source"] = OLD_CONFIG
    spec["prerequisites"] = [
        {
            "name": "private",
            "type": "dockerimage",
            "uri": ["registry.example.org:5000/team/trainer:1"],
            "auth": {"username": USERNAME, "password": PASSWORD},
        }
    ]
    published = MarketplaceService(store).publish(owner, image_item(), ItemFields())
    assert published.item is not None
    with store.engine.begin() as connection:
        connection.execute(
            JobRow.__table__.update().values(  # type: ignore[attr-defined]
                config=OLD_CONFIG,
                spec=json.dumps(spec),
                state_reason=f"could not be pulled as {USERNAME} with {PASSWORD}",
            )
        )
        connection.execute(
            EventRow.__table__.insert().values(  # type: ignore[attr-defined]
                job_id=job.id,
                sequence=99,
                at=T0,
                type="STATE",
                message=f"image could not be pulled as {USERNAME}: bad password {PASSWORD}",
            )
        )
        connection.execute(
            MarketplaceVersionRow.__table__.update().values(  # type: ignore[attr-defined]
                content=OLD_COMPONENT
            )
        )
        # the schema as 0004 left it: later migrations taken back with their own downgrades
        config = alembic_config()
        config.attributes["connection"] = connection
        command.downgrade(config, "0004")
    return job.id


def test_migration_0005_scrubs_credentials_stored_by_earlier_versions(db_url: str) -> None:
    migrate(db_url)
    engine = create_store_engine(db_url)
    try:
        store = Store(engine)
        job_id = _plant_old_rows(store)
        # as at a server's start, the migration runs before the store opens the database
        engine.dispose()
        migrate(db_url)

        config = store.job_config(job_id) or ""
        assert PASSWORD not in config and USERNAME not in config
        assert 'password: "<% $secrets.private-password %>"' in config
        assert config.endswith('secrets: "******"\n')  # the values must be given again
        # what was kept still reads as the job it was, with references in place of values
        reread = parse_document(config.replace('secrets: "******"\n', ""))
        assert reread.ok, reread.issues
        with engine.connect() as connection:
            everything = " ".join(
                str(value)
                for table in ("jobs", "job_events", "marketplace_item_versions")
                for row in connection.execute(text(f"SELECT * FROM {table}"))
                for value in row
            )
        assert PASSWORD not in everything and USERNAME not in everything
        assert "bad password ******" in everything
        assert "<% $secrets.busybox-password %>" in everything

        engine.dispose()
        migrate(db_url)  # and again: nothing left to do, nothing changes
        assert store.job_config(job_id) == config
    finally:
        engine.dispose()
    url = make_url(db_url)
    if url.get_backend_name() == "sqlite":
        files = [p for p in Path(url.database or "").parent.iterdir() if p.is_file()]
        assert [p.name for p in files if PASSWORD.encode() in p.read_bytes()] == []
