"""Validate each query text once.

Every rule the schema validates with (the spec's rules and the depth, alias and token limits
of `server.api.limits`) is fixed when the server starts, so a text that passed validation once
passes it always. Clients send the same few query texts over and over; remembering which
passed spares the validation walk (a few milliseconds for a job page) on every request after
the first. Texts are remembered by a digest, a bounded number of them, newest kept.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterator

from strawberry.extensions import SchemaExtension

REMEMBERED = 1024


class KnownValidQueries:
    """The digests of query texts that passed validation, least recently used out first."""

    def __init__(self, size: int = REMEMBERED) -> None:
        self.size = size
        self._digests: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def digest(query: str) -> bytes:
        return hashlib.blake2b(query.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def __contains__(self, digest: bytes) -> bool:
        with self._lock:
            if digest not in self._digests:
                return False
            self._digests.move_to_end(digest)
            return True

    def add(self, digest: bytes) -> None:
        with self._lock:
            self._digests[digest] = None
            self._digests.move_to_end(digest)
            while len(self._digests) > self.size:
                self._digests.popitem(last=False)


KNOWN = KnownValidQueries()


class SkipKnownValidQueries(SchemaExtension):
    """Marks a known-valid text as validated (no errors) before validation would run."""

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        digest = KNOWN.digest(context.query) if context.query else None
        if digest is not None and context.pre_execution_errors is None and digest in KNOWN:
            context.pre_execution_errors = []
            yield
            return
        yield
        if digest is not None and context.pre_execution_errors == []:
            KNOWN.add(digest)
