"""Docker's streaming stats API, one stream per container, all read on one thread.

`GET /containers/{id}/stats?stream=true` sends a JSON document about every second for as
long as the container runs; the one-shot call instead waits for two of them (a second or two
per container). The streams are read by one asyncio loop on a thread of its own, so 64
containers cost one thread, not 64; the latest figures of each are kept for the sampler.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import httpx

from backends.cgroup_usage import Counters


class StreamUnavailable(Exception):
    """The engine's address is one these streams cannot open (TLS, ssh)."""


def engine_transport(
    base_url: str, socket_path: str | None
) -> tuple[str, httpx.AsyncHTTPTransport]:
    """The base URL and transport reaching the engine the Docker SDK reaches."""
    if socket_path:
        return "http://docker", httpx.AsyncHTTPTransport(uds=socket_path)
    if base_url.startswith("http://"):
        return base_url, httpx.AsyncHTTPTransport()
    raise StreamUnavailable(
        f"the docker stats stream reads a local socket or a plain http engine, not {base_url}"
    )


def counters_of(stats: dict[str, Any]) -> tuple[Counters, float | None] | None:
    """The counters one stats document gives, and the cores used since the one before it
    (None for the first, which has no earlier one); None when the container is not running."""
    cpu = stats.get("cpu_stats") or {}
    usage = (cpu.get("cpu_usage") or {}).get("total_usage")
    memory = stats.get("memory_stats") or {}
    if usage is None or "usage" not in memory:
        return None
    inner = memory.get("stats") or {}
    inactive = inner.get("total_inactive_file", inner.get("inactive_file", 0))
    limit = memory.get("limit")
    networks = (stats.get("networks") or {}).values()
    counters = Counters(
        cpu_seconds=usage / 1e9,
        memory_bytes=max(int(memory["usage"]) - int(inactive), 0),
        memory_limit_bytes=int(limit) if limit else None,
        network_rx_bytes=sum(int(n.get("rx_bytes", 0)) for n in networks),
        network_tx_bytes=sum(int(n.get("tx_bytes", 0)) for n in networks),
    )
    return counters, _cores(stats, usage)


def _cores(stats: dict[str, Any], usage: int) -> float | None:
    before = ((stats.get("precpu_stats") or {}).get("cpu_usage") or {}).get("total_usage")
    read, preread = docker_time(stats.get("read")), docker_time(stats.get("preread"))
    if not before or read is None or preread is None or read <= preread:
        return None
    return max(usage - int(before), 0) / 1e9 / (read - preread).total_seconds()


def docker_time(value: object) -> datetime | None:
    """A time as the engine writes it (nanoseconds, Z); None for its zero time."""
    if not isinstance(value, str) or value.startswith("0001-"):
        return None
    head, _, rest = value.partition(".")
    digits = "".join(ch for ch in rest if ch.isdigit())[:6]
    try:
        return datetime.fromisoformat(f"{head}.{digits or '0'}+00:00")
    except ValueError:
        return None


class StatsStreams:
    """Keeps one stats stream open per watched container; `latest` gives what each last said."""

    def __init__(self, base_url: str, socket_path: str | None, api_version: str) -> None:
        self._base, self._transport = engine_transport(base_url, socket_path)
        self._version = api_version
        self._latest: dict[str, tuple[Counters, float | None]] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._client: httpx.AsyncClient | None = None
        self._thread = threading.Thread(target=self._run, name="docker-stats", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def watch(self, container_ids: Iterable[str]) -> None:
        """Stream exactly these containers from now on (new ones opened, others closed)."""
        wanted = set(container_ids)
        self._loop.call_soon_threadsafe(self._follow, wanted)

    def latest(self, container_id: str) -> tuple[Counters, float | None] | None:
        with self._lock:
            return self._latest.get(container_id)

    def close(self) -> None:
        async def stop() -> None:
            for task in self._tasks.values():
                task.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            if self._client is not None:
                await self._client.aclose()

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def _follow(self, wanted: set[str]) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(
                base_url=self._base, transport=self._transport, timeout=None
            )
        for gone in set(self._tasks) - wanted:
            self._tasks.pop(gone).cancel()
            with self._lock:
                self._latest.pop(gone, None)
        for new in wanted - set(self._tasks):
            self._tasks[new] = self._loop.create_task(self._stream(new))

    async def _stream(self, container_id: str) -> None:
        assert self._client is not None
        url = f"/v{self._version}/containers/{container_id}/stats"
        # the stream ends when the container stops, or when the engine goes away: then it is
        # opened again while the container is still watched
        while True:
            with contextlib.suppress(httpx.HTTPError):
                async with self._client.stream("GET", url, params={"stream": "true"}) as reply:
                    if reply.status_code == 404:
                        return
                    async for line in reply.aiter_lines():
                        if line.strip():
                            self._keep(container_id, line)
            await asyncio.sleep(5.0)

    def _keep(self, container_id: str, line: str) -> None:
        try:
            found = counters_of(json.loads(line))
        except (ValueError, TypeError, AttributeError):
            return
        if found is not None:
            with self._lock:
                self._latest[container_id] = found
