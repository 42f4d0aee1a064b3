"""Waiting in tests for something that happens in another process or thread: poll a check until
it holds, and when it does not in time, fail saying what was awaited and what was seen last."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class NotInTime(AssertionError):
    """What was awaited did not happen before the deadline."""


def until(check: Callable[[], T], what: str, timeout: float = 60, every: float = 0.2) -> T:
    """The first true result of `check`, polled every `every` seconds for `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() >= deadline:
            raise NotInTime(f"{what}: not within {timeout:g} s (last seen: {result!r})")
        time.sleep(every)
    return result


async def until_async(
    check: Callable[[], T | Awaitable[T]], what: str, timeout: float = 60, every: float = 0.2
) -> T:
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
