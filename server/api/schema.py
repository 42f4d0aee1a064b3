"""The GraphQL schema, assembled from its parts, for the executor the server is set to use.

`schema.graphql` is `schema_for(...).as_str()`, the same for either executor: `fast` (the
default, `server.api.execution`) or `standard` (graphql-core's own, independent of its
internals), chosen by `PAIGRAPH_EXECUTOR` or `paigraph serve --executor`; see
docs/architecture.md ("The fast executor").
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import strawberry
from graphql import GraphQLError
from strawberry.tools import merge_types
from strawberry.types import ExecutionContext, ExecutionResult
from strawberry.types.execution import PreExecutionError
from strawberry.types.graphql import OperationType

from server.api import root_query
from server.api.cluster import files, user_admin
from server.api.cluster import queries as cluster_queries
from server.api.errors import should_mask
from server.api.jobs import mutations as job_mutations
from server.api.jobs import queries as job_queries
from server.api.jobs.subscriptions import Subscription
from server.api.jobs.types import Job, User
from server.api.limits import CHECKER, schema_extensions
from server.api.marketplace import mutations as marketplace_mutations
from server.api.marketplace import queries as marketplace_queries
from server.api.marketplace.types import MarketplaceItem
from server.api.validation_cache import hand_over

EXECUTOR_ENV = "PAIGRAPH_EXECUTOR"
FAST, STANDARD = "fast", "standard"
EXECUTORS = (FAST, STANDARD)

# Each domain's Query and Mutation fields are a class of their own, which imports no other
# domain's; the schema's types are merged from them here, in this order, which is the order of
# the fields in schema.graphql.
Query = merge_types(
    "Query",
    (
        root_query.Query,
        job_queries.Query,
        cluster_queries.Query,
        marketplace_queries.Query,
        files.Query,
        user_admin.Query,
    ),
)
Mutation = merge_types(
    "Mutation",
    (
        job_mutations.Mutation,
        marketplace_mutations.Mutation,
        files.Mutation,
        user_admin.Mutation,
    ),
)


class Schema(strawberry.Schema):
    """strawberry's, with each text parsed and validated off the event loop first
    (server.api.validation_cache): a syntax error, or a check past its deadline, is answered
    here; anything else goes on to strawberry with its checked document."""

    async def _refusal(self, query: str | None) -> PreExecutionError | None:
        if not query:
            return None  # strawberry's own "no query" error
        try:
            checked = await CHECKER.check(self._schema, query)
        except GraphQLError as error:
            return PreExecutionError(data=None, errors=[error])
        if checked.document is None:
            return PreExecutionError(data=None, errors=list(checked.errors))
        hand_over(checked)
        return None

    async def execute(
        self,
        query: str | None,
        variable_values: dict[str, Any] | None = None,
        context_value: Any | None = None,
        root_value: Any | None = None,
        operation_name: str | None = None,
        allowed_operation_types: Iterable[OperationType] | None = None,
        operation_extensions: dict[str, Any] | None = None,
    ) -> ExecutionResult:
        """A single result (an HTTP request): never a subscription, which strawberry would
        run into a masked "Unexpected error."; asked for one, it raises
        InvalidOperationTypeError, which the endpoint answers with 400 (server.api.endpoint).
        Subscriptions are served over the websocket (`subscribe`)."""
        if allowed_operation_types is None:
            allowed = {OperationType.QUERY, OperationType.MUTATION}
        else:
            allowed = set(allowed_operation_types) - {OperationType.SUBSCRIPTION}
        refusal = await self._refusal(query)
        if refusal is not None:
            return refusal
        return await super().execute(
            query,
            variable_values=variable_values,
            context_value=context_value,
            root_value=root_value,
            operation_name=operation_name,
            allowed_operation_types=allowed,
            operation_extensions=operation_extensions,
        )

    async def stream(
        self,
        query: str | None,
        variable_values: dict[str, Any] | None = None,
        context_value: Any | None = None,
        root_value: Any | None = None,
        operation_name: str | None = None,
        operation_extensions: dict[str, Any] | None = None,
        allowed_operation_types: Iterable[OperationType] | None = None,
    ) -> Any:
        """An operation over the websocket (graphql-transport-ws runs every operation, queries
        too, through here)."""
        refusal = await self._refusal(query)
        if refusal is not None:
            return _single(refusal)
        return await super().stream(
            query,
            variable_values=variable_values,
            context_value=context_value,
            root_value=root_value,
            operation_name=operation_name,
            operation_extensions=operation_extensions,
            allowed_operation_types=allowed_operation_types,
        )

    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        """Log only faults of the server: a user's bad argument is answered, not logged."""
        super().process_errors([e for e in errors if should_mask(e)], execution_context)


async def _single(result: ExecutionResult) -> AsyncIterator[ExecutionResult]:
    yield result


def executor_setting(value: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The executor to use: `value`, else $PAIGRAPH_EXECUTOR, else `fast`. ValueError,
    naming the setting and the values it takes, for anything else."""
    if value is None:
        value = (os.environ if environ is None else environ).get(EXECUTOR_ENV, "")
    chosen = value.strip().lower() or FAST
    if chosen not in EXECUTORS:
        raise ValueError(
            f"{EXECUTOR_ENV} (or --executor) must be one of {', '.join(EXECUTORS)}, got {value!r}"
        )
    return chosen


def schema_for(executor: str = FAST) -> Schema:
    """The schema served with `executor` (see `executor_setting`); built once per process."""
    return _built(executor_setting(executor))


@functools.cache
def _built(executor: str) -> Schema:
    """The fast executor's module is imported only when it is asked for."""
    execution_context_class = None
    if executor == FAST:
        from server.api.execution import FastExecutionContext

        execution_context_class = FastExecutionContext
    return Schema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        types=[Job, User, MarketplaceItem],
        extensions=schema_extensions(),
        execution_context_class=execution_context_class,
    )


def current_schema() -> Schema:
    """The schema for the executor the environment chooses (`PAIGRAPH_EXECUTOR`)."""
    return schema_for(executor_setting())
