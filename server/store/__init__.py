"""Storage: users and tokens, virtual cluster membership, jobs, task instances, job events.

`open_store(url)` gives a `Store` on SQLite (the default, a file in the user's data directory)
or PostgreSQL, with the schema migrated. Its methods return the frozen values of `values.py`.
"""

from server.store.db import ENV_VAR, create_store_engine, data_dir, database_url, session_scope
from server.store.errors import (
    DatabaseError,
    InvalidValue,
    JobExists,
    NameInUse,
    StoreError,
    UnknownJob,
    UnknownUser,
    UserExists,
)
from server.store.migrate import current_revision, head_revision, migrate
from server.store.store import Store, open_store
from server.store.values import (
    INSTANCE_STATE,
    JOB_STATE,
    Event,
    Instance,
    Job,
    JobCursor,
    JobFilter,
    JobPage,
    JobWarning,
    NewEvent,
    StoredUsage,
    User,
)

__all__ = [
    "ENV_VAR",
    "INSTANCE_STATE",
    "JOB_STATE",
    "DatabaseError",
    "Event",
    "Instance",
    "InvalidValue",
    "Job",
    "JobCursor",
    "JobExists",
    "JobFilter",
    "JobPage",
    "JobWarning",
    "NameInUse",
    "NewEvent",
    "Store",
    "StoreError",
    "StoredUsage",
    "UnknownJob",
    "UnknownUser",
    "User",
    "UserExists",
    "create_store_engine",
    "current_revision",
    "data_dir",
    "database_url",
    "head_revision",
    "migrate",
    "open_store",
    "session_scope",
]
