"""Files the server reads or writes beside what a job can write: never through a symlink.

A container could plant a symlink, FIFO or directory where the server expects its log, so reads
open with O_NOFOLLOW | O_NONBLOCK and check for a regular file, and writes rename a fresh file
into place; anything unexpected is an UnsafeFile, which callers turn into a reason.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class UnsafeFile(OSError):
    """A path holds something other than the regular file the server expects (a symlink, a
    directory, a FIFO ...), or cannot be read for another reason; the message says which."""


def open_regular(path: Path, flags: int = _READ, mode: int = 0o644) -> int:
    """A descriptor of the regular file at `path`, opened without following a final symlink.

    FileNotFoundError passes through (callers treat a missing file as empty); anything that is
    there but is not a regular file is an UnsafeFile.
    """
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnsafeFile(f"{path.name} cannot be opened safely: {_what(path, exc)}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UnsafeFile(f"{path.name} is not a regular file ({_kind(info.st_mode)})")
    return fd


def read_at(path: Path, offset: int, limit: int) -> bytes:
    """At most `limit` bytes of the regular file at `path` from `offset`; b"" when missing."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return b""
    try:
        return os.pread(fd, limit, offset)
    finally:
        os.close(fd)


def size_of(path: Path) -> int:
    """The size of the regular file at `path`; 0 when it is missing."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return 0
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def read_text(path: Path, limit: int = 1 << 20) -> str:
    """The whole regular file as text, refused when larger than `limit` bytes."""
    fd = open_regular(path)
    try:
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UnsafeFile(f"{path.name} is larger than {limit} bytes")
    return data.decode("utf-8")


def append(path: Path, data: bytes) -> None:
    """Append to the regular file at `path`, creating it when missing."""
    fd = open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def create(path: Path) -> None:
    """Make sure an empty regular file exists at `path` (an existing one is kept)."""
    os.close(open_regular(path, os.O_WRONLY | os.O_CREAT))


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace `path` with a file holding `text`: written beside it under a fresh name, then
    renamed over it, so a reader never sees half of it and a symlink there is replaced."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _what(path: Path, exc: OSError) -> str:
    with contextlib.suppress(OSError):
        return f"it is {_kind(os.lstat(path).st_mode)}"
    return exc.strerror or str(exc)
