"""Each query text parsed and validated once, off the event loop, within a deadline.

The validation rules are fixed at start and clients send the same few texts again and again,
so each text's document and errors are kept and a known text costs a lookup; a new one is
checked in a small pool of its own within `PAIGRAPH_QUERY_CHECK_SECONDS`, never blocking the
loop. Details: docs/architecture.md ("Query shape and the checked-text cache").
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from graphql import DocumentNode, GraphQLError, GraphQLSchema, parse
from graphql.language import Node
from graphql.validation import ASTValidationRule, ValidationRule
from graphql.validation.validate import ValidationAbortedError
from strawberry.extensions import SchemaExtension
from strawberry.schema.schema import validate_document

REMEMBERED = 256  # texts whose answers are kept
REMEMBERED_TEXT = 100_000  # characters; a longer text is checked each time it comes
CHECKING_THREADS = 2
DEADLINE_ENV = "PAIGRAPH_QUERY_CHECK_SECONDS"
DEFAULT_DEADLINE = 5.0


def check_deadline() -> float:
    """Seconds a request waits for its text to be parsed and validated:
    $PAIGRAPH_QUERY_CHECK_SECONDS when it is a positive number, else 5."""
    try:
        value = float(os.environ.get(DEADLINE_ENV, ""))
    except ValueError:
        return DEFAULT_DEADLINE
    return value if value > 0 else DEFAULT_DEADLINE


@dataclass(frozen=True, slots=True)
class Checked:
    """One text's answer: its document (None when it does not parse) and the errors."""

    schema: GraphQLSchema
    text: str
    document: DocumentNode | None
    errors: list[GraphQLError]
    stopped: bool = False  # validation was stopped at the deadline: never kept


class Checker:
    """Parses and validates texts for one set of rules, remembering the answers."""

    def __init__(
        self,
        rules: Collection[type[ASTValidationRule]],
        max_tokens: int,
        remembered: int = REMEMBERED,
    ) -> None:
        self.rules = (*rules, _Deadline)
        self.max_tokens = max_tokens
        self.remembered = remembered
        self._known: OrderedDict[tuple[GraphQLSchema, str], Checked] = OrderedDict()
        self._running: dict[tuple[GraphQLSchema, str], asyncio.Future[Checked]] = {}
        self._pool = ThreadPoolExecutor(CHECKING_THREADS, thread_name_prefix="query-check")

    def known(self, schema: GraphQLSchema, text: str) -> Checked | None:
        found = self._known.get((schema, text))
        if found is not None:
            self._known.move_to_end((schema, text))
        return found

    async def check(self, schema: GraphQLSchema, text: str) -> Checked:
        """`text`'s answer, from memory or from a worker thread; GraphQLError (code
        QUERY_CHECK_TIMEOUT) when the thread has not answered within the deadline. The same
        text asked for again while it is being checked waits for the same check."""
        found = self.known(schema, text)
        if found is not None:
            return found
        deadline = check_deadline()
        key = (schema, text)
        running = self._running.get(key)
        if running is None or running.get_loop() is not asyncio.get_running_loop():
            work = self._pool.submit(self.check_now, schema, text, time.monotonic() + deadline)
            running = asyncio.wrap_future(work)
            self._running[key] = running
            running.add_done_callback(lambda done: self._finished(key, done))
        try:
            checked = await asyncio.wait_for(asyncio.shield(running), deadline)
        except TimeoutError:
            raise _too_slow(deadline) from None
        if checked.stopped:  # the thread saw the deadline pass before the event loop did
            raise _too_slow(deadline)
        return checked

    def _finished(self, key: tuple[GraphQLSchema, str], done: asyncio.Future[Checked]) -> None:
        """On the event loop: a check has ended, whether or not anyone still waits for it."""
        if self._running.get(key) is done:
            del self._running[key]
        if not done.cancelled() and done.exception() is None:
            self._remember(done.result())

    def check_now(self, schema: GraphQLSchema, text: str, until: float | None = None) -> Checked:
        """Parse and validate `text` in this thread, validation stopping at its next node
        once the monotonic clock passes `until`."""
        try:
            document = parse(text, max_tokens=self.max_tokens)
        except GraphQLError as error:
            return Checked(schema, text, None, [error])
        _until.at = until
        try:
            errors = validate_document(schema, document, self.rules)
        finally:
            _until.at = None
        stopped = any(e.message == _STOPPED for e in errors)
        return Checked(schema, text, document, errors, stopped)

    def _remember(self, checked: Checked) -> None:
        if checked.stopped or len(checked.text) > REMEMBERED_TEXT:
            return
        self._known[(checked.schema, checked.text)] = checked
        self._known.move_to_end((checked.schema, checked.text))
        while len(self._known) > self.remembered:
            self._known.popitem(last=False)


def _too_slow(deadline: float) -> GraphQLError:
    return GraphQLError(
        f"the server could not check this query within {deadline:g} seconds (its limit for "
        f"parsing and validating a query, {DEADLINE_ENV}); send a smaller query, or split it",
        extensions={"code": "QUERY_CHECK_TIMEOUT"},
    )


_STOPPED = "validation stopped: it took longer than its deadline"
_until = threading.local()  # the deadline of the validation running in this thread


class _Deadline(ValidationRule):
    """Stops validation at the next node once its thread's deadline has passed."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.until: float | None = getattr(_until, "at", None)

    def enter(self, _node: Node, *_args: Any) -> None:
        if self.until is not None and time.monotonic() > self.until:
            raise ValidationAbortedError(_STOPPED)


# The answer `Schema.execute` or `Schema.stream` got for the operation this task runs now.
_current: ContextVar[Checked | None] = ContextVar("paigraph_checked_document", default=None)


def hand_over(checked: Checked) -> None:
    """Make `checked` the answer `CheckedDocuments` gives strawberry in this task."""
    _current.set(checked)


class CheckedDocuments(SchemaExtension):
    """Gives strawberry the document and validation errors `Checker.check` found for this
    operation's text, so it parses and validates nothing itself. Must come before any
    extension that fails the operation in `on_validate` (`RequireOperationName`), whose error
    then stands. A text that comes by another way (`execute_sync`) is checked here, in this
    thread."""

    def __init__(self, checker: Checker) -> None:
        super().__init__()
        self.checker = checker
        self.checked: Checked | None = None

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        schema = context.schema._schema
        text = context.query
        if text is not None and context.graphql_document is None:
            checked = _current.get()
            if checked is None or checked.schema is not schema or checked.text != text:
                checked = self.checker.known(schema, text) or self.checker.check_now(schema, text)
            self.checked = checked
            if checked.document is not None:
                context.graphql_document = checked.document
            # else strawberry parses the text again and reports its syntax error: only
            # `execute_sync` gets here, `Schema.execute` and `stream` answer it themselves
        yield

    def on_validate(self) -> Iterator[None]:
        if self.checked is not None and self.checked.document is not None:
            # a list of our own: anything added to it must not change the kept answer
            self.execution_context.pre_execution_errors = list(self.checked.errors)
        yield
