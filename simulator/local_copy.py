"""Reading and copying local data under an allowed root without ever following a symlink.

A job that can write under the root may swap a folder for a symlink between the check and the
copy, so every component is opened relative to its parent's descriptor with O_NOFOLLOW
(docs/security.md). `scan` and `copy` return what they actually read, for the cache key.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePath

_CHUNK = 1 << 20
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO never blocks open
_LINK_ERRORS = (errno.ELOOP, errno.ENOTDIR)  # what O_NOFOLLOW (| O_DIRECTORY) gives on a link


@dataclass(frozen=True)
class Entry:
    """One file, directory or symlink seen under the copied path ('' is the path itself).

    Regular files carry size, modification time and inode, directories their inode, symlinks
    their text: a file replaced or edited, a folder swapped for another, a link retargeted all
    give another list."""

    path: str
    kind: str  # "file", "dir" or "link"
    size: int = 0
    mtime_ns: int = 0
    inode: tuple[int, int] = (0, 0)
    target: str = ""


class CopyRefused(Exception):
    """The path cannot be read without following a link, or is not a file, folder or link;
    the message names the path and why."""


class Missing(CopyRefused):
    """The path (or one of its folders) does not exist."""


class OverLimit(Exception):
    """More bytes than allowed would be copied."""


def open_beneath(root: Path, relative: PurePath) -> int:
    """A descriptor of root/relative reached one component at a time, following no symlink
    below `root` (the root itself is configured by the operator and opened as it is).

    Raises CopyRefused naming the first component that is a symlink (or not a folder where a
    folder is needed), Missing when one does not exist."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    here = root
    parts = relative.parts
    try:
        for position, part in enumerate(parts):
            here = here / part
            last = position == len(parts) - 1
            try:
                status = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                raise Missing(f"{here} does not exist") from None
            if stat.S_ISLNK(status.st_mode):
                raise CopyRefused(_is_link(here))
            if not last and not stat.S_ISDIR(status.st_mode):
                raise CopyRefused(f"{here} is not a directory")
            if last:
                _check_kind(here, status.st_mode)
            flags = _READ | (0 if last else os.O_DIRECTORY)
            try:
                child = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                raise Missing(f"{here} does not exist") from None
            except OSError as exc:
                if exc.errno in _LINK_ERRORS:
                    raise CopyRefused(_is_link(here)) from None
                raise
            os.close(fd)
            fd = child
            if last:
                _check_kind(here, os.fstat(fd).st_mode)
        return fd
    except BaseException:
        os.close(fd)
        raise


def scan(fd: int, shown: Path) -> list[Entry]:
    """What `copy` would read from the open file or folder `fd` (named `shown` in errors),
    without reading any content."""
    entries: list[Entry] = []
    _walk(fd, shown, "", entries, None, None)
    return entries


def copy(fd: int, shown: Path, target: Path, limit: int) -> tuple[list[Entry], int]:
    """Copy the open file or folder `fd` to `target` (a folder's content goes into `target`,
    which may exist), at most `limit` bytes; returns what was read and how many bytes.

    Mode and times are kept as copy2/copytree keep them; symlinks are copied as symlinks."""
    entries: list[Entry] = []
    copied = [0]

    def count(size: int) -> None:
        copied[0] += size
        if copied[0] > limit:
            raise OverLimit()

    _walk(fd, shown, "", entries, target, count)
    return entries, copied[0]


def read_file(fd: int, shown: Path, limit: int) -> bytes:
    """Up to limit + 1 bytes of the open regular file `fd`."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise CopyRefused(f"{shown} is not a regular file")
    with os.fdopen(os.dup(fd), "rb") as file:
        return file.read(limit + 1)


def _walk(
    fd: int,
    shown: Path,
    relative: str,
    entries: list[Entry],
    target: Path | None,
    count: Callable[[int], None] | None,
) -> None:
    status = os.fstat(fd)
    if stat.S_ISREG(status.st_mode):
        if target is not None and count is not None:
            _copy_file(fd, target, count)
            status = os.fstat(fd)  # what was read, should it have changed meanwhile
        entries.append(Entry(relative, "file", status.st_size, status.st_mtime_ns, _inode(status)))
        return
    if not stat.S_ISDIR(status.st_mode):
        raise CopyRefused(f"{shown} is not a regular file, directory or symbolic link")
    entries.append(Entry(relative, "dir", inode=_inode(status)))
    if target is not None:
        target.mkdir(mode=0o700, exist_ok=True)
    for name in sorted(os.listdir(fd)):
        inner = f"{relative}/{name}" if relative else name
        path = shown / name
        try:
            child_status = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed since the listing: not read, so not part of the copy
        if stat.S_ISLNK(child_status.st_mode):
            try:
                link = os.readlink(name, dir_fd=fd)
            except OSError as exc:
                raise CopyRefused(f"{path} changed while it was being copied") from exc
            entries.append(Entry(inner, "link", target=link))
            if target is not None:
                os.symlink(link, target / name)
            continue
        _check_kind(path, child_status.st_mode)
        directory = stat.S_ISDIR(child_status.st_mode)
        try:
            child = os.open(name, _READ | (os.O_DIRECTORY if directory else 0), dir_fd=fd)
        except OSError as exc:
            if exc.errno in _LINK_ERRORS or exc.errno == errno.ENOENT:
                raise CopyRefused(f"{path} changed while it was being copied") from None
            raise
        try:
            _walk(
                child,
                path,
                inner,
                entries,
                None if target is None else target / name,
                count,
            )
        finally:
            os.close(child)
    if target is not None:
        os.chmod(target, stat.S_IMODE(status.st_mode))
        os.utime(target, ns=(status.st_atime_ns, status.st_mtime_ns))


def _copy_file(fd: int, target: Path, count: Callable[[int], None]) -> None:
    os.lseek(fd, 0, os.SEEK_SET)
    out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        while chunk := os.read(fd, _CHUNK):
            count(len(chunk))
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
        status = os.fstat(fd)
        os.fchmod(out, stat.S_IMODE(status.st_mode))
        os.utime(out, ns=(status.st_atime_ns, status.st_mtime_ns))
    finally:
        os.close(out)


def _check_kind(path: Path, mode: int) -> None:
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise CopyRefused(f"{path} is not a regular file, directory or symbolic link")


def _inode(status: os.stat_result) -> tuple[int, int]:
    return (status.st_dev, status.st_ino)


def _is_link(path: Path) -> str:
    return f"{path} is a symbolic link; local data is read without following links"
