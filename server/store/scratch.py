"""Dropping a scratch PostgreSQL database (the tests' and benchmarks' own), reliably.

`DROP DATABASE ... WITH (FORCE)` ends the sessions still connected, but a role without
superuser rights may not end an autovacuum worker, and a freshly filled database often has
one: the FORCE then fails. A plain DROP ends autovacuum workers itself and fails only while
sessions of ours are connected, so the two are tried in turn until one succeeds.
"""

from __future__ import annotations

import time

import psycopg
from psycopg import errors, sql


def drop_database(admin_url: str, name: str, *, timeout: float = 30.0) -> None:
    """Drop database `name` (if it exists) through a connection to `admin_url`."""
    plain = sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name))
    forced = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    deadline = time.monotonic() + timeout
    with psycopg.connect(admin_url, autocommit=True) as admin:
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
