"""The fast executor gives exactly what graphql-core's own executor gives.

Each query runs on one schema twice, once with strawberry's default executor and once with
`FastExecutionContext`; data and errors (messages, paths) must be the same, including the
cases the fast path hands back to graphql-core: nulls where none are allowed, values a scalar
refuses, errors raised inside list items, awaitable values, fragments and directives.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import AsyncGenerator
from enum import Enum
from typing import Any

import pytest
import strawberry

from server.api.execution import FastExecutionContext
from server.api.shared_values import shared_value


@strawberry.enum
class Color(Enum):
    RED = "red"
    GREEN = "green"


@strawberry.type
class Leaf:
    label: str
    numbers: list[int]
    maybe_numbers: list[int | None] | None
    color: Color


@strawberry.type
class Item:
    name: str
    count: int
    nickname: str | None
    color: Color
    leaves: list[Leaf]
    maybe_leaves: list[Leaf | None] | None

    @strawberry.field
    def shout(self) -> str:
        if self.name == "boom":
            raise ValueError("no shouting at boom")
        return self.name.upper()

    @strawberry.field
    async def later(self) -> int:
        await asyncio.sleep(0)
        return self.count * 2

    @strawberry.field
    async def failing_later(self) -> int:
        await asyncio.sleep(0)
        raise RuntimeError(f"{self.name} failed later")


def leaf(label: Any = "a", numbers: Any = (1, 2), color: Any = Color.RED) -> Leaf:
    return Leaf(label=label, numbers=list(numbers), maybe_numbers=[1, None], color=color)


def item(name: str = "x", count: Any = 1, **kw: Any) -> Item:
    values: dict[str, Any] = {
        "name": name,
        "count": count,
        "nickname": None,
        "color": Color.GREEN,
        "leaves": [leaf(), leaf("b", (3,))],
        "maybe_leaves": [leaf(), None],
    }
    values.update(kw)
    return Item(**values)


ITEMS: dict[str, list[Item]] = {
    "plain": [item("x"), item("y", 2, nickname="why")],
    "null_name": [item("x"), item(None)],  # type: ignore[arg-type]
    "huge_int": [item("x", 2**40)],
    "bad_int": [item("x", "seven")],
    "bad_enum": [item("x", color="purple")],
    "null_leaf_item": [item("x", leaves=[leaf(), None])],
    "null_number": [item("x", leaves=[leaf(numbers=(1, None))])],
    "boom": [item("x"), item("boom")],
    "tuple_leaves": [item("x", leaves=(leaf(), leaf("c")))],
    "empty": [],
}


@strawberry.type
class Query:
    @strawberry.field
    def items(self, kind: str) -> list[Item]:
        return ITEMS[kind]

    @strawberry.field
    def maybe_items(self, kind: str) -> list[Item | None] | None:
        return ITEMS[kind]  # type: ignore[return-value]

    @strawberry.field
    async def async_items(self, kind: str) -> list[Item]:
        await asyncio.sleep(0)
        return ITEMS[kind]


class Unreadable:
    """An Item whose `nickname` raises when read (as a property that fails would)."""

    name, count, color, leaves, maybe_leaves = "u", 1, Color.GREEN, [], None

    @property
    def nickname(self) -> str:
        raise RuntimeError("nickname unreadable")


@strawberry.type
class UnreadableQuery(Query):
    @strawberry.field
    def unreadable(self) -> Item | None:
        return Unreadable()  # type: ignore[return-value]

    @strawberry.field
    def unreadables(self) -> list[Item | None]:
        return [item("x"), Unreadable()]  # type: ignore[list-item]


default_schema = strawberry.Schema(query=Query)
fast_schema = strawberry.Schema(query=Query, execution_context_class=FastExecutionContext)

FIELDS = "name count nickname color shout leaves { label numbers maybeNumbers color }"
QUERIES = [
    f"{{ items(kind: $kind) {{ {FIELDS} }} }}",
    f"{{ maybeItems(kind: $kind) {{ {FIELDS} maybeLeaves {{ label }} }} }}",
    f"{{ asyncItems(kind: $kind) {{ {FIELDS} later }} }}",
    "{ maybeItems(kind: $kind) { name failingLater } }",
    "{ items(kind: $kind) { __typename n: name ...F leaves { ... on Leaf { color } } } }"
    " fragment F on Item { count c2: count }",
    "{ items(kind: $kind) { name @skip(if: true) count @include(if: false) color } }",
    "{ items(kind: $kind) { leaves @include(if: true) { label } } }",
]


def run(schema: strawberry.Schema, query: str, kind: str) -> dict[str, Any]:
    text = "query Q($kind: String!) " + query
    result = asyncio.run(schema.execute(text, variable_values={"kind": kind}))
    errors = sorted(
        (str(e.message), tuple(e.path or ()))
        for e in result.errors or []  # order of errors from concurrent fields may differ
    )
    return {"data": result.data, "errors": errors}


@pytest.mark.parametrize("kind", sorted(ITEMS))
@pytest.mark.parametrize("query", QUERIES, ids=range(len(QUERIES)))
def test_the_fast_executor_answers_as_graphql_core_does(query: str, kind: str) -> None:
    assert run(fast_schema, query, kind) == run(default_schema, query, kind)


def test_the_comparison_sees_errors_and_nulls() -> None:
    """The cases above do reach the error paths: otherwise the comparison proves little."""
    boom = run(fast_schema, QUERIES[0], "boom")  # a non-null error spreads up to the root
    assert boom == {"data": None, "errors": [("no shouting at boom", ("items", 1, "shout"))]}
    null_name = run(fast_schema, QUERIES[1], "null_name")
    assert null_name["data"]["maybeItems"][1] is None
    assert any("non-nullable" in message for message, _ in null_name["errors"])
    huge = run(fast_schema, QUERIES[0], "huge_int")
    assert huge["data"] is None and "non 32-bit" in huge["errors"][0][0]


@pytest.fixture
def executed_fields(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The fields that take graphql-core's per-field path (`Type.field`), as they do."""
    calls: list[str] = []
    original = FastExecutionContext.execute_field

    def counting(self: FastExecutionContext, parent_type: Any, *args: Any) -> Any:
        calls.append(f"{parent_type.name}.{args[1][0].node.name.value}")
        return original(self, parent_type, *args)

    monkeypatch.setattr(FastExecutionContext, "execute_field", counting)
    return calls


def test_plain_fields_do_not_take_graphql_cores_per_field_path(executed_fields: list[str]) -> None:
    """Only the fields with resolvers (items, shout) reach execute_field; the attribute
    fields and the leaves' lists are completed in place."""
    result = run(fast_schema, QUERIES[0], "plain")
    assert result["errors"] == [] and len(result["data"]["items"]) == 2
    assert sorted(executed_fields) == ["Item.shout", "Item.shout", "Query.items"]


@shared_value
@strawberry.type
class Reading:
    sensor: str
    values: list[int]
    color: Color


READINGS = [Reading(sensor="a", values=[1, 2], color=Color.RED)]


@strawberry.type
class ReadingQuery:
    @strawberry.field
    def reading(self, index: int) -> Reading:
        return READINGS[index]


def test_a_shared_value_is_completed_once_and_each_result_is_its_own() -> None:
    """The second completion of the same value with the same parsed query comes from the
    memo (a changed copy of the first result does not leak into it); another value with the
    same query is completed anew."""
    schema = strawberry.Schema(query=ReadingQuery, execution_context_class=FastExecutionContext)
    query = "{ reading(index: $i) { sensor values color } }"
    text = "query Q($i: Int!) " + query
    first = asyncio.run(schema.execute(text, variable_values={"i": 0}))
    assert first.errors is None and first.data is not None
    first.data["reading"]["sensor"] = "changed by a client of the result"
    again = asyncio.run(schema.execute(text, variable_values={"i": 0}))
    assert again.data == {"reading": {"sensor": "a", "values": [1, 2], "color": "RED"}}
    READINGS.append(Reading(sensor="b", values=[], color=Color.GREEN))
    other = asyncio.run(schema.execute(text, variable_values={"i": 1}))
    assert other.data == {"reading": {"sensor": "b", "values": [], "color": "GREEN"}}


@strawberry.type
class ReadingSubscription:
    @strawberry.subscription
    async def readings(self, count: int) -> AsyncGenerator[Reading, None]:
        for reading in STREAM[:count]:
            yield reading


STREAM = [
    Reading(sensor="a", values=[1, 2], color=Color.RED),
    Reading(sensor=None, values=[3], color=Color.GREEN),  # type: ignore[arg-type]
    Reading(sensor="c", values=[4, None], color=Color.RED),  # type: ignore[list-item]
    Reading(sensor="d", values=[], color=Color.GREEN),
]
SUBSCRIPTIONS = [
    "{ readings(count: $n) { sensor values color } }",
    "{ r: readings(count: $n) { s: sensor color } }",
    "{ readings(count: $n) { __typename sensor } }",
    "{ readings(count: $n) { ...R } } fragment R on Reading { values }",
    "{ readings(count: $n) { sensor @skip(if: true) color } }",
    "{ readings(count: $n) { ... on Reading { sensor } color } }",
]


def follow(schema: strawberry.Schema, query: str) -> list[dict[str, Any]]:
    async def results() -> list[dict[str, Any]]:
        text = "subscription S($n: Int!) " + query
        stream = await schema.subscribe(text, variable_values={"n": len(STREAM)})
        found = []
        async for result in stream:  # type: ignore[union-attr]
            errors = sorted((e.message, tuple(e.path or ())) for e in result.errors or [])
            found.append({"data": result.data, "errors": errors})
        return found

    return asyncio.run(results())


@pytest.mark.parametrize("query", SUBSCRIPTIONS, ids=range(len(SUBSCRIPTIONS)))
def test_subscription_events_answer_as_graphql_core_does(query: str) -> None:
    """Events that are shared values skip the root field's execution; the results, errors
    included (a null sensor, a null in a list of non-null ints), are graphql-core's."""
    default = strawberry.Schema(query=ReadingQuery, subscription=ReadingSubscription)
    fast = strawberry.Schema(
        query=ReadingQuery,
        subscription=ReadingSubscription,
        execution_context_class=FastExecutionContext,
    )
    expected = follow(default, query)
    assert len(expected) == len(STREAM)
    assert follow(fast, query) == expected


def test_plain_subscription_events_are_not_executed_field_by_field(
    executed_fields: list[str],
) -> None:
    fast = strawberry.Schema(
        query=ReadingQuery,
        subscription=ReadingSubscription,
        execution_context_class=FastExecutionContext,
    )
    results = follow(fast, SUBSCRIPTIONS[0])
    assert results[0] == {
        "data": {"readings": {"sensor": "a", "values": [1, 2], "color": "RED"}},
        "errors": [],
    }
    # only the events with a null where none is allowed take graphql-core's way
    assert executed_fields == [
        "ReadingSubscription.readings",
        "Reading.sensor",
        "ReadingSubscription.readings",
        "Reading.values",
    ]


@strawberry.type
class Chunk:
    offset: int
    data: str


@strawberry.type
class LongSubscription:
    @strawberry.subscription
    async def chunks(self, count: int) -> AsyncGenerator[Chunk, None]:
        for n in range(count):
            yield Chunk(offset=n, data="x")

    @strawberry.subscription
    async def readings(self, count: int) -> AsyncGenerator[Reading, None]:
        for n in range(count):
            yield Reading(sensor=str(n), values=[n], color=Color.RED)


@pytest.mark.parametrize(
    "query",
    ["{ chunks(count: 4000) { offset data } }", "{ readings(count: 4000) { sensor values } }"],
    ids=["chunks", "shared values"],
)
def test_a_long_subscription_does_not_grow(query: str) -> None:
    """Thousands of events on one subscription (a log followed for hours) leave memory as it
    was after the first thousand: nothing per event stays behind."""
    schema = strawberry.Schema(
        query=ReadingQuery,
        subscription=LongSubscription,
        execution_context_class=FastExecutionContext,
    )

    async def growth() -> int:
        stream = await schema.subscribe("subscription " + query)
        seen = 0
        start = 0
        end = 0
        async for result in stream:  # type: ignore[union-attr]
            assert result.errors is None
            seen += 1
            if seen == 1000:
                tracemalloc.start()
                start = tracemalloc.get_traced_memory()[0]
            elif seen == 4000:  # measured while the subscription still runs
                end = tracemalloc.get_traced_memory()[0]
                tracemalloc.stop()
        assert seen == 4000
        return end - start

    assert asyncio.run(growth()) < 256 * 1024


def test_an_attribute_that_raises_is_that_field_s_error_not_its_parent_s() -> None:
    """Read in place, the error once escaped to the parent: the parent was nulled and the
    error carried its path. It belongs to the field, which alone is null."""
    fast = strawberry.Schema(query=UnreadableQuery, execution_context_class=FastExecutionContext)
    standard = strawberry.Schema(query=UnreadableQuery)
    query = "{ unreadable { name nickname } unreadables { name nickname } }"
    answers = []
    for schema in (fast, standard):
        result = asyncio.run(schema.execute(query))
        errors = sorted((e.message, tuple(e.path or ())) for e in result.errors or [])
        answers.append({"data": result.data, "errors": errors})
    assert answers[0] == answers[1]
    assert answers[0] == {
        "data": {
            "unreadable": {"name": "u", "nickname": None},
            "unreadables": [{"name": "x", "nickname": None}, {"name": "u", "nickname": None}],
        },
        "errors": [
            ("nickname unreadable", ("unreadable", "nickname")),
            ("nickname unreadable", ("unreadables", 1, "nickname")),
        ],
    }
