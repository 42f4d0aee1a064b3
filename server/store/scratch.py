"""Scratch PostgreSQL databases (the tests' and benchmarks' own): made, then dropped reliably.

`DROP DATABASE ... WITH (FORCE)` ends the sessions still connected, but a role without
superuser rights may not end an autovacuum worker, and a freshly filled database often has
one: the FORCE then fails. A plain DROP ends autovacuum workers itself and fails only while
sessions of ours are connected, so the two are tried in turn until one succeeds.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import errors, sql
from sqlalchemy.engine import make_url


@contextmanager
def scratch_database(server_url: str, prefix: str) -> Iterator[str]:
    """A new, empty database on the server of `server_url` (a PostgreSQL URL whose role may
    create databases), named `prefix` and a random suffix; its URL, in the driver spelling of
    `server_url`, is yielded, and the database is dropped when the block ends."""
    admin_url = _admin_url(server_url)
    name = f"{prefix}_{secrets.token_hex(6)}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        drop_database(admin_url, name)


def drop_database(admin_url: str, name: str, *, timeout: float = 30.0) -> None:
    """Drop database `name` (if it exists) through a connection to `admin_url`."""
    plain = sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name))
    forced = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    deadline = time.monotonic() + timeout
    with psycopg.connect(_admin_url(admin_url), autocommit=True) as admin:
        while True:
            try:
                admin.execute(plain)
                return
            except errors.ObjectInUse:  # sessions still connected: end them
                try:
                    admin.execute(forced)
                    return
                except errors.InsufficientPrivilege:  # one of them is an autovacuum worker
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)


def _admin_url(url: str) -> str:
    """`url` as psycopg takes it (no SQLAlchemy driver suffix such as +psycopg)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
