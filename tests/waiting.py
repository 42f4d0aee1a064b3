"""Waiting in tests for something that happens in another process or thread: poll a check until
it holds, and when it does not in time, fail saying what was awaited and what was seen last."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


class NotInTime(AssertionError):
    """What was awaited did not happen before the deadline."""


def until(check: Callable[[], T | None], what: str, timeout: float = 60, every: float = 0.2) -> T:
    """The first true result of `check`, polled every `every` seconds for `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() >= deadline:
            raise NotInTime(f"{what}: not within {timeout:g} s (last seen: {result!r})")
        time.sleep(every)
    return result


@overload
async def until_async(
    check: Callable[[], Awaitable[T | None]], what: str, timeout: float = ..., every: float = ...
) -> T: ...


@overload
async def until_async(
    check: Callable[[], T | None], what: str, timeout: float = ..., every: float = ...
) -> T: ...


async def until_async(
    check: Callable[[], Any], what: str, timeout: float = 60, every: float = 0.2
) -> Any:
    """`until` for a test running in an event loop: `check` may be a coroutine function."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if isinstance(result, Awaitable):
            result = await result
        if result:
            return result
        if time.monotonic() >= deadline:
            raise NotInTime(f"{what}: not within {timeout:g} s (last seen: {result!r})")
        await asyncio.sleep(every)


def until_notified(
    changed: threading.Condition, check: Callable[[], T | None], what: str, timeout: float = 60
) -> T:
    """`until` without polling, for a `check` on state that changes only under `changed`, which
    is notified on every change (as a fake server's objects are)."""
    with changed:
        if result := changed.wait_for(check, timeout):
            return result
        raise NotInTime(f"{what}: not within {timeout:g} s (last seen: {result!r})")


async def until_notified_async(
    changed: asyncio.Condition, check: Callable[[], T | None], what: str, timeout: float = 60
) -> T:
    """`until_notified` for a test running in an event loop, on an asyncio condition (as an
    event collector's list of events is)."""
    try:
        async with asyncio.timeout(timeout), changed:
            result: T | None = await changed.wait_for(check)
    except TimeoutError:
        raise NotInTime(f"{what}: not within {timeout:g} s (last seen: {check()!r})") from None
    assert result  # wait_for returns once the check holds
    return result
