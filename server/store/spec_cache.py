"""Parsed job specs kept in memory: a job's resolved spec is written once, when the job is
created, and never changes, so the parsed model can be shared by every later read.

Parsing is most of what listing jobs with their task roles costs; the cache is bounded (least
recently used out first) and safe to use from the worker threads the store runs in.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from server.protocol.model import JobSpec

DEFAULT_SIZE = 4096


class SpecCache:
    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self.size = size
        self._specs: OrderedDict[str, JobSpec] = OrderedDict()
        self._lock = threading.Lock()

    def get_many(self, job_ids: Iterable[str]) -> tuple[dict[str, JobSpec], set[str]]:
        """The specs held for `job_ids`, and the ids that must be read."""
        found: dict[str, JobSpec] = {}
        missing: set[str] = set()
        with self._lock:
            for job_id in job_ids:
                spec = self._specs.get(job_id)
                if spec is None:
                    missing.add(job_id)
                else:
                    self._specs.move_to_end(job_id)
                    found[job_id] = spec
        return found, missing

    def put_many(self, specs: dict[str, JobSpec]) -> None:
        with self._lock:
            self._specs.update(specs)
            for job_id in specs:
                self._specs.move_to_end(job_id)
            while len(self._specs) > self.size:
                self._specs.popitem(last=False)

    def __len__(self) -> int:
        return len(self._specs)
