"""Host port allocation: real bind checks, beginAt, all-or-none, threads and processes."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from simulator.ports import (
    PortAllocator,
    PortAsk,
    PortConflict,
    PortRequestError,
    PortsExhausted,
)
from simulator.settings import settings_from_yaml
from tests.worker_support import SPARE_PORTS, share

REPO = Path(__file__).resolve().parents[2]


def _bindable(port: int) -> bool:
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                return False
    return True


def free_window(size: int) -> int:
    """The first port of ``size`` consecutive ports nothing on this host uses now.

    Windows are drawn at random from this worker's spare ports (below the simulator's and
    Linux's ephemeral ranges, apart from the other workers'), so tests of several people on one
    machine rarely meet and a worker's never meet another's.
    """
    rng = random.Random()
    spare = share(SPARE_PORTS)
    for _ in range(500):
        base = rng.randrange(spare.start, spare.stop - size)
        if all(_bindable(p) for p in range(base, base + size)):
            return base
    raise RuntimeError(f"no {size} free consecutive ports on this host")


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A real listening TCP socket on loopback, the kind of program a port check must see."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", free_window(1)))
    sock.listen()
    yield sock
    sock.close()


def test_labels_in_request_order_with_their_counts() -> None:
    base = free_window(50)
    ports = PortAllocator(base, base + 50)
    got = ports.allocate("job#1/worker-0", [("ssh", 1), ("http", 1), ("nccl", 3), ("none", 0)])
    assert list(got) == ["ssh", "http", "nccl", "none"]
    assert [len(v) for v in got.values()] == [1, 1, 3, 0]
    flat = [p for v in got.values() for p in v]
    assert len(set(flat)) == 5
    assert all(base <= p < base + 50 for p in flat)
    assert ports.held() == {"job#1/worker-0": tuple(flat)}


def test_begin_at_gives_exactly_those_ports_even_outside_the_range() -> None:
    base = free_window(20)
    fixed = free_window(3)
    ports = PortAllocator(base, base + 20)
    got = ports.allocate("a-0", [PortAsk("http", 1), PortAsk("grpc", 3, fixed)])
    assert got["grpc"] == [fixed, fixed + 1, fixed + 2]
    with pytest.raises(PortConflict) as caught:
        ports.allocate("a-1", [PortAsk("grpc", 2, fixed + 2)])
    assert str(caught.value) == (
        f"port {fixed + 2} (label grpc, beginAt {fixed + 2}) for a-1 is already held by a-0"
    )
    assert "a-1" not in ports.held()
    ports.release("a-0")
    assert ports.allocate("a-1", [PortAsk("grpc", 2, fixed + 2)]) == {
        "grpc": [fixed + 2, fixed + 3]
    }


def test_begin_at_on_a_port_another_program_listens_on(listener: socket.socket) -> None:
    taken = listener.getsockname()[1]
    ports = PortAllocator(*(lambda b: (b, b + 10))(free_window(10)))
    with pytest.raises(PortConflict, match=rf"port {taken} .* cannot be bound on this host"):
        ports.allocate("x", [("http", 1, taken)])


def test_two_instances_of_one_gang_cannot_share_a_fixed_port() -> None:
    base = free_window(10)
    fixed = free_window(1)
    ports = PortAllocator(base, base + 10)
    with pytest.raises(PortConflict, match=rf"port {fixed} .* for w-1 is also asked for by w-0"):
        ports.allocate_many([("w-0", [("http", 1, fixed)]), ("w-1", [("http", 1, fixed)])])
    assert ports.held() == {}


def test_a_port_in_use_on_the_host_is_skipped() -> None:
    base = free_window(6)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", base + 2))
        busy.listen()
        ports = PortAllocator(base, base + 6)
        got = ports.allocate("x", [("p", 5)])["p"]
        assert sorted(got) == [base, base + 1, base + 3, base + 4, base + 5]
        with pytest.raises(PortsExhausted) as caught:
            ports.allocate("y", [("p", 1)])
    assert str(caught.value) == (
        f"no free ports: y needs 1, only 0 free in {base}-{base + 5} "
        f"(5 held by running instances, 1 in use by other programs on this host)"
    )


def test_all_or_none_when_the_range_runs_out() -> None:
    base = free_window(8)
    ports = PortAllocator(base, base + 8)
    ports.allocate("a", [("p", 5)])
    with pytest.raises(PortsExhausted, match="only 3 free"):
        ports.allocate_many([("b", [("p", 2)]), ("c", [("p", 2)])])
    assert set(ports.held()) == {"a"}
    assert len(ports.allocate("b", [("p", 3)])["p"]) == 3


def test_a_released_port_is_not_handed_out_again_at_once() -> None:
    base = free_window(10)
    ports = PortAllocator(base, base + 10)
    first = ports.allocate("a", [("p", 2)])["p"]
    ports.release("a")
    assert ports.held() == {}
    later = [ports.allocate(f"o{i}", [("p", 2)])["p"] for i in range(4)]
    assert not set(first) & {p for ps in later for p in ps}
    # only after the cursor went round the range once do they come back
    assert set(ports.allocate("o4", [("p", 2)])["p"]) == set(first)


def test_adopted_ports_are_not_handed_out() -> None:
    base = free_window(4)
    ports = PortAllocator(base, base + 4)
    ports.adopt("survivor", [base, base + 1])
    assert sorted(ports.allocate("new", [("p", 2)])["p"]) == [base + 2, base + 3]
    with pytest.raises(PortsExhausted):
        ports.allocate("more", [("p", 1)])
    ports.release("survivor")
    assert sorted(ports.allocate("more", [("p", 2)])["p"]) == [base, base + 1]


@pytest.mark.parametrize(
    ("requests", "says"),
    [
        ([("p", 1), ("p", 2)], "port label p appears twice for x"),
        ([("p", -1)], "port count of label p must be >= 0"),
        ([("", 1)], "a port label of x is empty"),
        ([("p", 3, 65534)], "label p asks for ports 65534-65536, beyond the last port 65535"),
    ],
)
def test_bad_requests_are_refused_with_the_label(requests: list[tuple], says: str) -> None:
    ports = PortAllocator(30000, 30010)
    with pytest.raises(PortRequestError) as caught:
        ports.allocate("x", requests)
    assert str(caught.value) == says


def test_threads_never_get_the_same_port() -> None:
    base = free_window(400)
    ports = PortAllocator(base, base + 400)
    start = threading.Barrier(20)
    results: dict[int, list[int]] = {}

    def run(i: int) -> None:
        start.wait()
        for k in range(3):
            got = ports.allocate(f"t{i}-{k}", [("http", 1), ("ssh", 1), ("nccl", 3)])
            results.setdefault(i, []).extend(p for v in got.values() for p in v)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [p for ps in results.values() for p in ps]
    assert len(every) == 20 * 3 * 5
    assert len(set(every)) == len(every)


_CHILD = """
import json, sys
from pathlib import Path
from simulator.ports import PortAllocator
start, end, state, rounds = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
ports = PortAllocator(start, end, state_file=state)
print("ready", flush=True)
sys.stdin.readline()
got = []
try:
    for i in range(rounds):
        held = ports.allocate(f"child-{i}", [("http", 1), ("ssh", 2)])
        got += [p for v in held.values() for p in v]
    print(json.dumps(got), flush=True)
except Exception as exc:
    print(json.dumps(str(exc)), flush=True)
sys.stdin.readline()
"""


def _child(base: int, end: int, state: Path, rounds: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(base), str(end), str(state), str(rounds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _finish(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=30)


def test_two_processes_sharing_the_state_file_get_disjoint_ports(tmp_path: Path) -> None:
    base = free_window(400)
    state = tmp_path / "state" / "ports.json"
    children = [_child(base, base + 400, state, 40) for _ in range(2)]
    try:
        for proc in children:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        got = [json.loads(proc.stdout.readline()) for proc in children if proc.stdout]
    finally:
        for proc in children:
            _finish(proc)
    assert all(isinstance(g, list) and len(g) == 120 for g in got), got
    assert not set(got[0]) & set(got[1])
    assert len(set(got[0])) == len(set(got[1])) == 120


def test_ports_of_a_live_process_are_held_and_of_a_dead_one_free(tmp_path: Path) -> None:
    base = free_window(6)
    state = tmp_path / "ports.json"
    child = _child(base, base + 6, state, 2)
    try:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        theirs = json.loads(child.stdout.readline())
        assert sorted(theirs) == list(range(base, base + 6))
        mine = PortAllocator(base, base + 6, state_file=state)
        with pytest.raises(PortsExhausted, match="6 held by running instances"):
            mine.allocate("parent", [("p", 1)])
        with pytest.raises(PortConflict, match=rf"already held by child-0 \(process {child.pid}\)"):
            mine.allocate("parent", [("p", 1, theirs[0])])
    finally:
        _finish(child)
    assert sorted(mine.allocate("parent", [("p", 6)])["p"]) == list(range(base, base + 6))


def test_from_settings_uses_the_configured_range_and_the_state_dir(tmp_path: Path) -> None:
    base = free_window(5)
    settings = settings_from_yaml(
        f"port_range: {base}-{base + 5}\nstate_dir: {tmp_path}\n", environ={}
    )
    ports = PortAllocator.from_settings(settings)
    got = ports.allocate("job#1/ps-0", [("http", 2)])["http"]
    assert got == [base, base + 1]
    table = json.loads((tmp_path / "ports.json").read_text())
    assert [(h["owner"], h["ports"]) for h in table["holders"]] == [("job#1/ps-0", got)]
    ports.release("job#1/ps-0")
    assert json.loads((tmp_path / "ports.json").read_text())["holders"] == []
