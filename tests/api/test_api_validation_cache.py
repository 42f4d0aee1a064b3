"""Validation's answers are kept by query text (server.api.validation_cache), and nothing a
client reads changes for it: errors are located in the text that came, and a document of
several operations without a name is refused even when the cache knows it to be valid."""

from __future__ import annotations

import strawberry

from server.api.limits import schema_extensions
from server.api.operation_name import MULTIPLE_OPERATIONS
from server.api.schema import Schema


@strawberry.type
class Query:
    @strawberry.field
    def answer(self) -> int:
        return 42


schema = Schema(query=Query, extensions=schema_extensions())


def locations(text: str) -> list[tuple[int, int]]:
    result = schema.execute_sync(text)
    assert result.data is None and result.errors
    return [(at.line, at.column) for error in result.errors for at in error.locations or ()]


def test_errors_are_located_in_the_text_that_came() -> None:
    # The same syntax tree at the same offsets, the second field on another line.
    on_two_lines, on_one = "query Q { nope\nnone }", "query Q { nope none }"
    assert locations(on_two_lines) == [(1, 11), (2, 1)]
    assert locations(on_one) == [(1, 11), (1, 16)]
    assert locations(on_two_lines) == [(1, 11), (2, 1)]


def test_a_valid_document_of_two_operations_still_needs_a_name() -> None:
    two = "query A { answer } query B { answer }"
    for _ in range(2):
        assert schema.execute_sync(two, operation_name="B").data == {"answer": 42}
        unnamed = schema.execute_sync(two)
        assert unnamed.data is None
        assert [e.message for e in unnamed.errors or ()] == [MULTIPLE_OPERATIONS]
