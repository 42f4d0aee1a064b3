"""How much one request may ask for: page sizes, query shape, body size, subscriptions.

The numbers are generous for every query a client of this API needs (the deepest, a job's
instances' ports inside a job list, has depth 7) and small enough that one request cannot make
the server walk an unbounded graph or parse megabytes of query text.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from graphql import specified_rules
from strawberry.extensions import SchemaExtension

from server.api.document_shape import ShapeLimits, shape_rule
from server.api.errors import ApiError, MaskUnexpectedErrors
from server.api.operation_name import RequireOperationName
from server.api.timing import TimedOperations
from server.api.validation_cache import CheckedDocuments, Checker

MAX_FIRST = 100
DEFAULT_FIRST = 50
MAX_DEPTH = 12
MAX_ALIASES = 30  # per operation, each fragment's counted once for every place it is spread
# Fields one operation asks for once its fragments are expanded (server.api.document_shape):
# the web UI's largest query asks for a few hundred.
MAX_FIELDS = 10_000
MAX_TOKENS = 2000
MAX_BODY_BYTES = 1024 * 1024  # an HTTP request body, and each websocket message
# Nesting of a request's JSON (the request object is level 1, `variables` 2): job parameters
# and configs are shallow (configs are held to 64 levels too), and values nested hundreds deep
# would reach code that recurses.
MAX_JSON_DEPTH = 64
# Operations running at once over websockets (subscriptions, and queries while they run): a
# followed log or job costs the server a little on every event, and a client has no need for
# hundreds of them.
MAX_SUBSCRIPTIONS_PER_CONNECTION = 100
MAX_SUBSCRIPTIONS_PER_USER = 500  # across all of one user's connections


def page_size(first: int | None, *, argument: str = "first", default: int = DEFAULT_FIRST) -> int:
    """The page size to read; an ApiError naming the argument when it is out of range."""
    if first is None:
        return default
    if first < 0 or first > MAX_FIRST:
        raise ApiError(
            f"{argument} must be between 0 and {MAX_FIRST}, got {first}; "
            f"page through longer lists with `after`",
            "BAD_ARGUMENT",
        )
    return first


# Every rule a query is validated with: graphql-core's (the specification's, and its bound on
# introspection depth, `__schema { types { fields { type { fields ...`) and the shape limits,
# each linear in the document however its fragments expand.
VALIDATION_RULES = (
    *specified_rules,
    shape_rule(ShapeLimits(depth=MAX_DEPTH, fields=MAX_FIELDS, aliases=MAX_ALIASES)),
)
# One for the process: the answers it keeps are by schema and text.
CHECKER = Checker(VALIDATION_RULES, max_tokens=MAX_TOKENS)


def schema_extensions() -> list[Callable[[], SchemaExtension]]:
    """Factories: each operation gets its own extension objects."""
    return [
        TimedOperations,  # first: it times what the others do too
        partial(CheckedDocuments, CHECKER),  # before RequireOperationName, whose error stands
        RequireOperationName,
        MaskUnexpectedErrors,
    ]


def describe_body_limit(limit: int = MAX_BODY_BYTES) -> str:
    if limit % (1024 * 1024) == 0:
        return f"{limit // (1024 * 1024)} MiB"
    if limit % 1024 == 0:
        return f"{limit // 1024} KiB"
    return f"{limit} bytes"


class UserSubscriptions:
    """How many operations each user runs over websockets now, across their connections (one
    server process counts its own)."""

    def __init__(self, limit: int = MAX_SUBSCRIPTIONS_PER_USER) -> None:
        self.limit = limit
        self._running: dict[int, int] = {}

    @property
    def total(self) -> int:
        """Operations running over websockets now, all users together."""
        return sum(self._running.values())

    def running(self, user_id: int) -> int:
        return self._running.get(user_id, 0)

    def started(self, user_id: int) -> None:
        self._running[user_id] = self._running.get(user_id, 0) + 1

    def ended(self, user_id: int) -> None:
        left = self._running.get(user_id, 0) - 1
        if left > 0:
            self._running[user_id] = left
        else:
            self._running.pop(user_id, None)
