"""Local data is read without following links, on real files, folders, symlinks and a FIFO.

The last test is the race of the security review: a thread keeps swapping a folder under the
allowed root between a real folder and a symlink to a folder outside it while many copies of
data under that folder run; no copy may ever hold the outside file, in its mount or the cache.
"""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePath

import pytest

from simulator import local_copy
from simulator.prereqs import MaterialError, MaterialKind, MaterialStore, UnservableMaterial

OUTSIDE_LINE = "outside-7d2e: a host file no job may copy\n"


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    path = tmp_path / "allowed"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "data.txt").write_text(OUTSIDE_LINE)
    return path


@pytest.fixture
def store(tmp_path: Path, allowed: Path) -> MaterialStore:
    return MaterialStore(
        tmp_path / "cache", storage_dir=tmp_path / "storage", allowed_file_roots=[allowed]
    )


def everything_under(folder: Path) -> str:
    """The text of every regular file under folder (symlinks not followed)."""
    texts = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            texts.append(path.read_text(errors="replace"))
    return "".join(texts)


def test_a_symlinked_folder_on_the_way_is_refused_naming_it(allowed: Path, outside: Path) -> None:
    (allowed / "shared").symlink_to(outside, target_is_directory=True)
    with pytest.raises(local_copy.CopyRefused) as err:
        local_copy.open_beneath(allowed, PurePath("shared/data.txt"))
    assert str(err.value) == (
        f"{allowed / 'shared'} is a symbolic link; local data is read without following links"
    )
    (allowed / "data.txt").symlink_to(outside / "data.txt")
    with pytest.raises(local_copy.CopyRefused, match=r"data\.txt is a symbolic link"):
        local_copy.open_beneath(allowed, PurePath("data.txt"))
    with pytest.raises(local_copy.Missing) as missing:
        local_copy.open_beneath(allowed, PurePath("gone/data.txt"))
    assert str(missing.value) == f"{allowed / 'gone'} does not exist"


def test_links_inside_a_copied_tree_are_kept_as_links(
    allowed: Path, outside: Path, tmp_path: Path
) -> None:
    tree = allowed / "ds"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "a.txt").write_text("a")
    (tree / "sub" / "a.txt").chmod(0o640)
    (tree / "to-outside.txt").symlink_to(outside / "data.txt")
    (tree / "to-outside-dir").symlink_to(outside, target_is_directory=True)
    (tree / "relative").symlink_to("sub/a.txt")
    (tree / "dangling").symlink_to("nowhere")
    target = tmp_path / "copy"
    fd = local_copy.open_beneath(allowed, PurePath("ds"))
    try:
        read, size = local_copy.copy(fd, tree, target, limit=1 << 20)
    finally:
        os.close(fd)
    assert (target / "sub" / "a.txt").read_text() == "a"
    assert (target / "sub" / "a.txt").stat().st_mode & 0o777 == 0o640
    for name, text in [
        ("to-outside.txt", str(outside / "data.txt")),
        ("to-outside-dir", str(outside)),
        ("relative", "sub/a.txt"),
        ("dangling", "nowhere"),
    ]:
        assert (target / name).is_symlink()
        assert os.readlink(target / name) == text
    assert OUTSIDE_LINE not in everything_under(target)
    assert size == 1
    assert {(e.path, e.kind) for e in read} == {
        ("", "dir"),
        ("sub", "dir"),
        ("sub/a.txt", "file"),
        ("to-outside.txt", "link"),
        ("to-outside-dir", "link"),
        ("relative", "link"),
        ("dangling", "link"),
    }


def test_a_fifo_in_a_tree_is_refused_without_blocking(allowed: Path, tmp_path: Path) -> None:
    (allowed / "ds").mkdir()
    os.mkfifo(allowed / "ds" / "pipe")
    fd = local_copy.open_beneath(allowed, PurePath("ds"))
    try:
        with pytest.raises(local_copy.CopyRefused) as err:
            local_copy.copy(fd, allowed / "ds", tmp_path / "copy", limit=1 << 20)
    finally:
        os.close(fd)
    assert str(err.value) == (
        f"{allowed / 'ds' / 'pipe'} is not a regular file, directory or symbolic link"
    )


def test_a_link_inside_the_root_to_data_inside_it_is_still_read(
    store: MaterialStore, allowed: Path, outside: Path
) -> None:
    """A symlink inside the root whose target is also inside passes the check (the resolved
    path is used); the walk goes down the resolved path, so it still works."""
    (allowed / "real").mkdir()
    (allowed / "real" / "data.txt").write_text("inside\n")
    (allowed / "current").symlink_to(allowed / "real", target_is_directory=True)
    mount = store.materialize("in", MaterialKind.DOWNLOAD, [str(allowed / "current/data.txt")])
    assert (mount.host_path / "data.txt").read_text() == "inside\n"
    (allowed / "escape").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnservableMaterial, match="outside the allowed roots"):
        store.materialize("in", MaterialKind.DOWNLOAD, [str(allowed / "escape/data.txt")])


def test_a_file_replaced_during_its_copy_is_cached_under_what_was_read(
    store: MaterialStore, allowed: Path
) -> None:
    (allowed / "ds").mkdir()
    (allowed / "ds" / "a.txt").write_text("before\n")
    uri = str(allowed / "ds")
    swapped: list[str] = []

    def replace_once(_name: str, message: str) -> None:
        if message.startswith("copying") and not swapped:
            fresh = allowed / "fresh.txt"
            fresh.write_text("after the look, before the copy\n")
            fresh.replace(allowed / "ds" / "a.txt")  # another file (inode, size) by that name
            swapped.append(message)

    first = store.materialize("in", MaterialKind.DOWNLOAD, [uri], progress=replace_once)
    assert swapped
    assert (first.host_path / "ds" / "a.txt").read_text() == "after the look, before the copy\n"
    messages: list[str] = []
    again = store.materialize(
        "in", MaterialKind.DOWNLOAD, [uri], progress=lambda _n, m: messages.append(m)
    )
    assert again == first  # the key of what is there now is the key it was stored under
    assert messages == ["data 'in' is cached"]


def test_a_copy_past_the_size_limit_stops(allowed: Path, tmp_path: Path) -> None:
    (allowed / "big.bin").write_bytes(b"x" * 5000)
    fd = local_copy.open_beneath(allowed, PurePath("big.bin"))
    try:
        with pytest.raises(local_copy.OverLimit):
            local_copy.copy(fd, allowed / "big.bin", tmp_path / "copy", limit=4096)
    finally:
        os.close(fd)


class Flipper:
    """Keeps swapping allowed/shared/dir between a fresh real folder and a symlink to the
    outside folder, as a job with a writable storage under the root could."""

    def __init__(self, allowed: Path, outside: Path) -> None:
        self.place = allowed / "shared" / "dir"
        self.outside = outside
        self.place.parent.mkdir()
        self._real(0)
        self.flips = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _real(self, round_: int) -> None:
        fresh = self.place.parent / f"fresh-{round_}"
        (fresh / "inner").mkdir(parents=True)
        (fresh / "data.txt").write_text(f"inside {round_}\n")
        (fresh / "inner" / "data.txt").write_text(f"inside {round_}\n")
        if self.place.is_symlink():
            self.place.unlink()
        fresh.rename(self.place)

    def _link(self, round_: int) -> None:
        gone = self.place.parent / f"gone-{round_}"
        self.place.rename(gone)
        self.place.symlink_to(self.outside, target_is_directory=True)
        shutil.rmtree(gone)

    def _run(self) -> None:
        pause = random.Random(24)
        while not self._stop.is_set():
            self.flips += 1
            self._link(self.flips)
            time.sleep(pause.uniform(0, 0.002))  # each state lasts a while, the copies run
            self._real(self.flips)
            time.sleep(pause.uniform(0, 0.008))  # long enough for some copies to finish

    def __enter__(self) -> Flipper:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)


def test_no_copy_follows_a_folder_swapped_for_a_link_while_copies_run(
    store: MaterialStore, allowed: Path, outside: Path
) -> None:
    """Many rounds of copies of a file and of folders under the flipping folder: each is
    refused or holds inside content, never the outside file, and neither does the cache."""
    uris = [
        [str(allowed / "shared" / "dir" / "data.txt")],
        [str(allowed / "shared" / "dir")],
        [(allowed / "shared" / "dir" / "inner").as_uri()],
    ]
    outcomes: list[str] = []

    def one(round_: int) -> str:
        try:
            mount = store.materialize(f"in{round_ % 7}", MaterialKind.DOWNLOAD, uris[round_ % 3])
        except MaterialError:
            return "refused"
        return everything_under(mount.host_path)

    copied: list[str] = []
    with Flipper(allowed, outside) as flipper, ThreadPoolExecutor(4) as pool:
        for batch in range(200):  # until the race has really been run, many rounds of it
            outcomes += pool.map(one, range(batch * 100, batch * 100 + 100))
            copied = [text for text in outcomes if text != "refused"]
            if flipper.flips >= 200 and len(copied) >= 100 and len(copied) < len(outcomes):
                break
    assert flipper.flips >= 200 and len(copied) >= 100 and len(copied) < len(outcomes)
    assert [text for text in copied if OUTSIDE_LINE in text] == []
    # what was copied is inside content (or less of it: a folder renamed away and deleted by
    # the flipper while its descriptor was being read)
    assert {line.split(" ")[0] for text in copied for line in text.splitlines()} == {"inside"}
    assert OUTSIDE_LINE not in everything_under(store.cache_dir)


def test_a_code_directory_is_the_mount_itself_with_its_links_kept(
    store: MaterialStore, allowed: Path, outside: Path
) -> None:
    (allowed / "code" / "pkg").mkdir(parents=True)
    (allowed / "code" / "pkg" / "train.py").write_text("print('train')\n")
    (allowed / "code" / "secret.txt").symlink_to(outside / "data.txt")
    mount = store.materialize(
        "code", MaterialKind.DOWNLOAD, [str(allowed / "code")], as_directory=True
    )
    assert (mount.host_path / "pkg" / "train.py").read_text() == "print('train')\n"
    assert os.readlink(mount.host_path / "secret.txt") == str(outside / "data.txt")
    assert OUTSIDE_LINE not in everything_under(mount.host_path)
