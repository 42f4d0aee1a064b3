"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator


def utcnow() -> datetime:
    """Now, as the aware UTC datetime every time column stores (the store's own clock, so it
    need not import the backends' identical one)."""
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A point in time, always given back as an aware UTC datetime.

    SQLite keeps no time zone and would hand back naive values; PostgreSQL's timestamptz answers
    in the session's zone. Values are stored as UTC (naive on SQLite, where the text form then
    sorts in time order, which keyset pagination relies on) and come back with tzinfo=UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"a naive datetime cannot be stored (no time zone): {value!r}")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
