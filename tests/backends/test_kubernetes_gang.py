"""The Kubernetes backend's gang and the faults Kubernetes inflicts, on a fake cluster with nodes
(tests/fake_kube_api.py schedules pods as kube-scheduler does; no cluster can run here): gangs
that cannot deadlock, a node lost under a running job, preemption, image pulls waited out, an
API server answering 429, a quota refusing pods, an init container out of memory."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends.base import EventKind, InstanceKey, LaunchRequest, ResourceRequest, RoleLaunch
from backends.kubernetes import KubernetesBackend
from backends.kubernetes_gang import GATE
from server.events import bus_for
from server.jobs.service import JobService
from server.shapes.job_states import JobState
from server.store import Store
from tests.backends.test_kubernetes_fake_cluster import (
    Events,
    allowed_by_role,
    backend_on,
    pod_of,
    settings,
)
from tests.fake_kube_api import FakeKubeAPI
from tests.waiting import until_async

pytestmark = pytest.mark.anyio


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as fake:
        yield fake
    used = fake.verbs()
    assert used <= allowed_by_role(), f"calls the Role does not allow: {used - allowed_by_role()}"


def gpu_job(job_id: str, pods: int = 4, gpus: int = 1) -> LaunchRequest:
    return LaunchRequest(
        job_id=job_id,
        job_name=job_id.split("-")[0],
        roles=[
            RoleLaunch(
                name="trainer",
                instances=pods,
                image="busybox:1.36",
                resources=ResourceRequest(cpu=2, memory_mb=1024, shm_mb=64, gpu=gpus),
                commands=["train"],
            )
        ],
    )


def pods_of(api: FakeKubeAPI, job_id: str) -> list[dict[str, Any]]:
    return [p for p in api.pods() if p["metadata"]["annotations"]["paigraph.io/job-id"] == job_id]


def gpus_held(api: FakeKubeAPI, job_id: str) -> int:
    """GPUs the job's pods hold: those of its pods bound to a node."""
    return sum(
        int(p["spec"]["containers"][0]["resources"]["requests"].get("nvidia.com/gpu", 0))
        for p in pods_of(api, job_id)
        if p["spec"].get("nodeName")
    )


def gpu_nodes(api: FakeKubeAPI, count: int = 2, gpus: int = 2) -> None:
    for n in range(count):
        api.add_node(f"gpu-{n}", cpu=16, memory_mi=65536, gpus=gpus)


# --- a gang that cannot deadlock -----------------------------------------------------------------


async def test_two_gpu_gangs_with_room_for_one_run_one_after_the_other(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    gpu_nodes(api)  # 4 GPUs in all: one 4-pod gang at a time
    async with backend_on(api, tmp_path, gang_scheduler="gates") as backend:
        events = Events(backend)
        first, second = gpu_job("first-0000aaaa"), gpu_job("second-0000bbbb")
        await backend.launch(first)
        await backend.launch(second)
        await events.until(
            lambda: len([e for e in events.of(EventKind.PLACED) if e.job_id == first.job_id]) == 4
        )
        waiting = await events.until(
            lambda: [e for e in events.of(EventKind.WAITING) if e.job_id == second.job_id]
        )
        assert "waiting for room in the cluster" in (waiting[-1].reason or "")
        assert "nvidia.com/gpu" in (waiting[-1].reason or "")
        # the one that runs holds all four GPUs; the other holds none: its pods are gated
        assert gpus_held(api, first.job_id) == 4
        assert gpus_held(api, second.job_id) == 0
        assert len(pods_of(api, second.job_id)) == 4
        assert all(
            p["spec"]["schedulingGates"] == [{"name": GATE}] for p in pods_of(api, second.job_id)
        )
        assert not [e for e in events.of(EventKind.PLACED) if e.job_id == second.job_id]

        # the first ends: its room goes to the second, whole
        for pod in pods_of(api, first.job_id):
            api.run(pod["metadata"]["name"])
            api.exit(pod["metadata"]["name"], 0)
        await events.until(
            lambda: len([e for e in events.of(EventKind.PLACED) if e.job_id == second.job_id]) == 4
        )
        assert gpus_held(api, second.job_id) == 4
        assert {e.kind for e in events.ended_all() if e.job_id == first.job_id} == {
            EventKind.EXITED
        }
        assert not [e for e in events.ended_all() if e.job_id == second.job_id]
        events.close()


async def test_a_gang_that_fits_nowhere_waits_gated_and_times_out_with_openpais_code(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    gpu_nodes(api, count=1, gpus=2)
    async with backend_on(api, tmp_path, gang_scheduler="gates", gang_timeout_seconds=2) as backend:
        events = Events(backend)
        await backend.launch(gpu_job("big-0000eeee"))
        ended = await events.until(lambda: len(events.ended()) == 4 and events.ended())
        assert {(e.kind, e.completion_code) for e in ended.values()} == {
            (EventKind.START_FAILED, 251)  # JobGangAllocationTimeout: retried after a back-off
        }
        assert "waiting for room in the cluster" in (ended["trainer-0"].reason or "")
        # nothing was ever placed or started, and nothing held a GPU
        assert not events.of(EventKind.PLACED) and not events.of(EventKind.STARTED)
        assert api.bound() == {}
        events.close()


async def test_a_gang_waiting_for_memory_says_how_much_in_gi_and_mi(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    """The reason a user reads names memory as the pods ask for it (Gi, Mi), never in bytes."""
    api.add_node("small", cpu=16, memory_mi=3 * 1024 + 512, gpus=0)
    async with backend_on(api, tmp_path, gang_scheduler="gates") as backend:
        events = Events(backend)
        request = LaunchRequest(
            job_id="hungry-0000ffff",
            job_name="hungry",
            roles=[
                RoleLaunch(
                    name="trainer",
                    instances=2,
                    image="busybox:1.36",
                    resources=ResourceRequest(cpu=1, memory_mb=8192, shm_mb=64),
                    commands=["train"],
                )
            ],
        )
        await backend.launch(request)
        waiting = await events.until(
            lambda: [
                e for e in events.of(EventKind.WAITING) if "fits on no node" in (e.reason or "")
            ]
        )
        reason = waiting[-1].reason or ""
        assert "memory 8Gi" in reason, reason  # what one pod asks
        assert "memory 3.5Gi" in reason, reason  # the most the node has left
        assert not any(str(n) in reason for n in (8 * 1024**3, (3 * 1024 + 512) * 1024**2))
        await backend.stop(request.job_id, 1, grace_seconds=1)
        events.close()


async def test_a_gang_not_bound_in_time_is_taken_back_whole_and_queued_again(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    """The server's view said it fits, but the scheduler does not bind (down, or far behind):
    the gang is taken back whole, queued again with new gated pods, and runs once it can."""
    gpu_nodes(api)
    async with backend_on(
        api, tmp_path, gang_scheduler="gates", gang_bind_seconds=1, gang_timeout_seconds=0
    ) as backend:
        events = Events(backend)
        api.pause_scheduler()
        await backend.launch(gpu_job("late-0000ffff", pods=2))
        taken = await events.until(
            lambda: [e for e in events.of(EventKind.WAITING) if "taken back" in (e.reason or "")]
        )
        assert "only 0 of 2 pod(s) were bound within 1 s" in (taken[0].reason or "")
        assert not events.ended_all()  # nothing failed: it waits in the queue again
        api.pause_scheduler(False)
        await events.until(lambda: len(events.of(EventKind.PLACED)) == 2)
        assert len(api.bound()) == 2
        runs = {p["metadata"]["labels"]["paigraph.io/run"] for p in api.pods()}
        assert runs != {"1"} and len(api.pods()) == 2  # new pods; the first ones are gone
        events.close()


# --- faults --------------------------------------------------------------------------------------


async def test_a_lost_node_ends_its_instances_as_lost_and_the_job_retries(
    api: FakeKubeAPI, tmp_path: Path, store: Store, db_url: str
) -> None:
    api.add_node("node-a", cpu=8, memory_mi=8192)
    api.add_node("node-b", cpu=8, memory_mi=8192)
    bus = bus_for(db_url)
    service = JobService(
        store, KubernetesBackend(settings(api, tmp_path, gang_scheduler="gates")), bus
    )
    await service.start()
    try:
        user = store.create_user("nora", admin=True)[0]
        config = {
            "protocolVersion": 2,
            "name": "nodeloss",
            "type": "job",
            "jobRetryCount": 1,
            "prerequisites": [{"name": "bb", "type": "dockerimage", "uri": "busybox:1.36"}],
            "taskRoles": {
                "worker": {
                    "instances": 2,
                    "dockerImage": "bb",
                    "resourcePerInstance": {"cpu": 1, "memoryMB": 256, "gpu": 0},
                    "commands": ["sleep 1000"],
                }
            },
        }
        outcome = await service.submit(user, json.dumps(config))
        assert outcome.errors == [] and outcome.job is not None
        job_id = outcome.job.id

        def job() -> Any:
            return store.get_job(job_id)

        bound = await until_async(lambda: len(api.bound()) == 2 and api.bound(), "bound", 20, 0.1)
        for name in bound:
            api.run(name)
        await until_async(lambda: job().state is JobState.RUNNING, "the job running", 20, 0.1)
        # both pods went to node-a (the first with room); its kubelet goes away
        assert set(bound.values()) == {"node-a"}
        stuck = api.lose_node("node-a")
        assert all(api.get("pods", "jobs", name)["metadata"]["deletionTimestamp"] for name in stuck)
        # stuck Terminating past their grace period (2 s): force-deleted, lost with the node;
        # the job retries by its policy, its new pods bound to the node that answers
        retried = await until_async(lambda: job().attempt == 2 and job(), "a retry", 40, 0.2)
        assert retried.retries == 1
        for name in stuck:
            assert api.get("pods", "jobs", name) is None
        first = store.instances_for_jobs([job_id], all_attempts=True)[job_id]
        # the first instance lost decides the attempt (the other is stopped with it)
        lost = [i for i in first if i.attempt == 1 and i.state is JobState.FAILED]
        assert lost, first
        for instance in lost:
            assert "stayed Terminating on node node-a" in (instance.exit_reason or "")
            assert "the node running the instance stopped answering" in (instance.exit_reason or "")
        now_bound = await until_async(
            lambda: len(api.bound()) == 2 and api.bound(), "the retry bound", 20, 0.1
        )
        assert set(now_bound.values()) == {"node-b"}
    finally:
        await service.close()
        await bus.close()


async def test_preemption_and_init_container_oom_get_openpais_codes(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    api.add_node("node-a", cpu=8, memory_mi=8192)
    async with backend_on(api, tmp_path, gang_scheduler="gates") as backend:
        events = Events(backend)
        request = gpu_job("faults-0000abcd", pods=2, gpus=0)
        await backend.launch(request)
        await events.until(lambda: len(events.of(EventKind.PLACED)) == 2)
        api.run(pod_of(api, "trainer-0"))
        await events.until(lambda: events.of(EventKind.STARTED))
        api.preempt(pod_of(api, "trainer-0"))
        api.init_oom(pod_of(api, "trainer-1"))
        # (the preempted pod's end is told once its log is settled, which takes a while for a
        # pod already deleted)
        ended = await events.until(lambda: len(events.ended()) == 2 and events.ended(), 30)
        preempted, oom = ended["trainer-0"], ended["trainer-1"]
        # preempted: its real exit (SIGTERM, 143) is kept, with PodPreemptedForCriticalPod
        assert (preempted.kind, preempted.exit_code, preempted.completion_code) == (
            EventKind.EXITED,
            143,
            -1003,
        )
        assert (preempted.reason or "").startswith("PreemptionByScheduler")
        assert (oom.kind, oom.completion_code) == (EventKind.START_FAILED, -1300)
        assert "ran out of memory" in (oom.reason or "")
        events.close()


async def test_image_pull_errors_are_waited_out_until_their_deadline(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    api.add_node("node-a", cpu=8, memory_mi=8192)
    async with backend_on(
        api, tmp_path, gang_scheduler="gates", image_pull_deadline_seconds=1
    ) as backend:
        events = Events(backend)
        await backend.launch(gpu_job("pull-0000aaaa", pods=2, gpus=0))
        await events.until(lambda: len(events.of(EventKind.PLACED)) == 2)
        # one pull fails once and then succeeds, as after a registry's hiccup: the kubelet's
        # retry is awaited, and the instance starts
        api.waiting(pod_of(api, "trainer-0"), "ErrImagePull", "registry: 503 Service Unavailable")
        api.run(pod_of(api, "trainer-0"))
        await events.until(lambda: events.of(EventKind.STARTED))
        # the other keeps failing: past the deadline it fails with OpenPAI's code for it
        api.waiting(pod_of(api, "trainer-1"), "ImagePullBackOff", 'Back-off pulling "busybox"')
        ended = await events.until(lambda: events.ended())
        assert list(ended) == ["trainer-1"]
        failed = ended["trainer-1"]
        assert (failed.kind, failed.completion_code) == (EventKind.START_FAILED, 254)
        assert "ImagePullBackOff" in (failed.reason or "")
        assert "still failing after 1 s" in (failed.reason or "")
        events.close()


async def test_creates_answered_429_are_retried_and_a_quota_refusal_is_not(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    api.add_node("node-a", cpu=8, memory_mi=8192)
    api.page_size = 1  # every listing of the gang's view comes in pages
    async with backend_on(api, tmp_path, gang_scheduler="gates") as backend:
        events = Events(backend)
        api.refuse("create", "pods", 429, times=2)
        api.refuse("create", "services", 503)
        await backend.launch(gpu_job("busy-0000aaaa", pods=2, gpus=0))
        await events.until(lambda: len(events.of(EventKind.PLACED)) == 2)
        assert api.calls.count(("create", "pods")) == 4  # two refused, then both made
        assert api.calls.count(("create", "services")) == 2
        assert api.continued  # the room was read page by page

        quota = (
            'pods "x" is forbidden: exceeded quota: team-a, requested: cpu=2, used: cpu=8, '
            "limited: cpu=8"
        )
        api.refuse("create", "pods", 403, quota, times=2)
        before = api.calls.count(("create", "pods"))
        await backend.launch(gpu_job("quota-0000bbbb", pods=2, gpus=0))
        ended = await events.until(
            lambda: (
                len([e for e in events.ended_all() if e.job_id == "quota-0000bbbb"]) == 2
                and [e for e in events.ended_all() if e.job_id == "quota-0000bbbb"]
            )
        )
        assert {(e.kind, e.completion_code) for e in ended} == {(EventKind.START_FAILED, -200)}
        assert "exceeded quota: team-a" in (ended[0].reason or "")
        assert "not retried" in (ended[0].reason or "")
        assert api.calls.count(("create", "pods")) - before == 2  # each tried once
        events.close()


async def test_a_volcano_gang_is_one_pod_group_of_all_the_pods(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    async with backend_on(api, tmp_path, gang_scheduler="volcano") as backend:
        await backend.launch(gpu_job("vc-0000aaaa", pods=3))
        await asyncio.to_thread(api.wait_for_pods, 3)
        (group,) = api.list("podgroups", "jobs")
        assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
        assert group["spec"]["minMember"] == 3  # the whole attempt, not 1 per pod
        assert group["spec"]["minResources"]["nvidia.com/gpu"] == "3"
        service = api.list("services", "jobs")[0]["metadata"]["uid"]
        assert group["metadata"]["ownerReferences"][0]["uid"] == service
        for pod in api.pods():
            assert pod["spec"]["schedulerName"] == "volcano"
            assert (
                pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"]
                == (group["metadata"]["name"])
            )
            assert "schedulingGates" not in pod["spec"]


async def test_a_gang_timeout_keeps_the_real_end_of_a_pod_that_ended_meanwhile(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    """With a scheduler that binds pods one by one, one pod ran and failed while its peer
    found no node: its own exit code is told, not the gang's timeout, and nothing claims the
    peer was ever placed or started."""
    async with backend_on(api, tmp_path, gang_timeout_seconds=2) as backend:
        events = Events(backend)
        await backend.launch(gpu_job("half-0000aaaa", pods=2, gpus=0))
        await asyncio.to_thread(api.wait_for_pods, 2)
        api.schedule(pod_of(api, "trainer-0"), node="node-a")
        api.unschedulable(pod_of(api, "trainer-1"), "0/1 nodes are available: 1 Insufficient cpu.")
        api.run(pod_of(api, "trainer-0"))
        api.exit(pod_of(api, "trainer-0"), 3)
        ended = await events.until(lambda: len(events.ended()) == 2 and events.ended())
        assert (ended["trainer-0"].kind, ended["trainer-0"].exit_code) == (EventKind.EXITED, 3)
        assert ended["trainer-0"].completion_code is None
        late = ended["trainer-1"]
        assert (late.kind, late.completion_code) == (EventKind.START_FAILED, 251)
        assert "1 Insufficient cpu" in (late.reason or "")
        assert not [e for e in events.of(EventKind.PLACED) if e.role == "trainer" and e.index == 1]
        assert not events.of(EventKind.STARTED)
        events.close()


async def test_a_queued_gang_is_admitted_by_a_restarted_server(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    gpu_nodes(api, count=1)
    request = gpu_job("queued-0000aaaa")
    async with backend_on(api, tmp_path, gang_scheduler="gates") as backend:
        events = Events(backend)
        await backend.launch(request)
        await events.until(lambda: events.of(EventKind.WAITING))
        events.close()
    assert api.bound() == {} and len(api.pods()) == 4  # gated, left in the cluster
    async with backend_on(api, tmp_path, gang_scheduler="gates") as again:
        events = Events(again)
        api.add_node("gpu-9", cpu=16, memory_mi=65536, gpus=2)  # now there is room
        # (room that comes from outside is seen at the next periodic read, within 10 s)
        await events.until(lambda: len(events.of(EventKind.PLACED)) == 4, 30)
        assert gpus_held(api, request.job_id) == 4
        events.close()


async def test_without_the_right_to_read_nodes_gangs_wait_and_say_why(
    api: FakeKubeAPI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gpu_nodes(api)
    forbidden = (
        'nodes is forbidden: User "system:serviceaccount:paigraph:paigraph" cannot list '
        'resource "nodes" in API group "" at the cluster scope'
    )
    api.refuse("list", "nodes", 403, forbidden, times=1000)
    async with backend_on(api, tmp_path, gang_scheduler="gates") as backend:
        assert "cannot list nodes" in caplog.text and "cluster-role.yaml" in caplog.text
        events = Events(backend)
        await backend.launch(gpu_job("blind-0000aaaa", pods=2))
        waiting = await events.until(lambda: events.of(EventKind.WAITING))
        assert forbidden in (waiting[0].reason or "")
        assert "ClusterRole paigraph-gang" in (waiting[0].reason or "")
        assert api.bound() == {}  # nothing half-placed meanwhile
        events.close()


async def test_an_instance_run_again_after_its_gang_formed_is_not_gated_and_is_bound(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    api.add_node("node-a", cpu=8, memory_mi=8192)
    async with backend_on(api, tmp_path, gang_scheduler="gates") as backend:
        events = Events(backend)
        request = gpu_job("again-0000abcd", pods=2, gpus=0)
        await backend.launch(request)
        await events.until(lambda: len(events.of(EventKind.PLACED)) == 2)
        for host in ("trainer-0", "trainer-1"):
            api.run(pod_of(api, host))
        api.exit(pod_of(api, "trainer-1"), 3)
        await events.until(lambda: events.ended().get("trainer-1"))

        await backend.relaunch(request_key(request, "trainer", 1), 2)
        again = await until_async(
            lambda: pod_of(api, "trainer-1").endswith("-r2") and pod_of(api, "trainer-1"),
            "trainer-1's second pod",
            10,
            0.05,
        )
        # the gang formed once: its second run is one pod the scheduler places alone
        pod = api.get("pods", "jobs", again)
        assert pod is not None and "schedulingGates" not in pod["spec"]
        placed = await events.until(
            lambda: [e for e in events.of(EventKind.PLACED) if e.run == 2], 10
        )
        assert placed[0].placement is not None and placed[0].placement.node == "node-a"
        await backend.stop(request.job_id, request.attempt, grace_seconds=1)
        events.close()


def request_key(request: LaunchRequest, role: str, index: int) -> InstanceKey:
    return InstanceKey(job_id=request.job_id, attempt=request.attempt, role=role, index=index)
