"""Telling a database that cannot answer now from one that refuses a request.

A restart of PostgreSQL, a lost connection, a SQLite file on a full or read-only disk: the
write is worth making again once the database is back, and a client is told so in plain words.
A violated constraint or a bad value is not, and keeps its own error.
"""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError, OperationalError

UNAVAILABLE_MESSAGE = "the database cannot be used right now; try again shortly"


def database_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the database could not be reached or could not write."""
    if isinstance(exc, OperationalError):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated
