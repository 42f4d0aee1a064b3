"""Credentials stored by earlier versions are taken out of every stored text (docs/security.md).

Literal registry credentials become references to secrets, and are masked in events and reasons.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-27 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from server.protocol.scrub import scrubbed_document, scrubbed_message, scrubbed_spec

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_jobs = sa.table(
    "jobs",
    sa.column("id", sa.String),
    sa.column("config", sa.Text),
    sa.column("spec", sa.Text),
    sa.column("state_reason", sa.Text),
)
_events = sa.table(
    "job_events",
    sa.column("id", sa.BigInteger),
    sa.column("job_id", sa.String),
    sa.column("message", sa.Text),
)
_instances = sa.table(
    "task_instances",
    sa.column("id", sa.BigInteger),
    sa.column("job_id", sa.String),
    sa.column("state_reason", sa.Text),
    sa.column("exit_reason", sa.Text),
)
_versions = sa.table(
    "marketplace_item_versions", sa.column("id", sa.Integer), sa.column("content", sa.Text)
)


def upgrade() -> None:
    connection = op.get_bind()
    if connection.dialect.name == "sqlite":
        connection.exec_driver_sql("PRAGMA secure_delete = ON")
    for job_id, config, spec, reason in connection.execute(
        sa.select(_jobs.c.id, _jobs.c.config, _jobs.c.spec, _jobs.c.state_reason)
    ).all():
        kept = scrubbed_document(config or "")
        new_spec, in_spec = scrubbed_spec(spec or "", kept.credentials)
        values = kept.values | in_spec
        if not values:
            continue
        connection.execute(
            _jobs.update()
            .where(_jobs.c.id == job_id)
            .values(config=kept.text, spec=new_spec, state_reason=scrubbed_message(reason, values))
        )
        _scrub_rows(connection, _events, job_id, ("message",), values)
        _scrub_rows(connection, _instances, job_id, ("state_reason", "exit_reason"), values)
    for version_id, content in connection.execute(
        sa.select(_versions.c.id, _versions.c.content)
    ).all():
        kept = scrubbed_document(content or "")
        if kept.credentials:
            connection.execute(
                _versions.update().where(_versions.c.id == version_id).values(content=kept.text)
            )


def _scrub_rows(
    connection: sa.Connection,
    table: sa.TableClause,
    job_id: str,
    columns: tuple[str, ...],
    values: set[str],
) -> None:
    rows = connection.execute(
        sa.select(table.c.id, *(table.c[c] for c in columns)).where(table.c.job_id == job_id)
    ).all()
    for row in rows:
        texts = dict(zip(columns, row[1:], strict=True))
        changed = {c: scrubbed_message(t, values) for c, t in texts.items()}
        if changed != texts:
            connection.execute(table.update().where(table.c.id == row[0]).values(**changed))


def downgrade() -> None:
    pass  # what was masked is gone
