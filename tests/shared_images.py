"""Images the tests build under fixed names (the names a seed's job gives, which a job run as
written must find), kept while any test session on this machine uses them.

The Docker engine is the machine's: every pytest-xdist worker and every other test run on this
machine sees the same tags, so one session removing them at its end would take them from
another still running jobs on them. Two lock files per set of names (flock, which the kernel
releases however the process ends) decide instead:

* `<name>.guard`, held exclusively while the images are built or removed, so that neither
  overlaps the other;
* `<name>.users`, held shared by every session using the images, from their build to its end.

A session ending removes the images only when it can take `users` exclusively at once, that is
when no other session uses them; otherwise the last one to end removes them.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

LOCKS = Path(tempfile.gettempdir())


@contextmanager
def _exclusive(fd: int) -> Iterator[None]:
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _lock_file(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)


@contextmanager
def images_in_use(name: str, tags: Sequence[str], build: Callable[[], None]) -> Iterator[None]:
    """Build the images `tags` with `build` and keep them until the block ends; then remove
    them unless another session on this machine still uses them. `name` names the set (its
    lock files are `paigraph-images-<name>.*` in the temporary directory)."""
    guard = _lock_file(LOCKS / f"paigraph-images-{name}.guard")
    users = _lock_file(LOCKS / f"paigraph-images-{name}.users")
    try:
        with _exclusive(guard):
            build()  # tagging again what is there already: another session's jobs keep it
            fcntl.flock(users, fcntl.LOCK_SH)  # never waits: removals hold the guard
        try:
            yield
        finally:
            with _exclusive(guard):
                fcntl.flock(users, fcntl.LOCK_UN)
                if _alone(users):
                    subprocess.run(["docker", "rmi", *tags], capture_output=True, check=False)
                    fcntl.flock(users, fcntl.LOCK_UN)
    finally:
        os.close(users)
        os.close(guard)


def _alone(users: int) -> bool:
    """Whether no other session holds the images (their users lock taken exclusively)."""
    try:
        fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
