"""The GraphQL schema, assembled from its parts. Field names follow the contract in DESIGN.md
("GraphQL contract"); `schema.graphql` at the repository root is `schema.as_str()`."""

from __future__ import annotations

import strawberry
from graphql import GraphQLError
from strawberry.types import ExecutionContext

from server.api.errors import should_mask
from server.api.execution import FastExecutionContext
from server.api.limits import schema_extensions
from server.api.marketplace_mutations import Mutation  # the job mutations and the marketplace's
from server.api.marketplace_queries import Query  # the job queries and the marketplace's
from server.api.marketplace_types import MarketplaceItem
from server.api.subscriptions import Subscription
from server.api.types import Job, User


class Schema(strawberry.Schema):
    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        """Log only faults of the server: a user's bad argument is answered, not logged."""
        super().process_errors([e for e in errors if should_mask(e)], execution_context)


schema = Schema(
    query=Query,
    mutation=Mutation,
    subscription=Subscription,
    types=[Job, User, MarketplaceItem],
    extensions=schema_extensions(),
    execution_context_class=FastExecutionContext,
)
