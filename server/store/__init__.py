"""Storage: users and tokens, virtual cluster membership, jobs, task instances, job events.

`open_store(url)` gives a `Store` on SQLite (the default, a file in the user's data directory)
or PostgreSQL, with the schema migrated. Its methods return the frozen values of
`server.shapes.values` and `server.shapes.marketplace_values`, and raise the errors of
`server.shapes.store_errors`.
"""

from server.store.db import ENV_VAR, create_store_engine, data_dir, database_url, session_scope
from server.store.migrate import current_revision, head_revision, migrate
from server.store.store import Store, open_store

__all__ = [
    "ENV_VAR",
    "Store",
    "create_store_engine",
    "current_revision",
    "data_dir",
    "database_url",
    "head_revision",
    "migrate",
    "open_store",
    "session_scope",
]
