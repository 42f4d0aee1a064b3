"""What reading the end of a long instance log costs, next to reading the whole file.

    python bench/logs.py [--mb 200]

Writes a log of numbered lines (200 MB by default) into a temporary folder, then measures in
the same run, each as the peak of memory allocated while it runs (tracemalloc) and its time:

  whole file   path.read_bytes() and a search for the last lines (what a tail once cost)
  paigraph     LogFile.tail_offset(1) and one read from there (taskLogs(tail: 1))
  keep within  LogFile.keep_within(1 MB) on a copy: dropping the middle of the log

Prints figures and the ratios paigraph / whole file; exits 0.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.log_files import LogFile  # noqa: E402


def measure(what: Callable[[], object]) -> tuple[float, int]:
    """Seconds taken and the peak of bytes allocated by `what()`."""
    tracemalloc.start()
    started = time.perf_counter()
    what()
    seconds = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return seconds, peak


def write_log(path: Path, megabytes: int) -> None:
    line_block = b"".join(
        f"line {n:09d} of a job that talks a lot\n".encode() for n in range(25_000)
    )
    with path.open("wb") as out:
        for _ in range(max(1, megabytes * (1 << 20) // len(line_block))):
            out.write(line_block)


def whole_file_tail(path: Path) -> bytes:
    data = path.read_bytes()
    return data[data.rfind(b"\n", 0, len(data) - 1) + 1 :]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="size of the log in MB")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        log = LogFile(Path(folder) / "output.log", Path(folder) / "dropped.json")
        write_log(log.path, args.mb)
        size = log.path.stat().st_size

        def paigraph_tail() -> bytes:
            return log.read(log.tail_offset(1))[0]

        assert paigraph_tail() == whole_file_tail(log.path)
        whole = measure(lambda: whole_file_tail(log.path))
        ours = measure(paigraph_tail)
        copy = LogFile(Path(folder) / "copy.log", Path(folder) / "copy.json")
        shutil.copyfile(log.path, copy.path)
        kept = measure(lambda: copy.keep_within(1 << 20))
        on_disk = copy.path.stat().st_blocks * 512

    print(f"log: {size / 1e6:.0f} MB")
    print(f"{'':14}{'seconds':>10}{'peak MB':>10}")
    for name, (seconds, peak) in (("whole file", whole), ("paigraph", ours), ("keep within", kept)):
        print(f"{name:14}{seconds:10.4f}{peak / 1e6:10.2f}")
    time_ratio, memory_ratio = ours[0] / whole[0], ours[1] / whole[1]
    print(f"ratio paigraph / whole file: time {time_ratio:.4f}, memory {memory_ratio:.5f}")
    print(f"after keep_within(1 MB): {on_disk / 1e6:.2f} MB on disk of {size / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
