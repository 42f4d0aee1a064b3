"""The Kubernetes backend on a real cluster: the two-role ps/worker job; isolation (the
server's and another user's claims refused, a NetworkPolicy per attempt, and with an enforcing
CNI another job's pod kept out); the restricted profile; the gang (two gangs with room for one);
node loss; a namespace and a ResourceQuota per virtual cluster.

Skipped unless PAIGRAPH_TEST_KUBECONFIG names a kubeconfig; the cluster must be able to pull
`busybox` (or the image in PAIGRAPH_TEST_K8S_IMAGE) and `alpine/git` (the barrier's image, or
PAIGRAPH_TEST_K8S_INIT_IMAGE). The namespace is the kubeconfig context's, or
PAIGRAPH_TEST_K8S_NAMESPACE. The restricted profile is tried in
PAIGRAPH_TEST_K8S_RESTRICTED_NAMESPACE, a namespace labelled
`pod-security.kubernetes.io/enforce=restricted`, or in one the test makes when
PAIGRAPH_TEST_K8S_CREATE_NAMESPACES=1 (which the virtual-cluster test needs too: it makes the
virtual cluster's namespace); the NetworkPolicy reachability test runs with
PAIGRAPH_TEST_K8S_NETWORK_POLICY=1, on a cluster whose network plugin enforces NetworkPolicy.
The gang test needs Kubernetes 1.30+ and the rights of deploy/kubernetes/cluster-role.yaml
(list nodes and pods cluster-wide). The node-loss test runs only when
PAIGRAPH_TEST_K8S_LOSE_NODE names a command that makes a node unreachable, `{node}` standing
for its name (with kind: `docker pause {node}`), and PAIGRAPH_TEST_K8S_RESTORE_NODE one that
brings it back (`docker unpause {node}`); it takes about six minutes, as Kubernetes evicts
from an unreachable node after 300 s. Everything the tests create is removed at their end.
docs/kubernetes.md ("Running the tests against a cluster") says how to run them on kind or
any cluster.

    PAIGRAPH_TEST_KUBECONFIG=~/.kube/config \
        pytest -q -rs tests/backends/test_kubernetes_real_cluster.py
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from backends.base import (
    EventKind,
    Fetch,
    InstanceEvent,
    InstanceKey,
    LaunchRefused,
    LaunchRequest,
    Material,
    ResourceRequest,
    RoleLaunch,
)
from backends.kubernetes import KubernetesBackend, api_client
from backends.kubernetes_gang import GATE, ClusterView
from backends.kubernetes_names import network_policy_name, service_name
from backends.kubernetes_quota import QUOTA_NAME
from backends.kubernetes_settings import KubernetesSettings
from tests.waiting import until_async

KUBECONFIG = os.environ.get("PAIGRAPH_TEST_KUBECONFIG")
IMAGE = os.environ.get("PAIGRAPH_TEST_K8S_IMAGE", "busybox:1.36")
INIT_IMAGE = os.environ.get("PAIGRAPH_TEST_K8S_INIT_IMAGE", "alpine/git:v2.36.1")
LOSE_NODE = os.environ.get("PAIGRAPH_TEST_K8S_LOSE_NODE", "")
RESTORE_NODE = os.environ.get("PAIGRAPH_TEST_K8S_RESTORE_NODE", "")
ENDED = (EventKind.EXITED, EventKind.STOPPED, EventKind.START_FAILED, EventKind.LOST)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not KUBECONFIG, reason="set PAIGRAPH_TEST_KUBECONFIG to run on a cluster"),
]

# The ps serves a CGI endpoint on its http port and exits once both workers were heard; each
# worker finds the ps by its stable name in PAI_TASK_ROLE_ps_HOST_LIST and posts to it.
PS = [
    "mkdir -p /tmp/www/cgi-bin",
    "printf '%s\\n' '#!/bin/sh' 'echo Content-Type: text/plain' 'echo'"
    " 'body=$(head -c \"$CONTENT_LENGTH\")' 'echo \"$body\" >> /tmp/heard'"
    " 'echo \"ack $body\"' > /tmp/www/cgi-bin/talk",
    "chmod +x /tmp/www/cgi-bin/talk && touch /tmp/heard",
    "httpd -p $PAI_CONTAINER_HOST_PORT -h /tmp/www",
    "while [ $(wc -l < /tmp/heard) -lt 2 ]; do sleep 1; done",
    "sort /tmp/heard",
]
WORKER = [
    "ps_address=${PAI_TASK_ROLE_ps_HOST_LIST%%,*}",
    "for i in $(seq 1 120); do"
    ' wget -q -O /tmp/answer --post-data "worker $PAI_TASK_INDEX" http://$ps_address/cgi-bin/talk'
    " && break; sleep 1; done",
    "cat /tmp/answer",
    'grep -q "ack worker $PAI_TASK_INDEX" /tmp/answer',
]


def _role(name: str, commands: list[str], instances: int) -> RoleLaunch:
    return RoleLaunch(
        name=name,
        instances=instances,
        image=IMAGE,
        resources=ResourceRequest(cpu=1, memory_mb=128, shm_mb=64),
        commands=commands,
    )


async def test_a_ps_worker_job_runs_on_a_real_cluster(tmp_path: Path) -> None:
    settings = KubernetesSettings(
        kubeconfig=str(Path(KUBECONFIG or "").expanduser()),
        namespace=os.environ.get("PAIGRAPH_TEST_K8S_NAMESPACE") or None,
        owner=f"test-{uuid.uuid4().hex[:8]}",
        state_dir=tmp_path,
        gang_timeout_seconds=300,
        stop_grace_seconds=5,
    )
    backend = KubernetesBackend(settings)
    backend.check()
    await backend.start()
    request = LaunchRequest(
        job_id=f"psworker-{uuid.uuid4().hex[:8]}",
        job_name="ps worker",
        roles=[_role("ps", PS, 1), _role("worker", WORKER, 2)],
    )
    seen: list[InstanceEvent] = []

    async def collect() -> None:
        async for event in backend.events():
            seen.append(event)

    reader = asyncio.create_task(collect())
    try:
        await backend.launch(request)
        await until_async(
            lambda: sum(e.kind in ENDED for e in seen) >= 3, "the three instances ending", 600, 1
        )
        ended = {f"{e.role}-{e.index}": e for e in seen if e.kind in ENDED}
        assert {k: (e.kind, e.exit_code) for k, e in ended.items()} == {
            "ps-0": (EventKind.EXITED, 0),
            "worker-0": (EventKind.EXITED, 0),
            "worker-1": (EventKind.EXITED, 0),
        }, {k: e.reason for k, e in ended.items()}
        placed = [e for e in seen if e.kind is EventKind.STARTED]
        assert len({e.placement.host_ip for e in placed if e.placement}) == 3
        ps = InstanceKey(job_id=request.job_id, attempt=1, role="ps", index=0)
        log = "".join([chunk.data async for chunk in backend.logs(ps)])
        assert "worker 0\nworker 1" in log
    finally:
        reader.cancel()
        await backend.forget(request.job_id, 1)
        await backend.close()


RESTRICTED_NAMESPACE = os.environ.get("PAIGRAPH_TEST_K8S_RESTRICTED_NAMESPACE")
# the tests may make (and remove) namespaces of their own: a cluster of your own, e.g. kind
CREATE_NAMESPACES = os.environ.get("PAIGRAPH_TEST_K8S_CREATE_NAMESPACES") == "1"


@contextmanager
def _namespace(name: str, level: str) -> Iterator[str]:
    """A namespace enforcing the Pod Security level `level`, deleted afterwards."""
    core = k8s.CoreV1Api(api_client(_settings(Path("."))))
    body = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": level}},
    }
    core.create_namespace(body)
    try:
        yield name
    finally:
        core.delete_namespace(name)


@pytest.fixture
def restricted_namespace() -> Iterator[str]:
    """PAIGRAPH_TEST_K8S_RESTRICTED_NAMESPACE, else one made for the test."""
    if RESTRICTED_NAMESPACE:
        yield RESTRICTED_NAMESPACE
        return
    if not CREATE_NAMESPACES:
        pytest.skip(
            "set PAIGRAPH_TEST_K8S_RESTRICTED_NAMESPACE to a namespace enforcing restricted, or "
            "PAIGRAPH_TEST_K8S_CREATE_NAMESPACES=1"
        )
    with _namespace(f"paigraph-test-restricted-{uuid.uuid4().hex[:6]}", "restricted") as name:
        yield name


def _settings(tmp_path: Path, **overrides: Any) -> KubernetesSettings:
    values: dict[str, Any] = {
        "kubeconfig": str(Path(KUBECONFIG or "").expanduser()),
        "namespace": os.environ.get("PAIGRAPH_TEST_K8S_NAMESPACE") or None,
        "owner": f"test-{uuid.uuid4().hex[:8]}",
        "state_dir": tmp_path,
        "init_image": INIT_IMAGE,
        "gang_timeout_seconds": 300,
        "stop_grace_seconds": 5,
    }
    return KubernetesSettings(**{**values, **overrides})


@pytest.mark.parametrize(
    ("claim", "why"),
    [
        ("data-postgres-0", "is not a claim of yours"),
        ("pg-u-alice-data", "is another user's claim"),
    ],
)
async def test_a_job_naming_the_servers_or_another_users_claim_is_refused_on_a_real_cluster(
    tmp_path: Path, claim: str, why: str
) -> None:
    backend = KubernetesBackend(_settings(tmp_path))
    backend.check()
    await backend.start()
    worker = _role("worker", ["true"], 1).model_copy(
        update={"materials": [Material(name="db", kind=Fetch.MOUNT, uris=[claim])]}
    )
    request = LaunchRequest(
        job_id=f"steal-{uuid.uuid4().hex[:8]}", job_name="steal", user="mallory", roles=[worker]
    )
    try:
        with pytest.raises(LaunchRefused, match=rf"'{claim}' {why}"):
            await backend.launch(request)
        assert await backend.reconcile() == []  # nothing was made
    finally:
        await backend.close()


async def test_each_attempt_gets_a_network_policy_of_its_own_pods_on_a_real_cluster(
    tmp_path: Path,
) -> None:
    """Made on any cluster (whether its network plugin enforces it is the next test's)."""
    async with _backend(tmp_path) as (backend, seen):
        request = _cpu_job(f"fenced-{uuid.uuid4().hex[:8]}", 2, 1, ["sleep 5"])
        service = service_name(request.job_id, 1)
        try:
            await backend.launch(request)
            policy = json.loads(
                backend.networking.read_namespaced_network_policy(
                    network_policy_name(service), backend.namespace, _preload_content=False
                ).data
            )
            selected = policy["spec"]["podSelector"]["matchLabels"]
            assert selected["paigraph.io/job"] == request.job_id
            assert policy["spec"]["policyTypes"] == ["Ingress"]
            (rule,) = policy["spec"]["ingress"]
            assert rule["from"] == [{"podSelector": {"matchLabels": selected}}]
            await until_async(
                lambda: sum(e.kind in ENDED for e in seen) == 2, "the two pods ending", 600, 1
            )
            assert {(e.kind, e.exit_code) for e in seen if e.kind in ENDED} == {
                (EventKind.EXITED, 0)
            }
        finally:
            await backend.forget(request.job_id, 1)
        with pytest.raises(ApiException) as gone:
            backend.networking.read_namespaced_network_policy(
                network_policy_name(service), backend.namespace
            )
        assert gone.value.status == 404


async def test_the_restricted_profile_runs_as_non_root_on_a_real_cluster(
    tmp_path: Path, restricted_namespace: str
) -> None:
    strict = KubernetesBackend(
        _settings(
            tmp_path / "strict",
            namespace=restricted_namespace,
            pod_security="restricted",
            run_as_user=1000,
        )
    )
    loose = KubernetesBackend(_settings(tmp_path / "loose", namespace=restricted_namespace))
    for backend in (strict, loose):
        backend.check()
        await backend.start()
    request = LaunchRequest(
        job_id=f"strict-{uuid.uuid4().hex[:8]}",
        job_name="strict",
        roles=[_role("main", ["echo uid $(id -u)"], 1)],
        secrets={"token": "t0k3n"},
    )
    seen: list[InstanceEvent] = []

    async def collect() -> None:
        async for event in strict.events():
            seen.append(event)

    reader = asyncio.create_task(collect())
    try:
        # made for baseline: the namespace's admission refuses it, and the job is told why
        with pytest.raises(LaunchRefused, match=r"Pod Security admission refuses the pods"):
            await loose.launch(request.model_copy(update={"job_id": f"{request.job_id}x"}))
        await strict.launch(request)
        await until_async(lambda: any(e.kind in ENDED for e in seen), "the instance ends", 600, 1)
        (ended,) = [e for e in seen if e.kind in ENDED]
        assert (ended.kind, ended.exit_code) == (EventKind.EXITED, 0), ended.reason
        key = InstanceKey(job_id=request.job_id, attempt=1, role="main", index=0)
        log = "".join([chunk.data async for chunk in strict.logs(key)])
        assert "uid 1000" in log
    finally:
        reader.cancel()
        await strict.forget(request.job_id, 1)
        for backend in (strict, loose):
            await backend.close()


@pytest.mark.skipif(
    not os.environ.get("PAIGRAPH_TEST_K8S_NETWORK_POLICY"),
    reason="set PAIGRAPH_TEST_K8S_NETWORK_POLICY=1 on a cluster whose CNI enforces NetworkPolicy",
)
async def test_another_jobs_pod_cannot_reach_a_jobs_pods_on_a_real_cluster(
    tmp_path: Path,
) -> None:
    """The ps of one job serves http; a worker of the same job reaches it, a worker of another
    job does not (its NetworkPolicy lets in the job's own pods only)."""
    backend = KubernetesBackend(_settings(tmp_path))
    backend.check()
    await backend.start()
    suffix = uuid.uuid4().hex[:8]
    server = LaunchRequest(
        job_id=f"served-{suffix}",
        job_name="served",
        roles=[
            _role(
                "ps",
                [
                    "mkdir -p /tmp/www && echo hello > /tmp/www/index.html",
                    "httpd -f -p $PAI_CONTAINER_HOST_PORT -h /tmp/www",
                ],
                1,
            ),
            _role(
                "worker",
                [
                    "for i in $(seq 1 60); do"
                    " wget -q -T 2 -O - http://${PAI_TASK_ROLE_ps_HOST_LIST%%,*}/ && exit 0;"
                    " sleep 2; done; exit 1"
                ],
                1,
            ),
        ],
    )

    seen: list[InstanceEvent] = []

    async def collect() -> None:
        async for event in backend.events():
            seen.append(event)

    reader = asyncio.create_task(collect())
    outsider: LaunchRequest | None = None
    try:
        await backend.launch(server)

        def ended(job_id: str, role: str) -> InstanceEvent | None:
            return next(
                (e for e in seen if e.job_id == job_id and e.role == role and e.kind in ENDED),
                None,
            )

        inside = await until_async(lambda: ended(server.job_id, "worker"), "the worker", 600, 1)
        assert (inside.kind, inside.exit_code) == (EventKind.EXITED, 0), inside.reason
        ps = next(
            e
            for e in seen
            if e.job_id == server.job_id and e.role == "ps" and e.kind is EventKind.STARTED
        )
        assert ps.placement is not None
        # the ps by its pod IP: another job's pods do not resolve its Service's names
        address = f"{ps.placement.host_ip}:{ps.placement.ports['http'][0]}"
        outsider = LaunchRequest(
            job_id=f"outsider-{suffix}",
            job_name="outsider",
            roles=[
                _role(
                    "probe",
                    [
                        f"if wget -q -T 5 -O - http://{address}/; then"
                        " echo reached; exit 1; else echo refused; exit 0; fi"
                    ],
                    1,
                )
            ],
        )
        await backend.launch(outsider)
        probe = await until_async(lambda: ended(outsider.job_id, "probe"), "the probe", 600, 1)
        assert (probe.kind, probe.exit_code) == (EventKind.EXITED, 0), probe.reason
    finally:
        reader.cancel()
        await backend.forget(server.job_id, 1)
        if outsider is not None:
            await backend.forget(outsider.job_id, 1)
        await backend.close()


# --- the gang and node loss ----------------------------------------------------------------------


@asynccontextmanager
async def _backend(
    tmp_path: Path, **overrides: Any
) -> AsyncIterator[tuple[KubernetesBackend, list]]:
    backend = KubernetesBackend(_settings(tmp_path, **overrides))
    backend.check()
    await backend.start()
    seen: list[InstanceEvent] = []

    async def collect() -> None:
        async for event in backend.events():
            seen.append(event)

    reader = asyncio.create_task(collect())
    try:
        yield backend, seen
    finally:
        reader.cancel()
        await backend.close()


def _cpu_job(job_id: str, pods: int, cpu: int, commands: list[str]) -> LaunchRequest:
    return LaunchRequest(
        job_id=job_id,
        job_name=job_id.split("-")[0],
        roles=[
            RoleLaunch(
                name="worker",
                instances=pods,
                image=IMAGE,
                resources=ResourceRequest(cpu=cpu, memory_mb=64, shm_mb=16),
                commands=commands,
            )
        ],
    )


async def test_two_gangs_with_room_for_one_run_one_after_the_other(tmp_path: Path) -> None:
    """Each job asks for 60% of the cluster's free cpu: the second waits, gated and holding
    nothing, until the first is done."""
    async with _backend(tmp_path, gang_timeout_seconds=0) as (backend, seen):
        core = backend.core
        nodes = json.loads(core.list_node(_preload_content=False).data)["items"]
        pods = json.loads(core.list_pod_for_all_namespaces(_preload_content=False).data)["items"]
        view = ClusterView.of(nodes, pods)
        biggest = max(int(n.free["cpu"]) for n in view.nodes)
        cpu = max(1, int(biggest * 0.6) // 2)
        if cpu * 2 > biggest or cpu < 1:
            pytest.skip(f"no node has room for a 2-pod gang of this shape ({biggest} cpu free)")
        token = uuid.uuid4().hex[:8]
        first = _cpu_job(f"first-{token}", 2, cpu, ["sleep 20"])
        second = _cpu_job(f"second-{token}", 2, cpu, ["true"])
        try:
            await backend.launch(first)
            await until_async(
                lambda: (
                    sum(e.kind is EventKind.STARTED and e.job_id == first.job_id for e in seen) == 2
                ),
                "the first gang running",
                300,
                1,
            )
            await backend.launch(second)
            await until_async(
                lambda: any(
                    e.kind is EventKind.WAITING and e.job_id == second.job_id for e in seen
                ),
                "the second gang waiting",
                60,
                1,
            )
            listing = core.list_namespaced_pod(
                backend.namespace,
                label_selector=f"{backend.selector},paigraph.io/attempt=1",
                _preload_content=False,
            )
            waiting = [
                p
                for p in json.loads(listing.data)["items"]
                if p["metadata"]["annotations"]["paigraph.io/job-id"] == second.job_id
            ]
            assert waiting and all(
                p["spec"].get("schedulingGates") == [{"name": GATE}]
                and not p["spec"].get("nodeName")
                for p in waiting
            ), "the waiting gang must hold nothing"
            await until_async(
                lambda: sum(e.kind in ENDED and e.job_id == second.job_id for e in seen) == 2,
                "the second gang done",
                600,
                1,
            )
            ended = [e for e in seen if e.kind in ENDED]
            assert {(e.kind, e.exit_code) for e in ended} == {(EventKind.EXITED, 0)}, ended
        finally:
            await backend.forget(first.job_id, 1)
            await backend.forget(second.job_id, 1)


@pytest.mark.skipif(
    not (LOSE_NODE and RESTORE_NODE),
    reason="set PAIGRAPH_TEST_K8S_LOSE_NODE and _RESTORE_NODE to lose a node",
)
async def test_a_lost_node_ends_its_instance_as_lost(tmp_path: Path) -> None:
    async with _backend(tmp_path) as (backend, seen):
        request = _cpu_job(f"nodeloss-{uuid.uuid4().hex[:8]}", 1, 1, ["sleep 3600"])
        node = ""
        try:
            await backend.launch(request)
            started = await until_async(
                lambda: [e for e in seen if e.kind is EventKind.STARTED], "running", 300, 1
            )
            node = started[0].placement.node if started[0].placement else ""
            assert node
            subprocess.run(shlex.split(LOSE_NODE.format(node=node)), check=True)
            # 300 s of toleration of the unreachable taint, the grace period, then forced
            ended = await until_async(
                lambda: [e for e in seen if e.kind in ENDED], "the instance lost", 900, 2
            )
            assert (ended[0].kind, ended[0].completion_code) == (EventKind.LOST, -1001), ended
        finally:
            if node:
                subprocess.run(shlex.split(RESTORE_NODE.format(node=node)), check=False)
            await backend.forget(request.job_id, 1)


# --- virtual clusters: a namespace each, and a quota ---------------------------------------------


@pytest.mark.skipif(
    not CREATE_NAMESPACES,
    reason="set PAIGRAPH_TEST_K8S_CREATE_NAMESPACES=1 to let the test make a namespace",
)
async def test_a_virtual_clusters_namespace_and_quota_on_a_real_cluster(tmp_path: Path) -> None:
    """The jobs of a virtual cluster run in its namespace, whose ResourceQuota the server
    makes from the configured capacity; a job past it fails at once with -200. Needs the
    rights of deploy/kubernetes/namespace-per-virtual-cluster (a kind admin has them)."""
    vc = f"t{uuid.uuid4().hex[:8]}"
    with _namespace(f"paigraph-vc-{vc}", "baseline") as namespace:
        async with _backend(
            tmp_path,
            namespace_per_virtual_cluster=True,
            virtual_cluster_quota={vc: {"cpu": "1", "pods": 1}},
        ) as (backend, seen):
            quota = json.loads(
                backend.core.read_namespaced_resource_quota(
                    QUOTA_NAME, namespace, _preload_content=False
                ).data
            )
            assert quota["spec"]["hard"] == {"requests.cpu": "1", "pods": "1"}
            first = _cpu_job(f"inside-{vc}", 1, 1, ["sleep 20"])
            first = first.model_copy(update={"virtual_cluster": vc})
            second = _cpu_job(f"beyond-{vc}", 1, 1, ["true"])
            second = second.model_copy(update={"virtual_cluster": vc})

            def ended(job_id: str) -> list[InstanceEvent]:
                return [e for e in seen if e.job_id == job_id and e.kind in ENDED]

            try:
                await backend.launch(first)
                await backend.launch(second)
                (refused,) = await until_async(lambda: ended(second.job_id), "refused", 120, 1)
                assert (refused.kind, refused.completion_code) == (EventKind.START_FAILED, -200)
                assert "exceeded quota: paigraph-virtual-cluster" in (refused.reason or "")
                (done,) = await until_async(lambda: ended(first.job_id), "the first", 600, 1)
                assert (done.kind, done.exit_code) == (EventKind.EXITED, 0), done.reason
            finally:
                await backend.forget(first.job_id, 1)
                await backend.forget(second.job_id, 1)
