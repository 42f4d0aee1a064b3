"""The scheduler's decisions as values: given nodes, ports and a gang (or one instance to start
again), what it decides and what a user is then told. No Docker: the decisions are made on a
real simulated cluster and a real port allocator (ports are bind-checked on this host)."""

from __future__ import annotations

import threading

from simulator.cluster import Cluster, Demand, Slot
from simulator.ports import PortAllocator, PortAsk
from simulator.scheduler import (
    DropInstance,
    GangAsk,
    PlaceGang,
    PlaceInstance,
    RefuseGang,
    Scheduler,
    SoloAsk,
    WaitGang,
    WaitInstance,
)
from simulator.settings import settings_from_yaml
from tests.simulator.test_ports import free_window

TWO_NODES = "node_count: 2\nnode: {cpu: 4, memory_mb: 4096}"


def scheduler(
    yaml_text: str = TWO_NODES, ports: int = 8
) -> tuple[Scheduler[str], Cluster, PortAllocator]:
    """A scheduler on a simulated cluster and a window of `ports` free host ports."""
    settings = settings_from_yaml(yaml_text, environ={"PAIGRAPH_SIMULATOR_STATE": "/tmp/x"})
    base = free_window(ports)
    cluster, allocator = Cluster(settings, host_gpus=()), PortAllocator(base, base + ports)
    return Scheduler(cluster, allocator, threading.RLock()), cluster, allocator


def gang(attempt_id: str, cpus: list[int], *, ports_each: int = 0) -> GangAsk:
    """A gang of one instance per entry of `cpus`, each asking that many cpus and 512 MB."""
    return GangAsk(
        attempt_id=attempt_id,
        virtual_cluster="default",
        demands=[Demand(cpu, 512) for cpu in cpus],
        port_asks=[
            (f"{attempt_id}/{n}", [PortAsk("http", ports_each)] if ports_each else [])
            for n in range(len(cpus))
        ],
    )


def used_cpus(cluster: Cluster) -> int:
    return sum(node.used.cpu for node in cluster.usage().nodes)


def test_a_gang_that_fits_is_placed_with_a_slot_and_ports_for_each_instance_in_its_order() -> None:
    s, cluster, ports = scheduler()
    s.add("job#1")
    decision = s.decide_gang(gang("job#1", [1, 3, 2], ports_each=2))
    assert isinstance(decision, PlaceGang)
    # the largest first, packed: the 3-cpu one and then the 1-cpu one fill node-0, the
    # 2-cpu one (no room left beside the 3) goes to node-1; slots come in the gang's order
    assert decision.slots == (Slot("node-0", ()), Slot("node-0", ()), Slot("node-1", ()))
    assert [sorted(p) for p in decision.ports] == [["http"]] * 3
    ports = [port for held in decision.ports for port in held["http"]]
    assert len(ports) == len(set(ports)) == 6  # two each, none shared
    assert used_cpus(cluster) == 6  # held from the decision on
    assert s.turns() == ([], ["job#1"])  # queued until the backend takes it
    s.take_gang(decision)
    assert s.turns() == ([], []) and not s.pending()


def test_a_gang_that_can_never_fit_is_refused_saying_why_and_leaves_the_queue() -> None:
    s, cluster, _ = scheduler()
    s.add("huge#1")
    s.add("next#1")
    decision = s.decide_gang(gang("huge#1", [8]))
    assert isinstance(decision, RefuseGang)
    assert decision.attempt_id == "huge#1"
    # what the job is told: what it asks and what the largest node has
    assert decision.reason.startswith("an instance asks 8 cpu, the largest node has 4 cpu")
    assert s.turns() == ([], ["next#1"])
    assert used_cpus(cluster) == 0


def test_a_gang_that_does_not_fit_now_waits_saying_what_is_missing_then_is_placed() -> None:
    s, cluster, _ = scheduler()
    s.add("first#1")
    s.add("second#1")
    first = s.decide_gang(gang("first#1", [3, 3]))
    assert isinstance(first, PlaceGang)
    s.take_gang(first)
    waiting = s.decide_gang(gang("second#1", [2, 2]))
    assert waiting == WaitGang("second#1", "needs 4 cpu, 2 free in vc default")
    assert s.turns() == ([], ["second#1"])  # still queued, nothing held for it
    assert used_cpus(cluster) == 6
    cluster.release("first#1")  # the first attempt ended
    assert isinstance(s.decide_gang(gang("second#1", [2, 2])), PlaceGang)


def test_while_the_engine_is_away_a_gang_waits_with_that_reason_and_holds_nothing() -> None:
    s, cluster, _ = scheduler()
    s.add("job#1")
    outage = "waiting for the Docker engine: connection refused"
    assert s.decide_gang(gang("job#1", [1]), outage) == WaitGang("job#1", outage)
    assert used_cpus(cluster) == 0
    assert s.turns() == ([], ["job#1"])


def test_a_gang_whose_ports_are_short_waits_for_ports_and_gives_its_capacity_back() -> None:
    s, cluster, _ = scheduler(ports=4)
    s.add("job#1")
    decision = s.decide_gang(gang("job#1", [1, 1, 1], ports_each=2))  # 6 ports of 4
    assert isinstance(decision, WaitGang)
    assert decision.reason.startswith("waiting for ports: "), decision.reason
    assert used_cpus(cluster) == 0  # all or none: the cluster's hold was given back
    [vc] = cluster.usage().vcs
    assert vc.free == vc.quota


def test_instances_to_start_again_come_before_attempts_which_come_in_arrival_order() -> None:
    s, _, _ = scheduler()
    s.add("a#1")
    s.add("b#1")
    s.add_first("placed-before#1")
    s.add_relaunch("c#1/worker-0")
    s.add_relaunch_first("c#1/ps-0")
    assert s.turns() == (["c#1/ps-0", "c#1/worker-0"], ["placed-before#1", "a#1", "b#1"])


def solo(instance: str, *, node: str, ports: list[PortAsk]) -> SoloAsk:
    """The ask of an instance of a placed gang "job#1" (position 0) that ran on `node`."""
    return SoloAsk(
        attempt_id="job#1",
        virtual_cluster="default",
        position=0,
        demand=Demand(1, 512),
        prefer_node=node,
        port_owner=instance,
        port_asks=[PortAsk("http", 1)],
        same_ports=ports,
    )


def placed_gang(s: Scheduler[str]) -> PlaceGang:
    s.add("job#1")
    decision = s.decide_gang(gang("job#1", [1, 4], ports_each=1))
    assert isinstance(decision, PlaceGang)
    s.take_gang(decision)
    return decision


def test_an_instance_started_again_goes_back_to_its_node_and_gets_its_old_port() -> None:
    s, cluster, ports = scheduler()
    gang_placed = placed_gang(s)
    node, port = gang_placed.slots[0].node, gang_placed.ports[0]["http"][0]
    cluster.release_one("job#1", 0)  # it ended: what it held went back
    ports.release("job#1/0")
    s.add_relaunch("job#1/0")
    ask = solo("job#1/0", node=node, ports=[PortAsk("http", 1, begin_at=port)])
    decision = s.decide_instance("job#1/0", ask)
    assert isinstance(decision, PlaceInstance)
    assert decision.placed.slots[0].node == node
    assert decision.ports == {"http": [port]}
    assert s.take_instance("job#1/0", stopping=False)
    assert s.turns() == ([], [])


def test_an_instance_whose_peers_were_never_placed_is_dropped_saying_why() -> None:
    s, _, _ = scheduler()
    s.add_relaunch("job#1/0")
    reason = "cannot run on its own: its attempt was never placed"
    assert s.decide_instance("job#1/0", reason) == DropInstance(reason)
    assert s.turns() == ([], [])


def test_an_instance_without_room_to_start_again_waits_saying_what_is_missing() -> None:
    s, cluster, _ = scheduler()
    placed_gang(s)
    s.add("other#1")
    cluster.release_one("job#1", 0)
    other = s.decide_gang(gang("other#1", [4]))  # takes the room the instance had
    assert isinstance(other, PlaceGang)
    s.add_relaunch("job#1/0")
    ask = solo("job#1/0", node="node-0", ports=[])
    decision = s.decide_instance("job#1/0", ask)
    assert isinstance(decision, WaitInstance)
    assert decision.reason == "needs 1 cpu, 0 free in vc default"
    assert s.turns()[0] == ["job#1/0"]


def test_an_instance_placed_while_its_attempt_stops_is_not_taken_and_gives_back_its_hold() -> None:
    s, cluster, ports = scheduler()
    placed_gang(s)
    cluster.release_one("job#1", 0)
    ports.release("job#1/0")
    before = used_cpus(cluster)
    s.add_relaunch("job#1/0")
    decision = s.decide_instance("job#1/0", solo("job#1/0", node="node-0", ports=[]))
    assert isinstance(decision, PlaceInstance)
    assert used_cpus(cluster) == before + 1
    assert not s.take_instance("job#1/0", stopping=True)
    s.give_back(decision)
    assert used_cpus(cluster) == before
