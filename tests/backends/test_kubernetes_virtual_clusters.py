"""Virtual clusters on Kubernetes, on the fake API server (tests/fake_kube_api.py): one namespace
per virtual cluster (`namespace_per_virtual_cluster`), which works with the ClusterRole of
deploy/kubernetes/namespace-per-virtual-cluster and fails clearly without it, and a virtual
cluster's capacity kept as a ResourceQuota on its namespace, which Kubernetes' quota admission
(tests/fake_kube_quota.py) enforces on the jobs' pods."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends.base import (
    BackendError,
    EventKind,
    LaunchRefused,
    LaunchRequest,
    ResourceRequest,
    RoleLaunch,
)
from backends.kubernetes import KubernetesBackend
from backends.kubernetes_manifests import manifest_stream
from backends.kubernetes_quota import QUOTA_NAME
from backends.kubernetes_settings import SettingsError, load_settings
from tests.backends.test_kubernetes_fake_cluster import Events, backend_on, log_text, settings
from tests.fake_kube_admission import ENFORCE
from tests.fake_kube_api import FakeKubeAPI, deployed_rules

pytestmark = pytest.mark.anyio

TEAM_A, TEAM_B = "paigraph-vc-team-a", "paigraph-vc-team-b"


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    """A cluster with the variant's ClusterRole, and the two virtual clusters' namespaces."""
    rules = deployed_rules(per_virtual_cluster=True)
    with FakeKubeAPI(rbac=rules) as fake:
        for namespace in (TEAM_A, TEAM_B):
            fake.label_namespace(namespace, **{ENFORCE: "baseline"})
        yield fake
    granted = {(g.verb, g.resource) for g in rules.grants}
    assert fake.verbs() <= granted, (
        f"calls deploy/kubernetes does not grant: {fake.verbs() - granted}"
    )


def job(job_id: str, vc: str, pods: int = 1, cpu: int = 1) -> LaunchRequest:
    return LaunchRequest(
        job_id=job_id,
        job_name=job_id.split("-")[0],
        virtual_cluster=vc,
        roles=[
            RoleLaunch(
                name="worker",
                instances=pods,
                image="busybox:1.36",
                resources=ResourceRequest(cpu=cpu, memory_mb=256, shm_mb=64),
                commands=["work"],
            )
        ],
    )


def finish(api: FakeKubeAPI, namespace: str, code: int) -> None:
    for name in api.pod_names(namespace):
        api.schedule(name, namespace=namespace)
        api.run(name, namespace=namespace)
        api.exit(name, code, namespace=namespace)


# --- one namespace per virtual cluster -----------------------------------------------------------


async def test_each_virtual_clusters_jobs_run_in_its_namespace_and_are_adopted_there(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    a, b = job("alpha-0000aaaa", "team-a"), job("beta-0000bbbb", "team-b")
    async with backend_on(api, tmp_path, namespace_per_virtual_cluster=True) as backend:
        events = Events(backend)
        await backend.launch(a)
        await backend.launch(b)
        api.wait_for_pods(1, TEAM_A)
        api.wait_for_pods(1, TEAM_B)
        # every object of an attempt is in its virtual cluster's namespace, none in `jobs`
        for namespace, request in ((TEAM_A, a), (TEAM_B, b)):
            for resource in ("services", "configmaps", "networkpolicies", "pods"):
                (made,) = api.list(resource, namespace)
                assert made["metadata"]["labels"]["paigraph.io/job"] == request.job_id
        assert api.pods("jobs") == [] and api.list("services", "jobs") == []
        (b_pod,) = api.pod_names(TEAM_B)
        api.schedule(b_pod, namespace=TEAM_B)
        api.run(b_pod, namespace=TEAM_B)
        api.write_log(b_pod, "beta's output\n")
        finish(api, TEAM_B, 0)
        await events.until(lambda: events.ended_all())
        assert [(e.job_id, e.kind, e.exit_code) for e in events.ended_all()] == [
            (b.job_id, EventKind.EXITED, 0)
        ]
        # its output is read from its own namespace
        (ended,) = events.ended_all()
        assert ended.key is not None
        assert await log_text(backend, ended.key) == "beta's output\n"
        events.close()
    # a restarted server finds the running attempt in its namespace and follows it
    async with backend_on(api, tmp_path, namespace_per_virtual_cluster=True) as backend:
        events = Events(backend)
        adopted = {r.key.job_id for r in await backend.reconcile()}
        assert adopted == {a.job_id, b.job_id}
        finish(api, TEAM_A, 3)
        ended = await events.until(lambda: [e for e in events.ended_all() if e.job_id == a.job_id])
        assert [(e.kind, e.exit_code) for e in ended] == [(EventKind.EXITED, 3)]
        await backend.forget(a.job_id, 1)
        await backend.forget(b.job_id, 1)
        events.close()
    for namespace in (TEAM_A, TEAM_B):
        assert api.list("services", namespace) == [] and api.pods(namespace) == []
    # the pods were watched, and the attempts found, cluster-wide
    assert {("watch", "pods"), ("list", "configmaps")} <= api.verbs()


async def test_without_the_cluster_role_the_server_says_what_it_needs(tmp_path: Path) -> None:
    with FakeKubeAPI() as api:  # deploy/kubernetes as it is: a Role in the jobs' namespace
        backend = KubernetesBackend(settings(api, tmp_path, namespace_per_virtual_cluster=True))
        with pytest.raises(BackendError) as refused:
            backend.check()
    message = str(refused.value)
    assert "namespace_per_virtual_cluster needs the server's rights in every namespace" in message
    assert "deploy/kubernetes/namespace-per-virtual-cluster" in message
    assert 'cannot list resource "configmaps"' in message


async def test_a_virtual_cluster_without_its_namespace_is_refused_clearly(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    async with backend_on(api, tmp_path, namespace_per_virtual_cluster=True) as backend:
        with pytest.raises(LaunchRefused) as refused:
            await backend.launch(job("gamma-0000cccc", "Team_C"))
    message = str(refused.value)
    assert "virtual cluster 'Team_C' has no namespace 'paigraph-vc-team-c-" in message
    assert 'namespaces "paigraph-vc-team-c-' in message


def test_namespace_names_follow_the_pattern_and_stay_namespace_names() -> None:
    per_vc = load_settings(
        environ={"PAIGRAPH_K8S_NAMESPACE_PER_VC": "true"}, virtual_cluster_namespace="ml-{vc}"
    )
    assert per_vc.namespace_for("research") == "ml-research"
    odd = per_vc.namespace_for("Research_Lab")
    assert odd.startswith("ml-research-lab-") and odd != per_vc.namespace_for("research-lab")
    assert len(per_vc.namespace_for("x" * 200)) <= 63
    shared = load_settings(environ={}, namespace="jobs")
    assert shared.namespace_for("research") == "jobs"
    # `paigraph resolve --manifests` shows where the objects would go
    shown = manifest_stream(job("delta-0000eeee", "research"), per_vc)
    assert "namespace: ml-research\n" in shown and "namespace: jobs" not in shown
    with pytest.raises(SettingsError, match=r"virtual_cluster_namespace: .*must hold \{vc\}"):
        load_settings(environ={}, virtual_cluster_namespace="ml")


# --- a ResourceQuota per virtual cluster ---------------------------------------------------------


def quota_settings(cpu: str, **more: Any) -> dict[str, Any]:
    return {
        "namespace_per_virtual_cluster": True,
        "virtual_cluster_quota": {"team-a": {"cpu": cpu, "memory": "8Gi", **more}},
    }


async def test_a_virtual_clusters_quota_is_kept_and_refuses_pods_past_it(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    async with backend_on(api, tmp_path, **quota_settings("4", gpu=2)):
        pass
    quota = api.get("resourcequotas", TEAM_A, QUOTA_NAME)
    assert quota is not None
    assert quota["spec"]["hard"] == {
        "requests.cpu": "4",
        "requests.memory": "8Gi",
        "requests.nvidia.com/gpu": "2",
    }
    # the capacity changes: the quota follows it, a limit no longer set goes
    async with backend_on(api, tmp_path, **quota_settings("2")) as backend:
        quota = api.get("resourcequotas", TEAM_A, QUOTA_NAME)
        assert quota is not None
        assert quota["spec"]["hard"] == {"requests.cpu": "2", "requests.memory": "8Gi"}
        events = Events(backend)
        first, second = job("first-0000aaaa", "team-a", 2), job("second-0000bbbb", "team-a")
        await backend.launch(first)
        api.wait_for_pods(2, TEAM_A)
        await backend.launch(second)  # one cpu more than the quota has left
        refused = await events.until(
            lambda: [e for e in events.ended_all() if e.job_id == second.job_id]
        )
        assert (refused[0].kind, refused[0].completion_code) == (EventKind.START_FAILED, -200)
        reason = refused[0].reason or ""
        assert f"exceeded quota: {QUOTA_NAME}, requested: requests.cpu=1" in reason, reason
        assert "used: requests.cpu=2, limited: requests.cpu=2" in reason
        assert "not retried" in reason
        # once the first job's pods have ended they no longer count: the next one is admitted
        finish(api, TEAM_A, 0)
        await events.until(lambda: len(events.ended_all()) == 3)
        third = job("third-0000cccc", "team-a")
        await backend.launch(third)
        api.wait_for_pods(3, TEAM_A)
        assert not [e for e in events.ended_all() if e.job_id == third.job_id]
        events.close()


def test_a_quota_per_virtual_cluster_needs_a_namespace_per_virtual_cluster() -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(environ={}, virtual_cluster_quota={"team-a": {"cpu": "4"}})
    message = str(refused.value)
    assert "needs namespace_per_virtual_cluster: true" in message
    assert "queue_of_virtual_cluster" in message  # Kueue's LocalQueues, the other way
    with pytest.raises(SettingsError, match=r"virtual_cluster_quota.team-a.memory: .*quantity"):
        load_settings(
            environ={},
            namespace_per_virtual_cluster=True,
            virtual_cluster_quota={"team-a": {"memory": "lots"}},
        )


async def test_a_quota_not_counted_yet_is_waited_out(api: FakeKubeAPI, tmp_path: Path) -> None:
    """Right after a quota is made, until the quota controller first counts what the namespace
    uses, the API server refuses pods with "status unknown for quota": that passes, so the
    create is tried again rather than the job failed."""
    async with backend_on(api, tmp_path, **quota_settings("4")) as backend:
        events = Events(backend)
        unknown = f'pods "x" is forbidden: status unknown for quota: {QUOTA_NAME}, resources: cpu'
        api.refuse("create", "pods", 403, unknown, times=2)
        request = job("early-0000dddd", "team-a")
        await backend.launch(request)
        assert len(api.wait_for_pods(1, TEAM_A)) == 1
        finish(api, TEAM_A, 0)
        ended = await events.until(lambda: events.ended_all())
        assert [(e.kind, e.exit_code) for e in ended] == [(EventKind.EXITED, 0)]
        events.close()


async def test_a_gang_past_its_quota_is_refused_whole_and_leaves_nothing(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    """Gated pods count against a quota as soon as they are made: a gang the quota cannot hold
    fails at once, every instance with -200, and the pods that were admitted go too."""
    api.add_node("node-1", cpu=32, memory_mi=65536)
    limits = quota_settings("16", pods=3)
    async with backend_on(api, tmp_path, gang_scheduler="gates", **limits) as backend:
        events = Events(backend)
        request = job("wide-0000ffff", "team-a", pods=4)
        await backend.launch(request)
        ended = await events.until(lambda: len(events.ended()) == 4 and events.ended())
        assert {(e.kind, e.completion_code) for e in ended.values()} == {
            (EventKind.START_FAILED, -200)
        }
        assert "exceeded quota: paigraph-virtual-cluster" in (ended["worker-0"].reason or "")
        # removed before the ends were told
        assert api.pods(TEAM_A) == [] and api.list("services", TEAM_A) == []
        events.close()
