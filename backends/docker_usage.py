"""What the simulator's containers use, measured the cheaper way the host allows.

`cgroup` reads the kernel's files, `stream` Docker's streaming stats API, and `auto` (the
default) the files where it can and the API for the rest, so a server in its own container still
measures (docs/metrics.md, PAIGRAPH_DOCKER_USAGE; bench/sampling.py).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from backends.base import InstanceKey, utcnow
from backends.cgroup_usage import CgroupFiles, CgroupReader, Counters
from backends.docker_specs import GPUS
from backends.docker_stats_stream import StatsStreams, StreamUnavailable, docker_time
from backends.nvidia_smi import GpuUse, instance_gpu_use, query_gpus
from backends.usage import UsageSample

log = logging.getLogger(__name__)

METHOD_ENV = "PAIGRAPH_DOCKER_USAGE"
METHODS = ("auto", "cgroup", "stream")


def usage_method(environ: dict[str, str] | None = None) -> str:
    """The way chosen by $PAIGRAPH_DOCKER_USAGE (auto when unset); ValueError naming the
    setting and its values for anything else."""
    value = (os.environ if environ is None else environ).get(METHOD_ENV, "").strip().lower()
    chosen = value or "auto"
    if chosen not in METHODS:
        raise ValueError(f"{METHOD_ENV} must be one of {', '.join(METHODS)}, got {value!r}")
    return chosen


@dataclass(frozen=True)
class Watched:
    """A running instance's container, and whether its node's GPUs are the host's real ones."""

    key: InstanceKey
    container_id: str
    real_gpus: bool = False


@dataclass
class _Seen:
    files: CgroupFiles | None
    started: datetime | None
    gpus: tuple[int, ...] = ()  # the host GPUs it was given; none when simulated
    before: tuple[float, float] | None = None  # (cpu seconds, monotonic time) of the last read


class DockerUsage:
    """Samples the containers it is given; `sample` blocks (call it on a worker thread)."""

    def __init__(
        self,
        api: Any,
        method: str = "auto",
        cgroups: CgroupReader | None = None,
        gpus: Callable[[], dict[int, GpuUse]] = query_gpus,
    ) -> None:
        """`api` is the Docker SDK's low-level client (inspect_container, base_url)."""
        self.api = api
        self.method = method
        self.cgroups = cgroups or CgroupReader()
        self._gpus = gpus
        self._seen: dict[str, _Seen] = {}
        self._streams: StatsStreams | None = None
        self._stream_problem: str | None = None
        self._used: set[str] = set()
        self._lock = threading.Lock()

    def source(self) -> str:
        """How the last round measured, for people reading the figures."""
        used = self._used or ({"cgroup"} if self.method == "cgroup" else set())
        if self.method == "stream" or used == {"stream"}:
            return self._stream_problem or "Docker's streaming stats API"
        if used == {"cgroup", "stream"}:
            return "cgroup files of the Docker host, and Docker's streaming stats API"
        if used == {"cgroup"}:
            return "cgroup files of the Docker host"
        return "cgroup files of the Docker host where visible, else Docker's streaming stats API"

    def sample(self, watched: Sequence[Watched]) -> list[UsageSample]:
        with self._lock:
            return self._sample(watched)

    def _sample(self, watched: Sequence[Watched]) -> list[UsageSample]:
        for gone in set(self._seen) - {w.container_id for w in watched}:
            del self._seen[gone]
        for w in watched:
            if w.container_id not in self._seen:
                self._seen[w.container_id] = self._first_sight(w)
        streamed = [w.container_id for w in watched if self._seen[w.container_id].files is None]
        if self.method != "cgroup":
            streams = self._stats_streams()
            if streams is not None:
                streams.watch(streamed)
        gpus = self._gpus() if any(s.gpus for s in self._seen.values()) else {}
        samples = []
        used: set[str] = set()
        for w in watched:
            seen = self._seen[w.container_id]
            if seen.files is not None:
                measured = self._from_cgroup(seen)
                used.add("cgroup")
            else:
                measured = self._from_stream(w.container_id)
                used.add("stream")
            if measured is None:
                continue
            counters, cores = measured
            gpu_utilization, gpu_memory = instance_gpu_use(gpus, seen.gpus)
            samples.append(
                UsageSample(
                    key=w.key,
                    at=utcnow(),
                    cpu_cores=cores,
                    memory_bytes=counters.memory_bytes,
                    memory_limit_bytes=counters.memory_limit_bytes,
                    network_rx_bytes=counters.network_rx_bytes,
                    network_tx_bytes=counters.network_tx_bytes,
                    gpu_utilization=gpu_utilization,
                    gpu_memory_bytes=gpu_memory,
                )
            )
        self._used = used
        return samples

    def _first_sight(self, watched: Watched) -> _Seen:
        try:
            found = self.api.inspect_container(watched.container_id)
        except Exception as exc:
            log.debug("cannot inspect %s (%s); its use is streamed", watched.container_id, exc)
            return _Seen(files=None, started=None)
        state = found.get("State") or {}
        labels = (found.get("Config") or {}).get("Labels") or {}
        pid = int(state.get("Pid") or 0)
        files = None
        if self.method != "stream" and pid > 0:
            files = self.cgroups.find(watched.container_id, pid)
        gpus = (
            tuple(int(g) for g in json.loads(labels.get(GPUS, "[]"))) if watched.real_gpus else ()
        )
        return _Seen(files=files, started=docker_time(state.get("StartedAt")), gpus=gpus)

    def _from_cgroup(self, seen: _Seen) -> tuple[Counters, float] | None:
        assert seen.files is not None
        counters = self.cgroups.read(seen.files)
        if counters is None:
            return None
        now = time.monotonic()
        if seen.before is not None and now > seen.before[1]:
            cores = (counters.cpu_seconds - seen.before[0]) / (now - seen.before[1])
        elif seen.started is not None:  # first read: the mean since the container started
            cores = counters.cpu_seconds / max((utcnow() - seen.started).total_seconds(), 1.0)
        else:
            cores = 0.0
        seen.before = (counters.cpu_seconds, now)
        return counters, max(cores, 0.0)

    def _from_stream(self, container_id: str) -> tuple[Counters, float] | None:
        if self._streams is None:
            return None
        found = self._streams.latest(container_id)
        if found is None:
            return None
        counters, cores = found
        return counters, cores if cores is not None else 0.0

    def _stats_streams(self) -> StatsStreams | None:
        if self._streams is None and self._stream_problem is None:
            adapter = getattr(self.api, "adapters", {}).get("http+docker://")
            socket_path = getattr(adapter, "socket_path", None)
            try:
                self._streams = StatsStreams(
                    str(self.api.base_url), socket_path, str(self.api.api_version)
                )
            except StreamUnavailable as exc:
                self._stream_problem = f"not measured: {exc}"
        return self._streams

    def close(self) -> None:
        if self._streams is not None:
            self._streams.close()
            self._streams = None
