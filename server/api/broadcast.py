"""One frame per change for every subscriber alike, and a bounded buffer per connection.

Subscribers of `jobEvents` asking the same thing with the same permission class share one
subscription whose results are encoded once, so a change costs each of them a socket write; a
connection too slow to take its frames falls behind alone (FELL_BEHIND) and resumes from its
cursor. Groups, cursors and outboxes: docs/architecture.md ("Subscribers alike").
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from typing import Any, NamedTuple

import orjson
from graphql import (
    DocumentNode,
    FieldNode,
    GraphQLError,
    OperationDefinitionNode,
    OperationType,
    VariableNode,
    parse,
)
from graphql.error import GraphQLSyntaxError
from strawberry.types.execution import ExecutionResult, PreExecutionError
from strawberry.utils.aio import aclosing

log = logging.getLogger(__name__)

OUTBOX_LIMIT_BYTES = 256 * 1024  # frames queued for one connection before it has fallen behind
FELL_BEHIND = "FELL_BEHIND"
FELL_BEHIND_MESSAGE = (
    "this subscriber fell too far behind (its connection did not take the frames as fast as "
    "they came); subscribe again with `after` set to the cursor of the last event received"
)
# Root fields whose results depend only on the document, the variables and the permission
# class: their subscribers can share frames.
SHARED_FIELDS = frozenset({"jobEvents"})

Send = Callable[[str], Coroutine[Any, Any, None]]


def start_eagerly(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
    """Run `coro` now, up to where it first waits; None when it finished without waiting
    (what it raised is raised here), else a task that finishes it. A socket write that
    need not wait then costs no task and no turn of the loop."""
    try:
        waiting_on = coro.send(None)
    except StopIteration:
        return None
    return asyncio.get_running_loop().create_task(_finish(coro, waiting_on))


async def _finish(coro: Coroutine[Any, Any, None], waiting_on: Any) -> None:
    while True:
        try:
            if waiting_on is None:  # a bare yield (asyncio.sleep(0))
                await asyncio.sleep(0)
            else:  # as a task would: the future was yielded to be waited on, not awaited again
                waiting_on._asyncio_future_blocking = False
                await waiting_on
        except BaseException:  # the coroutine takes the outcome itself, below
            pass
        try:
            waiting_on = coro.send(None)
        except StopIteration:
            return


class Outbox:
    """A connection's frames not yet handed to its socket, in order, at most `limit` bytes
    (counted as characters) of them. `put` writes at once when nothing is waiting."""

    def __init__(self, send: Send, limit: int = OUTBOX_LIMIT_BYTES) -> None:
        self._send = send
        self.limit = limit
        self._queue: deque[tuple[object, str]] = deque()  # (whose, frame)
        self.backlog = 0
        self._writing: asyncio.Task[None] | None = None
        self._room: list[asyncio.Future[None]] = []
        self.lost = False  # the socket failed: what comes now goes nowhere

    def put(self, whose: object, frame: str, *, force: bool = False) -> bool:
        """Queue `frame` (of `whose`); False, queueing nothing, when it does not fit."""
        if self.lost:
            return True
        if self._writing is None:
            self._write(frame)
            return True
        if not force and self.backlog + len(frame) > self.limit:
            return False
        self._queue.append((whose, frame))
        self.backlog += len(frame)
        return True

    def drop(self, whose: object) -> None:
        """Forget the queued frames of `whose`."""
        kept = deque(item for item in self._queue if item[0] is not whose)
        if len(kept) != len(self._queue):
            self._queue = kept
            self.backlog = sum(len(frame) for _, frame in kept)
            self._wake()

    def room(self) -> asyncio.Future[None]:
        """Resolves once at most half the limit is queued."""
        waiter = asyncio.get_running_loop().create_future()
        if self.backlog <= self.limit // 2 or self.lost:
            waiter.set_result(None)
        else:
            self._room.append(waiter)
        return waiter

    def _write(self, frame: str) -> None:
        try:
            self._writing = start_eagerly(self._send(frame))
        except Exception as exc:  # the client left: its handler sees it and ends the operations
            self._fail(exc)
            return
        if self._writing is not None:
            self._writing.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is not None:
            self._fail(None if task.cancelled() else task.exception())
            return
        self._writing = None
        while self._queue and self._writing is None and not self.lost:
            _, frame = self._queue.popleft()
            self.backlog -= len(frame)
            self._write(frame)
        self._wake()

    def _fail(self, exc: BaseException | None) -> None:
        log.debug("a websocket write failed: %r", exc)
        self.lost = True
        self._writing = None
        self._queue.clear()
        self.backlog = 0
        self._wake()

    def _wake(self) -> None:
        if self._room and (self.backlog <= self.limit // 2 or self.lost):
            waiters, self._room = self._room, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)


class Member:
    """One subscription (an operation id on a connection) in a group. `ended` is called,
    before its last frame is queued, when the group ends it (so the id is free again)."""

    __slots__ = ("_prefix", "done", "ended", "group", "op_id", "outbox")

    def __init__(self, outbox: Outbox, op_id: str, ended: Callable[[], None]) -> None:
        self.outbox = outbox
        self.op_id = op_id
        self.ended = ended
        self._prefix = '{"id":' + orjson.dumps(op_id).decode() + ',"type":'
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.group: Group | None = None

    def frame(self, kind_and_payload: str) -> str:
        return self._prefix + kind_and_payload

    def finish(self, kind_and_payload: str) -> None:
        """End with this last frame (`complete` or `error`)."""
        if self.done.done():
            return
        self.ended()
        self.outbox.put(self, self.frame(kind_and_payload), force=True)
        self.done.set_result(None)

    def leave(self) -> None:
        """The operation stopped before the group ended it (completed by the client, or its
        connection went): nothing more goes out for it."""
        if self.group is not None:
            self.group.remove(self)
        self.outbox.drop(self)


Start = Callable[[], Awaitable[Any]]  # starts the shared operation: strawberry's stream
Position = Callable[[], str | None]  # the cursor of the newest event the operation yielded


class SharedKey(NamedTuple):
    """What makes frames alike (`alike`), and the cursor a subscription asks for (`at`), when
    the document gives `after` as the variable `after_variable`."""

    alike: Hashable
    at: object
    after_variable: str | None


class Group:
    """Subscribers of one operation alike: it runs once, each result is sent to them all."""

    def __init__(
        self, broadcasts: Broadcasts, key: SharedKey, start: Start, position: Position
    ) -> None:
        self.broadcasts = broadcasts
        self.key = key
        self.position = position
        self.members: dict[Member, None] = {}
        self._task = asyncio.get_running_loop().create_task(self._run(start))

    def add(self, member: Member) -> None:
        member.group = self
        self.members[member] = None
        self.broadcasts.members += 1

    def remove(self, member: Member) -> None:
        if self.members.pop(member, 0) is None:
            self.broadcasts.members -= 1
            member.group = None
        if not self.members:
            self.broadcasts.closed(self)
            self._task.cancel()

    async def _run(self, start: Start) -> None:
        try:
            source = await start()
            async with aclosing(source):
                first = True
                async for result in source:
                    if first and isinstance(result, PreExecutionError):
                        self._end('"error","payload":' + _errors(result.errors or []) + "}")
                        return
                    if not isinstance(result, ExecutionResult):
                        message = "Incremental delivery is not supported over graphql-transport-ws"
                        self._end('"error","payload":' + _errors([GraphQLError(message)]) + "}")
                        return
                    first = False
                    self._moved()
                    await self._send(_next_payload(result))
            self._end('"complete"}')
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("a shared subscription failed")
            self._end('"complete"}')

    def _moved(self) -> None:
        """Newcomers join at the cursor of the event just yielded, if they can say it."""
        at = self.position() if self.key.after_variable is not None else None
        if at is None:
            self.broadcasts.closed(self)
        else:
            self.broadcasts.move(self, self.key._replace(at=at))

    async def _send(self, payload: str) -> None:
        """Hand the frame to every member; wait only if no member has room left."""
        behind = []
        roomy = False
        body = '"next","payload":' + payload + "}"
        for member in tuple(self.members):
            outbox = member.outbox
            if not outbox.put(member, member.frame(body)):
                behind.append(member)
            elif outbox.backlog <= outbox.limit // 2:
                roomy = True
        for member in behind:
            self.remove(member)
            member.outbox.drop(member)
            member.finish('"error","payload":' + FELL_BEHIND_PAYLOAD + "}")
        while self.members and not roomy:
            waiters = [m.outbox.room() for m in self.members]
            _, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for waiter in pending:
                waiter.cancel()
            roomy = True

    def _end(self, last: str) -> None:
        self.broadcasts.closed(self)
        members, self.members = self.members, {}
        self.broadcasts.members -= len(members)
        for member in members:
            member.group = None
            member.finish(last)


FELL_BEHIND_PAYLOAD = orjson.dumps(
    [{"message": FELL_BEHIND_MESSAGE, "extensions": {"code": FELL_BEHIND}}]
).decode()


def _errors(errors: list[GraphQLError]) -> str:
    return orjson.dumps([error.formatted for error in errors]).decode()


def _next_payload(result: ExecutionResult) -> str:
    """The `payload` of a `next` message, as strawberry's graphql-transport-ws makes it."""
    payload: dict[str, Any] = {"data": result.data}
    if result.errors:
        payload["errors"] = [error.formatted for error in result.errors]
    if result.extensions:
        payload["extensions"] = result.extensions
    return orjson.dumps(payload).decode()


class Broadcasts:
    """The groups of a server that newcomers may join, by what makes frames alike and where
    the group stands."""

    def __init__(self) -> None:
        self._open: dict[tuple[Hashable, object], Group] = {}
        self.members = 0  # subscriptions served through groups now

    def join(self, key: SharedKey, member: Member, start: Start, position: Position) -> None:
        group = self._open.get((key.alike, key.at))
        if group is None:
            group = self._open[key.alike, key.at] = Group(self, key, start, position)
        group.add(member)

    def move(self, group: Group, key: SharedKey) -> None:
        """`group` now stands at `key.at` (unless another stands there already)."""
        self.closed(group)
        group.key = key
        self._open.setdefault((key.alike, key.at), group)

    def closed(self, group: Group) -> None:
        """`group` takes no newcomers any more."""
        where = (group.key.alike, group.key.at)
        if self._open.get(where) is group:
            del self._open[where]


def shared_key(
    query: str, variables: dict[str, object] | None, operation_name: str | None, permission: object
) -> SharedKey | None:
    """What makes two subscriptions' frames alike, when their root field is one whose frames
    may be shared (SHARED_FIELDS); None otherwise, or for a document strawberry should judge
    (it does not parse, names no such operation ...)."""
    root = _root_field(query, operation_name)
    if root is None or root[0] not in SHARED_FIELDS:
        return None
    after_variable = root[1]
    others = dict(variables or {})
    at = others.pop(after_variable, None) if after_variable is not None else None
    try:
        encoded = orjson.dumps(others, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None
    return SharedKey((query, operation_name, encoded, permission), at, after_variable)


@functools.lru_cache(maxsize=256)
def _root_field(query: str, operation_name: str | None) -> tuple[str, str | None] | None:
    """The subscription's root field, and the variable its `after` argument is given by."""
    try:
        document = parse(query)
    except (GraphQLSyntaxError, RecursionError):
        return None
    operation = _the_subscription(document, operation_name)
    field = _the_field(operation) if operation is not None else None
    if operation is None or field is None:
        return None
    return field.name.value, _after_variable(operation, field)


def _the_subscription(
    document: DocumentNode, operation_name: str | None
) -> OperationDefinitionNode | None:
    """The one operation `operation_name` picks in `document`, when it is a subscription."""
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    if operation_name is not None:
        operations = [o for o in operations if o.name and o.name.value == operation_name]
    if len(operations) != 1 or operations[0].operation is not OperationType.SUBSCRIPTION:
        return None
    return operations[0]


def _the_field(operation: OperationDefinitionNode) -> FieldNode | None:
    """The operation's root field, when it selects exactly one and gives it no directives."""
    selections = operation.selection_set.selections
    if len(selections) != 1 or not isinstance(selections[0], FieldNode):
        return None
    field = selections[0]
    return None if field.directives else field


def _after_variable(operation: OperationDefinitionNode, field: FieldNode) -> str | None:
    """The variable that gives `field` its `after` argument; None when it is given inline or
    the variable has a default (null and absent differ then)."""
    after = next((a.value for a in field.arguments or () if a.name.value == "after"), None)
    if not isinstance(after, VariableNode):
        return None
    defined = [
        v for v in operation.variable_definitions or () if v.variable.name.value == after.name.value
    ]
    if any(v.default_value is not None for v in defined):
        return None
    return after.name.value
