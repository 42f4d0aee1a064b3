"""Errors a client should read as they are, and the rule that masks every other one.

Resolvers raise `ApiError` for what the caller did wrong (a bad argument, an unknown job, a
missing token); its message reaches the client unchanged. Anything else that escapes a resolver
is a fault of ours: the client sees "Unexpected error." and the details stay in the log.
"""

from __future__ import annotations

from graphql import GraphQLError
from strawberry.extensions import MaskErrors

from server.api.ids import BadId
from server.store.availability import UNAVAILABLE_MESSAGE, database_unavailable

MASKED_MESSAGE = "Unexpected error."


class ApiError(Exception):
    """A top-level GraphQL error meant for the user; `code` goes into the error's extensions."""

    def __init__(self, message: str, code: str = "BAD_REQUEST") -> None:
        super().__init__(message)
        self.code = code
        self.extensions = {"code": code}


class Unauthorized(ApiError):
    """No valid credentials: HTTP answers 401, a websocket is closed with 4401."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "UNAUTHENTICATED")


def should_mask(error: GraphQLError) -> bool:
    """Mask errors raised by our code unless they were meant for the user.

    Errors without an original exception come from parsing and validation (syntax, unknown
    fields, query limits) and explain themselves, so they are kept too.
    """
    original = error.original_error
    return original is not None and not isinstance(original, ApiError | BadId | GraphQLError)


class MaskUnexpectedErrors(MaskErrors):
    """strawberry's MaskErrors with `should_mask`, checking each result for errors by reading
    the attribute: the parent's check against a runtime Protocol cost more than the rest of
    masking a subscription event, once per event and subscriber."""

    def __init__(self) -> None:
        super().__init__(should_mask_error=should_mask, error_message=MASKED_MESSAGE)

    def _process_errors(self, errors: list[GraphQLError]) -> list[GraphQLError]:
        return super()._process_errors([_explained(error) for error in errors])

    def _process_result(self, result: object) -> None:
        errors = getattr(result, "errors", None)
        if errors:
            result.errors = self._process_errors(errors)  # type: ignore[attr-defined]


def _explained(error: GraphQLError) -> GraphQLError:
    """A database that cannot be used now is told as such (the client may try again), not
    masked as a fault of ours."""
    original = error.original_error
    if original is None or not database_unavailable(original):
        return error
    told = ApiError(UNAVAILABLE_MESSAGE, "DATABASE_UNAVAILABLE")
    return GraphQLError(
        UNAVAILABLE_MESSAGE,
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        original_error=told,
        extensions=told.extensions,
    )
