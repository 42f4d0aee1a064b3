"""The store: one object with every query, made from a URL or an engine."""

from __future__ import annotations

from sqlalchemy import Engine

from server.store.db import create_store_engine
from server.store.jobs import JobStore
from server.store.marketplace import MarketplaceStore
from server.store.migrate import migrate
from server.store.usage import UsageStore
from server.store.users import UserStore


class Store(UserStore, JobStore, MarketplaceStore, UsageStore):
    """Users, tokens, membership, jobs, instances and events, marketplace items and storages
    on one database, and what instances used (server.store.usage).

    Methods are synchronous and each runs its own transaction; call them from a worker thread
    in async code. They return the frozen values of `server.shapes.values`.
    """

    def close(self) -> None:
        self.engine.dispose()


def open_store(url: str | Engine | None = None, *, upgrade: bool = True) -> Store:
    """A store on `url` (argument, else $PAIGRAPH_DB, else the default SQLite file), its
    schema brought up to date first unless `upgrade` is False."""
    engine = url if isinstance(url, Engine) else create_store_engine(url)
    if upgrade:
        migrate(engine)
    return Store(engine)
