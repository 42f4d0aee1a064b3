"""Simulated capacity: gang placement, quotas, reasons, and concurrent launches."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from simulator.cluster import (
    Cluster,
    Demand,
    NeverFits,
    Placed,
    Shortage,
    Slot,
    parse_nvidia_smi_list,
)
from simulator.ports import PortAllocator
from simulator.settings import Capacity, load_settings, settings_from_yaml
from tests.simulator.test_ports import free_window
from tests.waiting import NotInTime, until


def cluster(yaml_text: str = "", host_gpus: tuple[int, ...] = ()) -> Cluster:
    settings = settings_from_yaml(yaml_text, environ={"PAIGRAPH_SIMULATOR_STATE": "/tmp/x"})
    return Cluster(settings, host_gpus=host_gpus)


def used(c: Cluster) -> dict[str, Capacity]:
    return {n.name: n.used for n in c.usage().nodes}


def test_the_default_cluster_runs_64_instances_of_1_cpu_and_128_mb() -> None:
    c = Cluster(load_settings(environ={}), host_gpus=())
    demands = [Demand(1, 128)] * 64
    assert c.never_fits("default", demands) is None
    placed = c.place("bench#1", "default", demands)
    assert isinstance(placed, Placed)
    assert len(placed.slots) == 64
    # first fit: the first two nodes are filled, the other two stay free for large instances
    assert Counter(s.node for s in placed.slots) == {"node-0": 32, "node-1": 32}
    assert c.usage().vcs[0].used == Capacity(64, 64 * 128, 0)


def test_the_default_cluster_is_four_nodes_of_eight_gpus_handed_out_once() -> None:
    c = Cluster(load_settings(environ={}), host_gpus=())
    assert [(n.name, n.gpus, n.real_gpus) for n in c.nodes] == [
        (f"node-{i}", tuple(range(8)), False) for i in range(4)
    ]
    first = c.place("a#1", "default", [Demand(8, 16384, 4)] * 2)
    assert isinstance(first, Placed)
    assert [(s.node, s.gpus) for s in first.slots] == [
        ("node-0", (0, 1, 2, 3)),
        ("node-0", (4, 5, 6, 7)),
    ]
    second = c.place("b#1", "default", [Demand(1, 1024, 2)])
    assert isinstance(second, Placed) and second.slots[0] == ("node-1", (0, 1))
    c.release_one("a#1", 0)  # its instance ended: indices 0-3 of node-0 are free again
    third = c.place("c#1", "default", [Demand(1, 1024, 3)])
    assert isinstance(third, Placed) and third.slots[0] == ("node-0", (0, 1, 2))


def test_gang_placement_is_all_or_none() -> None:
    c = cluster("node_count: 2\nnode: {cpu: 4, memory_mb: 4096}")
    assert isinstance(c.place("a", "default", [Demand(3, 512)]), Placed)
    before = used(c)
    assert c.place("b", "default", [Demand(2, 512)] * 3) == Shortage(
        "needs 6 cpu, 5 free in vc default"
    )
    # enough cpu in total, but split 1 + 4 across the nodes
    assert c.place("b", "default", [Demand(3, 512), Demand(2, 512)]) == Shortage(
        "only 1 of 2 instances fit on the free nodes; none has room for one more with "
        "2 cpu and 512 MB memory"
    )
    assert used(c) == before
    assert not c.holds("b")
    c.release("a")
    placed = c.place("b", "default", [Demand(3, 512), Demand(2, 512)])
    assert placed == Placed((Slot("node-0", ()), Slot("node-1", ())))


def test_first_fit_decreasing_places_the_largest_first_and_packs() -> None:
    c = cluster("node_count: 3\nnode: {cpu: 8, memory_mb: 8192}")
    placed = c.place("a", "default", [Demand(1, 128), Demand(6, 128), Demand(2, 128)])
    assert isinstance(placed, Placed)
    # the 6-cpu instance is placed first, the 2-cpu one fills node-0 up, the 1-cpu one
    # goes to node-1; the slots come back in the order asked
    assert [s.node for s in placed.slots] == ["node-1", "node-0", "node-0"]


QUOTAS = """
node_count: 4
node: {cpu: 16, memory_mb: 8192}
gpus_per_node: 2
virtual_clusters:
  - {name: default, cpu: 16, memory_mb: 4096}
  - {name: gpu, cpu: 8, memory_mb: 8192, gpu: 3}
  - {name: rest, share: 25}
"""


def test_quota_reasons_name_what_is_missing() -> None:
    c = cluster(QUOTAS)
    assert isinstance(c.place("a", "default", [Demand(10, 1024)]), Placed)
    assert c.place("b", "default", [Demand(1, 128)] * 16) == Shortage(
        "needs 16 cpu, 6 free in vc default"
    )
    assert c.place("b", "default", [Demand(1, 2048), Demand(1, 2048)]) == Shortage(
        "needs 4096 MB memory, 3072 MB free in vc default"
    )
    assert c.place("b", "default", [Demand(7, 4000)]) == Shortage(
        "needs 7 cpu, 6 free in vc default; needs 4000 MB memory, 3072 MB free in vc default"
    )
    assert isinstance(c.place("g", "gpu", [Demand(1, 128, 2)]), Placed)
    assert c.place("h", "gpu", [Demand(1, 128, 1)] * 2) == Shortage(
        "needs 2 gpus, 1 free in vc gpu"
    )
    # another virtual cluster is not affected by the full one
    assert isinstance(c.place("r", "rest", [Demand(16, 2048)]), Placed)
    vcs = {v.name: v for v in c.usage().vcs}
    assert vcs["default"].free == Capacity(6, 3072, 0)
    assert vcs["rest"].quota == Capacity(16, 8192, 2)
    assert (vcs["gpu"].attempts, vcs["gpu"].instances) == (1, 1)


def test_node_reasons_when_the_vc_has_room_but_no_node_does() -> None:
    c = cluster("node_count: 3\nnode: {cpu: 16, memory_mb: 8192}\ngpus_per_node: 8")
    for name in ("a", "b", "c"):
        assert isinstance(c.place(name, "default", [Demand(1, 128, 5)]), Placed)
    assert c.place("d", "default", [Demand(1, 128, 8)]) == Shortage("no node has 8 free gpus")
    assert c.place("e", "default", [Demand(16, 128)]) == Shortage("no node has 16 free cpu")

    c = cluster("nodes: [{name: a, cpu: 16, memory_mb: 4096}, {name: b, cpu: 8, memory_mb: 16384}]")
    assert isinstance(c.place("x", "default", [Demand(2, 1024)]), Placed)
    assert c.place("y", "default", [Demand(10, 4096)]) == Shortage(
        "no node has 10 free cpu and 4096 MB free memory at once"
    )


def test_gpu_indices_are_distinct_on_a_node_and_real_on_a_gpu_host() -> None:
    c = cluster("node_count: 2\ngpus_per_node: 4")
    first = c.place("a", "default", [Demand(1, 128, 3), Demand(1, 128, 1)])
    second = c.place("b", "default", [Demand(1, 128, 2)])
    assert first == Placed((Slot("node-0", (0, 1, 2)), Slot("node-0", (3,))))
    assert second == Placed((Slot("node-1", (0, 1)),))

    host = cluster("node_count: 2\ngpus_per_node: 1", host_gpus=(2, 5))
    assert [(n.name, n.gpus, n.real_gpus) for n in host.nodes] == [
        ("node-0", (2, 5), True),
        ("node-1", (0,), False),
    ]
    assert host.place("a", "default", [Demand(1, 128, 2)]) == Placed((Slot("node-0", (2, 5)),))


def test_nvidia_smi_listing_gives_the_device_indices() -> None:
    listing = (
        "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-8c3f1a2e-0000-0000-0000-000000000000)\n"
        "  MIG 1g.5gb     Device  0: (UUID: MIG-1f1a0c4e-0000-0000-0000-000000000000)\n"
        "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-9d4e2b3f-0000-0000-0000-000000000000)\n"
    )
    assert parse_nvidia_smi_list(listing) == (0, 1)
    assert parse_nvidia_smi_list("No devices were found\n") == ()


NEVER = """
gpus_per_node: 0
nodes:
  - {name: wide, cpu: 32, memory_mb: 4096}
  - {name: deep, cpu: 4, memory_mb: 65536}
virtual_clusters:
  - {name: default, share: 50}
  - {name: small, cpu: 8, memory_mb: 8192}
"""


@pytest.mark.parametrize(
    ("vc", "demands", "reason"),
    [
        ("research", [Demand(1, 128)], "unknown virtual cluster 'research'; known: default, small"),
        (
            "default",
            [Demand(33, 128)],
            "an instance asks 33 cpu, the largest node has 32 cpu (node.cpu, or cpu in nodes, in "
            "the simulator settings)",
        ),
        (
            "default",
            [Demand(1, 70000)],
            "an instance asks 70000 MB memory, the largest node has 65536 MB memory "
            "(node.memory_mb, or memory_mb in nodes, in the simulator settings)",
        ),
        (
            "default",
            [Demand(1, 128, 1)],
            "an instance asks 1 gpu, but the cluster has no gpus "
            "(set gpus_per_node in the simulator settings to simulate some)",
        ),
        (
            "default",
            [Demand(16, 8192)],
            "an instance asks 16 cpu and 8192 MB memory; no node has all of that (the nodes' "
            "sizes are node or nodes in the simulator settings)",
        ),
        (
            "small",
            [Demand(4, 1024)] * 3,
            "needs 12 cpu in total, more than the quota of vc small (8 cpu; virtual_clusters "
            "in the simulator settings)",
        ),
        (
            "default",
            [Demand(3, 3000)] * 3,
            "even an empty cluster fits only 2 of the 3 instances at once; "
            "the nodes are too small for this mix (node_count, node or nodes in the simulator "
            "settings)",
        ),
    ],
)
def test_an_attempt_that_can_never_fit_is_refused(
    vc: str, demands: list[Demand], reason: str
) -> None:
    c = cluster(NEVER)
    assert c.never_fits(vc, demands) == reason
    with pytest.raises(NeverFits) as caught:
        c.place("a", vc, demands)
    assert caught.value.reason == reason
    assert not c.holds("a")


def test_release_one_instance_then_the_rest() -> None:
    c = cluster("node_count: 1\nnode: {cpu: 8, memory_mb: 4096}\ngpus_per_node: 2")
    c.place("a", "default", [Demand(2, 512, 1), Demand(1, 256), Demand(1, 256, 1)])
    c.release_one("a", 0)
    c.release_one("a", 0)  # twice is harmless
    assert used(c)["node-0"] == Capacity(2, 512, 1)
    assert c.place("b", "default", [Demand(1, 128, 1)]) == Placed((Slot("node-0", (0,)),))
    c.release("a")
    assert used(c)["node-0"] == Capacity(1, 128, 1)
    assert not c.holds("a")
    c.release("a")  # and so is releasing what is gone
    c.release_one("b", 0)
    assert used(c)["node-0"] == Capacity(0, 0, 0)
    assert not c.holds("b")


def test_one_released_instance_is_placed_again_on_its_own() -> None:
    c = cluster("node_count: 2\nnode: {cpu: 4, memory_mb: 4096}\ngpus_per_node: 1")
    c.place("a", "default", [Demand(2, 512, 1), Demand(2, 512, 1)])
    assert used(c) == {"node-0": Capacity(2, 512, 1), "node-1": Capacity(2, 512, 1)}
    with pytest.raises(ValueError, match="demand 1 of attempt 'a' already holds resources"):
        c.place_one("a", "default", 1, Demand(2, 512, 1))
    c.release_one("a", 1)
    assert c.place("b", "default", [Demand(3, 512)]) == Placed((Slot("node-1", ()),))
    # cpu is free on node-0 and the gpu on node-1, but no node has both
    assert c.place_one("a", "default", 1, Demand(2, 512, 1), prefer="node-1") == Shortage(
        "no node has 2 free cpu, 512 MB free memory and 1 free gpu at once"
    )
    assert used(c) == {"node-0": Capacity(2, 512, 1), "node-1": Capacity(3, 512, 0)}
    with pytest.raises(NeverFits, match="the largest node has 4 cpu"):
        c.place_one("a", "default", 1, Demand(5, 512))
    c.release("b")
    assert c.place_one("a", "default", 1, Demand(2, 512, 1), prefer="node-1") == Placed(
        (Slot("node-1", (0,)),)
    )
    c.release("a")
    # after every instance gave its share back: the preferred node first, if it has room
    assert c.place_one("a", "default", 1, Demand(1, 256), prefer="node-1") == Placed(
        (Slot("node-1", ()),)
    )
    assert c.place_one("a", "default", 0, Demand(1, 256)) == Placed((Slot("node-0", ()),))
    assert used(c) == {"node-0": Capacity(1, 256, 0), "node-1": Capacity(1, 256, 0)}
    c.release_one("a", 1)
    c.release_one("a", 0)
    assert not c.holds("a")
    assert used(c)["node-1"] == Capacity(0, 0, 0)


def test_a_restarted_backend_adopts_what_runs() -> None:
    c = cluster("node_count: 2\nnode: {cpu: 8, memory_mb: 4096}\ngpus_per_node: 4")
    c.adopt("a", "default", [("node-1", Demand(4, 1024, 2), [0, 1]), None])
    node1 = next(n for n in c.usage().nodes if n.name == "node-1")
    assert (node1.used, node1.gpus_used, node1.instances) == (Capacity(4, 1024, 2), (0, 1), 1)
    placed = c.place("b", "default", [Demand(8, 1024, 4), Demand(4, 1024, 2)])
    assert placed == Placed((Slot("node-0", (0, 1, 2, 3)), Slot("node-1", (2, 3))))
    c.release_one("a", 0)
    assert not c.holds("a")
    with pytest.raises(ValueError, match="unknown node 'node-9'; the nodes are: node-0, node-1"):
        c.adopt("z", "default", [("node-9", Demand(1, 1), [])])
    with pytest.raises(ValueError, match="unknown virtual cluster 'x'; known: default"):
        c.adopt("z", "x", [("node-0", Demand(1, 1), [])])
    with pytest.raises(ValueError, match="node node-0 has no gpu 7"):
        c.adopt("z", "default", [("node-0", Demand(1, 1, 1), [7])])


CONCURRENT = """
node_count: 4
node: {cpu: 16, memory_mb: 4096}
gpus_per_node: 2
"""
JOB = [Demand(4, 1024, 1), Demand(4, 1024), Demand(4, 1024)]
PORTS = [("http", 1), ("ssh", 1), ("nccl", 2)]


def test_20_jobs_launched_at_once_get_no_capacity_or_port_twice() -> None:
    c = cluster(CONCURRENT)
    base = free_window(300)
    ports = PortAllocator(base, base + 300)
    start = threading.Barrier(20)
    outcome: dict[int, Placed | Shortage] = {}
    got_ports: dict[str, list[int]] = {}

    def launch(i: int) -> None:
        start.wait()
        outcome[i] = result = c.place(f"job{i}", "default", JOB)
        if isinstance(result, Placed):
            for k in range(len(JOB)):
                held = ports.allocate(f"job{i}/{k}", PORTS)
                got_ports[f"job{i}/{k}"] = [p for v in held.values() for p in v]

    threads = [threading.Thread(target=launch, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    placed = {i: r for i, r in outcome.items() if isinstance(r, Placed)}
    # 64 cpu / 12 cpu per job: exactly 5 jobs fit, the others wait with a reason
    assert len(placed) == 5
    assert {r.reason for r in outcome.values() if isinstance(r, Shortage)} == {
        "needs 12 cpu, 4 free in vc default; needs 3072 MB memory, 1024 MB free in vc default"
    }
    sums: dict[str, list[int]] = {n.name: [0, 0] for n in c.nodes}
    gpus: list[tuple[str, int]] = []
    for result in placed.values():
        for slot, demand in zip(result.slots, JOB, strict=True):
            sums[slot.node][0] += demand.cpu
            sums[slot.node][1] += demand.memory_mb
            gpus += [(slot.node, g) for g in slot.gpus]
    for node in c.usage().nodes:
        assert sums[node.name] == [node.used.cpu, node.used.memory_mb]
        assert node.used.cpu <= node.capacity.cpu and node.used.memory_mb <= 4096
    assert len(gpus) == len(set(gpus)) == 5
    every_port = [p for ps in got_ports.values() for p in ps]
    assert len(every_port) == 5 * 3 * 4
    assert len(set(every_port)) == len(every_port)


def test_20_jobs_waiting_and_finishing_never_overcommit() -> None:
    c = cluster(CONCURRENT)
    base = free_window(300)
    ports = PortAllocator(base, base + 300)
    ledger_lock = threading.Lock()
    cpu_in_use: Counter[str] = Counter()
    gpus_in_use: set[tuple[str, int]] = set()
    ports_in_use: set[int] = set()
    problems: list[str] = []
    finished: list[int] = []

    def run(i: int) -> None:
        def placed() -> Placed | None:
            result = c.place(f"job{i}", "default", JOB)
            return None if isinstance(result, Shortage) else result

        try:
            result = until(placed, f"job{i} placed", timeout=30, every=0.002)
        except NotInTime as late:
            problems.append(str(late))
            return
        held = [ports.allocate(f"job{i}/{k}", PORTS) for k in range(len(JOB))]
        mine = {p for h in held for v in h.values() for p in v}
        slots = [(s.node, g) for s in result.slots for g in s.gpus]
        with ledger_lock:
            for slot, demand in zip(result.slots, JOB, strict=True):
                cpu_in_use[slot.node] += demand.cpu
            if any(v > 16 for v in cpu_in_use.values()):
                problems.append(f"cpu overcommitted: {dict(cpu_in_use)}")
            if gpus_in_use & set(slots) or ports_in_use & mine:
                problems.append(f"job{i} got a gpu or port someone holds")
            gpus_in_use.update(slots)
            ports_in_use.update(mine)
        time.sleep(0.005)
        with ledger_lock:
            for slot, demand in zip(result.slots, JOB, strict=True):
                cpu_in_use[slot.node] -= demand.cpu
            gpus_in_use.difference_update(slots)
            ports_in_use.difference_update(mine)
        for k in range(len(JOB)):
            ports.release(f"job{i}/{k}")
        c.release(f"job{i}")
        finished.append(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert problems == []
    assert sorted(finished) == list(range(20))
    assert all(n.used == Capacity(0, 0, 0) for n in c.usage().nodes)
    assert ports.held() == {}
