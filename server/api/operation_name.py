"""A document with several operations needs `operationName`.

GraphQL says which operation to run must be named when a document holds more than one.
strawberry, asked without a name, takes the first operation's name as the one asked for, so
such a request would silently run the first operation. This extension fails it instead, with
the specification's error, before validation and execution.
"""

from __future__ import annotations

from collections.abc import Iterator

from graphql import DocumentNode, GraphQLError, OperationDefinitionNode
from strawberry.extensions import SchemaExtension

MULTIPLE_OPERATIONS = "Must provide operation name if query contains multiple operations."


class RequireOperationName(SchemaExtension):
    """Refuses a document of several operations sent without `operationName`."""

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        # strawberry's `operation_name` falls back to the first operation's; only the name the
        # client sent tells the two apart.
        asked = getattr(context, "_provided_operation_name", None)
        document = context.graphql_document
        if asked is None and document is not None and _operations(document) > 1:
            context.pre_execution_errors = [GraphQLError(MULTIPLE_OPERATIONS)]
        yield


def _operations(document: DocumentNode) -> int:
    return sum(isinstance(d, OperationDefinitionNode) for d in document.definitions)
