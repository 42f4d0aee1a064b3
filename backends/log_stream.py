"""Reading an instance's output as a stream of chunks: the loop both backends share.

Each backend keeps output in files of its own (the simulator's instance directory, the copies
the Kubernetes backend makes of pod logs) and says how to read them; how a stream starts (a
byte offset, or the last lines), follows new output and ends is the same for both.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from backends.base import InstanceKey, LogChunk

POLL_SECONDS = 0.2  # how often followed output is read again


async def stream_log(
    key: InstanceKey,
    *,
    read_from: Callable[[int], tuple[bytes, int]],
    tail_offset: Callable[[int], int],
    running: Callable[[], bool],
    offset: int = 0,
    tail: int | None = None,
    follow: bool = False,
) -> AsyncIterator[LogChunk]:
    """The output from `offset` (or from the start of its last `tail` lines); with `follow`,
    new output as it comes until the instance no longer runs. `read_from(offset)` gives a
    bounded piece and the offset after it (which may skip a dropped range). The readers block:
    they run in worker threads."""
    if tail is not None:
        offset = await asyncio.to_thread(tail_offset, tail)
    while True:
        data, after = await asyncio.to_thread(read_from, offset)
        if data:
            yield LogChunk(key=key, offset=offset, data=data.decode("utf-8", "replace"))
            offset = after
            continue
        if not follow or not running():
            # one last read: output written just before the end
            data, _ = await asyncio.to_thread(read_from, offset)
            if data:
                yield LogChunk(key=key, offset=offset, data=data.decode("utf-8", "replace"))
            return
        await asyncio.sleep(POLL_SECONDS)
