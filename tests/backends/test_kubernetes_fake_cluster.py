"""The kubernetes backend driven through the real `kubernetes` client against a fake API server
(tests/fake_kube_api.py): no cluster can run here, so each test plays scheduler and kubelet and
moves the pods through their phases, and checks what the backend reports and leaves behind."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from backends.base import (
    BackendError,
    EventKind,
    InstanceEvent,
    InstanceKey,
    InstanceStatus,
    LaunchRequest,
    PortRequest,
    ResourceRequest,
    RoleLaunch,
)
from backends.instance_exec import ExecRequest
from backends.kubernetes import KubernetesBackend
from backends.kubernetes_settings import KubernetesSettings
from server.events import bus_for
from server.jobs.exit_codes import classify
from server.jobs.service import JobService
from server.shapes.job_states import JobState
from server.store import Store
from tests.fake_kube_admission import ENFORCE
from tests.fake_kube_api import FakeKubeAPI
from tests.servers import Server
from tests.waiting import until_async, until_notified_async

pytestmark = pytest.mark.anyio

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
ROLE_FILE = DEPLOY / "role.yaml"
CLUSTER_ROLE_FILE = DEPLOY / "cluster-role.yaml"
ENDED = (EventKind.EXITED, EventKind.STOPPED, EventKind.START_FAILED, EventKind.LOST)


def allowed_by_role() -> set[tuple[str, str]]:
    """(verb, resource) the Role and the gang's ClusterRole in deploy/kubernetes grant."""
    roles = [
        yaml.safe_load(ROLE_FILE.read_text()),
        *[
            d
            for d in yaml.safe_load_all(CLUSTER_ROLE_FILE.read_text())
            if d["kind"] == "ClusterRole"
        ],
    ]
    return {
        (verb, resource)
        for role in roles
        for rule in role["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as fake:
        yield fake
    used = fake.verbs()
    assert used <= allowed_by_role(), f"calls the Role does not allow: {used - allowed_by_role()}"


def settings(api: FakeKubeAPI, tmp_path: Path, **overrides: Any) -> KubernetesSettings:
    """Settings for the fake. Unless a test asks for another, the gang is left to the
    scheduler (`scheduler`): these tests play the scheduler themselves; the gang's own tests
    (test_kubernetes_gang.py) give the fake nodes and keep the default, `gates`."""
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    overrides.setdefault("gang_scheduler", "scheduler")
    return KubernetesSettings(
        kubeconfig=str(kubeconfig), state_dir=tmp_path / "state", stop_grace_seconds=2, **overrides
    )


@asynccontextmanager
async def backend_on(
    api: FakeKubeAPI, tmp_path: Path, **overrides: Any
) -> AsyncIterator[KubernetesBackend]:
    backend = KubernetesBackend(settings(api, tmp_path, **overrides))
    backend.check()
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


class Events:
    """Reads the backend's events in the background so a test can wait for one."""

    def __init__(self, backend: KubernetesBackend) -> None:
        self.seen: list[InstanceEvent] = []
        self._changed = asyncio.Condition()
        self._task = asyncio.create_task(self._pump(backend))

    async def _pump(self, backend: KubernetesBackend) -> None:
        async for event in backend.events():
            async with self._changed:
                self.seen.append(event)
                self._changed.notify_all()

    def of(self, kind: EventKind, role: str | None = None) -> list[InstanceEvent]:
        return [e for e in self.seen if e.kind is kind and (role is None or e.role == role)]

    def ended_all(self) -> list[InstanceEvent]:
        return [e for e in self.seen if e.kind in ENDED]

    def ended(self) -> dict[str, InstanceEvent]:
        return {f"{e.role}-{e.index}": e for e in self.seen if e.kind in ENDED}

    async def until(
        self, condition: Callable[[], Any], timeout: float = 10, what: str = "the events awaited"
    ) -> Any:
        return await until_notified_async(self._changed, condition, what, timeout)

    def close(self) -> None:
        self._task.cancel()


def role(name: str, instances: int = 1, **fields: Any) -> RoleLaunch:
    return RoleLaunch(
        name=name,
        instances=instances,
        image="busybox:1.36",
        resources=ResourceRequest(
            cpu=1, memory_mb=256, shm_mb=64, ports=[PortRequest(label="grpc")]
        ),
        commands=[f"echo {name} $PAI_TASK_INDEX"],
        **fields,
    )


def ps_worker(job_id: str = "psworker-0000aaaa", **fields: Any) -> LaunchRequest:
    return LaunchRequest(
        job_id=job_id, job_name="ps worker", roles=[role("ps"), role("worker", 2)], **fields
    )


def key(request: LaunchRequest, role_name: str, index: int) -> InstanceKey:
    return InstanceKey(job_id=request.job_id, attempt=request.attempt, role=role_name, index=index)


def pod_of(api: FakeKubeAPI, host: str) -> str:
    """The name of the pod whose hostname is `host` (the latest run)."""
    found = sorted(
        (p["metadata"]["name"] for p in api.pods() if p["spec"]["hostname"] == host), key=len
    )
    assert found, f"no pod {host}"
    return found[-1]


async def log_text(backend: KubernetesBackend, instance: InstanceKey, **kw: Any) -> str:
    return "".join([chunk.data async for chunk in backend.logs(instance, **kw)])


# --- a whole job ---------------------------------------------------------------------------------


async def test_fake_cluster_runs_a_two_role_job_through_every_phase(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    request = ps_worker()
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        await backend.launch(request)
        assert len(api.wait_for_pods(3)) == 3
        (service,) = api.list("services", "jobs")
        uid = service["metadata"]["uid"]
        owned = [*api.list("configmaps", "jobs"), *api.pods()]
        assert all(o["metadata"]["ownerReferences"][0]["uid"] == uid for o in owned)
        assert {p["spec"]["hostname"] for p in api.pods()} == {"ps-0", "worker-0", "worker-1"}

        # gang: nothing is placed while one pod finds no node; the scheduler's words are told
        api.schedule(pod_of(api, "ps-0"), node="node-a", ip="10.0.0.10")
        api.schedule(pod_of(api, "worker-0"), node="node-b", ip="10.0.0.11")
        api.unschedulable(pod_of(api, "worker-1"), "0/2 nodes are available: 2 Insufficient cpu.")
        waiting = await events.until(lambda: events.of(EventKind.WAITING))
        assert "1 of 3 pod(s): 0/2 nodes are available: 2 Insufficient cpu." in waiting[0].reason
        assert waiting[0].role is None
        assert not events.of(EventKind.PLACED)
        api.schedule(pod_of(api, "worker-1"), node="node-b", ip="10.0.0.12")
        await events.until(lambda: len(events.of(EventKind.PLACED)) == 3)
        placed = {f"{e.role}-{e.index}": e.placement for e in events.of(EventKind.PLACED)}
        assert placed["worker-1"].node == "node-b"
        assert placed["ps-0"].ports == {"grpc": [15000], "ssh": [15001], "http": [15002]}

        for host in ("ps-0", "worker-0", "worker-1"):
            api.run(pod_of(api, host))
        await events.until(lambda: len(events.of(EventKind.STARTED)) == 3)
        started = {f"{e.role}-{e.index}": e.placement for e in events.of(EventKind.STARTED)}
        assert started["worker-0"].host_ip == "10.0.0.11"

        # a log is followed while the instance runs, and ends with it
        ps = key(request, "ps", 0)
        api.write_log(pod_of(api, "ps-0"), "serving on 15002\n")
        chunks: list[str] = []

        async def follow() -> None:
            async for chunk in backend.logs(ps, follow=True):
                chunks.append(chunk.data)

        reader = asyncio.create_task(follow())
        await until_async(lambda: "serving" in "".join(chunks), "the followed log", 5, 0.02)
        api.write_log(pod_of(api, "ps-0"), "worker 0 said hello\nworker 1 said hello\n")
        for host in ("worker-0", "worker-1"):
            api.write_log(pod_of(api, host), f"{host} done\n")
            api.exit(pod_of(api, host), 0)
        api.exit(pod_of(api, "ps-0"), 0)
        ended = await events.until(lambda: len(events.ended()) == 3 and events.ended())
        await asyncio.wait_for(reader, 5)
        assert "".join(chunks) == "serving on 15002\nworker 0 said hello\nworker 1 said hello\n"
        assert {k: (e.kind, e.exit_code) for k, e in ended.items()} == {
            "ps-0": (EventKind.EXITED, 0),
            "worker-0": (EventKind.EXITED, 0),
            "worker-1": (EventKind.EXITED, 0),
        }
        assert await log_text(backend, ps, tail=1) == "worker 1 said hello\n"
        reports = {f"{r.key.role}-{r.key.index}": r for r in await backend.reconcile()}
        assert {k: (r.status, r.exit_code) for k, r in reports.items()} == {
            k: (InstanceStatus.EXITED, 0) for k in ("ps-0", "worker-0", "worker-1")
        }

        await backend.forget(request.job_id, 1)
        assert api.objects == {}
        # the logs outlive the pods
        assert await log_text(backend, key(request, "worker", 1)) == "worker-1 done\n"
        events.close()


# --- how instances fail --------------------------------------------------------------------------


async def test_fake_cluster_failures_oom_and_start_errors_are_told_with_their_cause(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    request = LaunchRequest(
        job_id="broken-0000bbbb",
        job_name="broken",
        roles=[role("worker", 3), role("ps")],
    )
    # a pull error the kubelet retries fails the instance once its deadline passed (here: at
    # once; test_kubernetes_gang.py waits one out)
    async with backend_on(api, tmp_path, image_pull_deadline_seconds=0) as backend:
        events = Events(backend)
        await backend.launch(request)
        api.wait_for_pods(4)
        for host in ("worker-0", "worker-1", "worker-2", "ps-0"):
            api.schedule(pod_of(api, host))
        await events.until(lambda: len(events.of(EventKind.PLACED)) == 4)
        api.run(pod_of(api, "worker-0"))
        api.write_log(
            pod_of(api, "worker-0"), "Traceback\nModuleNotFoundError: No module named 'tf'\n"
        )
        api.exit(pod_of(api, "worker-0"), 1)
        api.run(pod_of(api, "worker-1"))
        api.oom(pod_of(api, "worker-1"))
        api.waiting(
            pod_of(api, "worker-2"),
            "ErrImagePull",
            'failed to pull image "busybox:1.36": pull access denied, repository does not exist',
        )
        api.evict(pod_of(api, "ps-0"), "The node was low on resource: memory.")
        ended = await events.until(lambda: len(events.ended()) == 4 and events.ended())

        failed = ended["worker-0"]
        assert (failed.kind, failed.exit_code, failed.oom_killed) == (EventKind.EXITED, 1, False)
        tail = await log_text(backend, failed.key, tail=5)
        assert classify(1, log_tail=tail).code == 232  # the log's ImportError is recognised
        oom = ended["worker-1"]
        assert (oom.kind, oom.exit_code, oom.oom_killed) == (EventKind.EXITED, 137, True)
        assert oom.reason == (
            "killed because it used more memory than it asked for (out of memory: its limit of "
            "256 MB exceeded)"
        )
        pull = ended["worker-2"]
        assert pull.kind is EventKind.START_FAILED
        assert "image 'busybox:1.36' cannot be pulled (ErrImagePull)" in (pull.reason or "")
        assert classify(None, start_failed_reason=pull.reason).code == 254  # never retried
        assert pull.completion_code == 254
        # evicted as the kubelet reports it: killed (137), with the DisruptionTarget condition
        evicted = ended["ps-0"]
        assert (evicted.kind, evicted.exit_code) == (EventKind.EXITED, 137)
        assert evicted.completion_code == -1000  # OpenPAI's PodEvicted, retried
        assert evicted.reason == "TerminationByKubelet: The node was low on resource: memory."
        # the pod that could not pull is taken away at once
        await until_async(lambda: pod_of_missing(api, "worker-2"), "worker-2 gone", 10, 0.05)
        events.close()


def pod_of_missing(api: FakeKubeAPI, host: str) -> bool:
    return all(p["spec"]["hostname"] != host for p in api.pods())


async def test_fake_cluster_an_init_container_failure_is_a_start_failure(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    request = LaunchRequest(job_id="hostnet-0000cccc", job_name="hostnet", roles=[role("worker")])
    api.label_namespace("jobs", **{ENFORCE: "privileged"})  # the node's network needs it
    async with backend_on(api, tmp_path, host_network=True, pod_security="privileged") as backend:
        events = Events(backend)
        await backend.launch(request)
        (name,) = api.wait_for_pods(1)
        assert api.get("pods", "jobs", name)["spec"]["hostNetwork"] is True
        api.schedule(name)
        await events.until(lambda: events.of(EventKind.PLACED))
        api.init_failed(name, 10, "[paigraph] port 23505: address already in use on node node-1")
        (ended,) = (await events.until(lambda: events.ended())).values()
        assert ended.kind is EventKind.START_FAILED
        assert "init container 'prepare' exited with code 10" in (ended.reason or "")
        info = classify(None, start_failed_reason=ended.reason)
        assert (info.code, info.behaviour) == (253, "TRANSIENT")  # retried, as in OpenPAI
        events.close()


# --- waiting for the cluster ---------------------------------------------------------------------


async def test_fake_cluster_an_unschedulable_gang_times_out_with_the_reason(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    request = ps_worker("gang-0000dddd")
    async with backend_on(api, tmp_path, gang_timeout_seconds=1) as backend:
        events = Events(backend)
        await backend.launch(request)
        api.wait_for_pods(3)
        api.schedule(pod_of(api, "ps-0"))
        api.schedule(pod_of(api, "worker-0"))
        api.add_event(
            pod_of(api, "worker-1"), "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
        )
        ended = await events.until(lambda: len(events.ended()) == 3 and events.ended(), timeout=10)
        assert not events.of(EventKind.PLACED)  # the gang never formed
        for event in ended.values():
            assert event.kind is EventKind.START_FAILED
            assert event.reason == (
                "not every pod of the attempt was scheduled within 1 s (2 of 3 were): "
                "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
            )
        await until_async(lambda: api.pods() == [], "no pods left", 10, 0.05)
        events.close()


# --- stopping ------------------------------------------------------------------------------------


async def test_fake_cluster_stop_ends_running_and_waiting_instances(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    request = ps_worker("stopme-0000eeee")
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        await backend.launch(request)
        api.wait_for_pods(3)
        for host in ("ps-0", "worker-0"):
            api.schedule(pod_of(api, host))
            api.run(pod_of(api, host))
        api.write_log(pod_of(api, "ps-0"), "about to be stopped\n")
        ps = key(request, "ps", 0)
        # copied while it runs, even though the gang never formed
        await until_async(lambda: log_text(backend, ps), "ps-0's log copied", 10, 0.05)
        await asyncio.wait_for(backend.stop(request.job_id, 1, grace_seconds=3), 10)
        # every instance has ended when stop returns (its events may still be on their way)
        ended = await events.until(lambda: len(events.ended()) == 3 and events.ended(), 1)
        assert (ended["ps-0"].kind, ended["ps-0"].exit_code) == (EventKind.STOPPED, 143)
        assert ended["worker-1"].kind is EventKind.STOPPED
        assert ended["worker-1"].reason == "stopped before it started"
        assert api.pods() == []
        assert await log_text(backend, ps) == "about to be stopped\n"
        with pytest.raises(BackendError, match="being stopped"):
            await backend.relaunch(key(request, "ps", 0))
        events.close()


# --- after a restart -----------------------------------------------------------------------------


async def test_fake_cluster_a_restarted_backend_adopts_what_runs_and_what_ended(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    request = ps_worker("adopt-0000ffff", secrets={"token": "t0k3n"})
    async with backend_on(api, tmp_path) as first:
        events = Events(first)
        await first.launch(request)
        api.wait_for_pods(3)
        for host in ("ps-0", "worker-0", "worker-1"):
            api.schedule(pod_of(api, host))
            api.run(pod_of(api, host))
            api.write_log(pod_of(api, host), f"{host} up\n")
        api.exit(pod_of(api, "worker-0"), 0)
        await events.until(lambda: events.ended().get("worker-0"))
        events.close()
    # while no server runs, worker-1 fails
    api.write_log(pod_of(api, "worker-1"), "worker-1 failing\n")
    api.exit(pod_of(api, "worker-1"), 3)

    async with backend_on(api, tmp_path) as second:
        events = Events(second)
        reports = {f"{r.key.role}-{r.key.index}": r for r in await second.reconcile()}
        assert {k: (r.status, r.exit_code, r.run) for k, r in reports.items()} == {
            "ps-0": (InstanceStatus.RUNNING, None, 1),
            "worker-0": (InstanceStatus.EXITED, 0, 1),
            "worker-1": (InstanceStatus.EXITED, 3, 1),
        }
        assert (
            await log_text(second, key(request, "worker", 1)) == "worker-1 up\nworker-1 failing\n"
        )
        # an adopted instance runs again from the objects in the cluster, secrets included
        await second.relaunch(key(request, "worker", 1), 2)
        await second.relaunch(key(request, "worker", 1), 2)  # again: nothing more starts
        await until_async(
            lambda: len(api.pods()) == 3 and pod_of(api, "worker-1").endswith("-r2"),
            "worker-1 relaunched as its second pod",
            10,
            0.05,
        )
        again = api.get("pods", "jobs", pod_of(api, "worker-1"))
        assert again["metadata"]["labels"]["paigraph.io/run"] == "2"
        assert any(v["name"] == "secrets" for v in again["spec"]["volumes"])
        api.schedule(again["metadata"]["name"])
        api.run(again["metadata"]["name"])
        api.write_log(again["metadata"]["name"], "second try\n")
        api.exit(again["metadata"]["name"], 0)
        api.exit(pod_of(api, "ps-0"), 0)

        def runs() -> list[InstanceEvent]:
            return [e for e in events.ended_all() if e.role == "worker" and e.index == 1]

        await events.until(lambda: "ps-0" in events.ended() and len(runs()) == 2)
        assert [e.exit_code for e in runs()] == [3, 0]  # adopted as it ended, then the new run
        assert [e.run for e in runs()] == [1, 2]  # each end names its run
        text = await log_text(second, key(request, "worker", 1))
        assert text.endswith("task retry 1: starting task attempt 2\nsecond try\n")
        assert text.startswith("worker-1 up\nworker-1 failing\n")
        await second.forget(request.job_id, 1)
        assert api.objects == {}  # pods, Service, ConfigMap and the job's Secret
        events.close()


# --- through the job service ---------------------------------------------------------------------


async def test_fake_cluster_the_service_runs_a_job_to_succeeded(
    api: FakeKubeAPI, tmp_path: Path, store: Store, db_url: str
) -> None:
    config = json.dumps(_pingpong())
    bus = bus_for(db_url)
    backend = KubernetesBackend(settings(api, tmp_path))
    service = JobService(store, backend, bus)
    await service.start()
    try:
        user = store.create_user("kate", admin=True)[0]
        outcome = await service.submit(user, config)
        assert outcome.errors == [] and outcome.job is not None
        job_id = outcome.job.id
        names = await asyncio.to_thread(api.wait_for_pods, 3)
        for number, name in enumerate(names):
            api.schedule(name, node=f"node-{number}", ip=f"10.2.0.{number + 1}")
            api.run(name)
            api.write_log(name, f"{name} ran\n")
        for name in names:
            api.exit(name, 0)

        async def done() -> Any:
            job = await asyncio.to_thread(store.get_job, job_id)
            return job if job is not None and job.state.is_final else None

        job = await until_async(done, "the job ending", 15, 0.05)
        assert job.state is JobState.SUCCEEDED
        found = await asyncio.to_thread(store.instances_for_jobs, [job_id])
        assert sorted(i.host_ip for i in found[job_id]) == ["10.2.0.1", "10.2.0.2", "10.2.0.3"]
        chunks = [c.data async for c in service.logs(job_id, "worker", 1)]
        assert "".join(chunks).endswith("ran\n")
        # the ended attempt is released: nothing of it stays in the cluster
        await until_async(lambda: api.objects == {}, "no objects left", 10, 0.05)

        # what a cluster cannot serve is refused at submission, saying which prerequisite at
        # the role's field naming it, and nothing is stored or created
        hdfs = _pingpong()
        hdfs["prerequisites"].append({"name": "corpus", "type": "data", "uri": ["hdfs://nn/x"]})
        hdfs["taskRoles"]["worker"]["data"] = "corpus"
        refused = await service.submit(user, json.dumps(hdfs))
        assert refused.job is None
        assert [(e.path_parts(), e.code) for e in refused.errors] == [
            (["taskRoles", "worker", "data"], "refused")
        ]
        message = refused.errors[0].message
        assert "task role 'worker': prerequisite 'corpus': hdfs://nn/x is on HDFS" in message
        assert "kubernetes setting hdfs_claims" in message
        page = await asyncio.to_thread(store.list_jobs)
        assert [j.id for j in page.jobs] == [job_id]
        assert api.objects == {}
    finally:
        await service.close()
        with contextlib.suppress(Exception):
            await bus.close()


# --- paigraph serve --backend kubernetes --------------------------------------------------------


async def test_fake_cluster_paigraph_serve_runs_jobs_on_the_cluster(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    server = Server(
        f"sqlite:///{tmp_path / 'paigraph.db'}",
        tmp_path / "simulator-state",  # unused by this backend
        tmp_path / "serve.log",
        serve_args=("--backend", "kubernetes", "--namespace", "jobs"),
    )
    server.settings = {
        "PAIGRAPH_KUBECONFIG": str(api.kubeconfig(tmp_path / "kubeconfig")),
        "PAIGRAPH_K8S_STATE": str(tmp_path / "state"),
    }
    await asyncio.to_thread(server.start)
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:

            async def graphql(query: str, **variables: Any) -> dict[str, Any]:
                answer = await client.post(
                    "/graphql", json={"query": query, "variables": variables}
                )
                body = answer.json()
                assert "errors" not in body, body
                return body["data"]

            submitted = await graphql(
                "mutation($c: String!) { submitJob(input: {config: $c}) {"
                " job { id } errors { path message } } }",
                c=json.dumps(_pingpong()),
            )
            assert submitted["submitJob"]["errors"] == []
            job_id = submitted["submitJob"]["job"]["id"]
            names = await asyncio.to_thread(api.wait_for_pods, 3)
            for name in names:
                api.schedule(name)
                api.run(name)
            state = "query($id: ID!) { job(id: $id) { state } }"

            async def running() -> bool:
                return (await graphql(state, id=job_id))["job"]["state"] == "RUNNING"

            await until_async(running, "the job running", 15, 0.1)
            # `paigraph exec` through the server's /exec and the cluster's exec API
            script = "echo in ps-0; read line; echo got $line >&2; exit 4"
            executed = await asyncio.to_thread(
                server.paigraph, "exec", job_id, "ps", "0", "--", "sh", "-c", script, stdin="hi\n"
            )
            assert (executed.returncode, executed.stdout, executed.stderr) == (
                4,
                "in ps-0\n",
                "got hi\n",
            )
            assert api.execs[-1][0] == pod_of(api, "ps-0")
            for name in names:
                api.exit(name, 0)
            query = "query($id: ID!) { job(id: $id) { state taskRoles { instances { hostIp } } } }"

            async def succeeded() -> dict[str, Any] | None:
                job = (await graphql(query, id=job_id))["job"]
                assert job["state"] not in ("FAILED", "STOPPED"), job
                return job if job["state"] == "SUCCEEDED" else None

            job = await until_async(succeeded, "the job succeeding", 15, 0.1)
            ips = [i["hostIp"] for r in job["taskRoles"] for i in r["instances"]]
            assert len(ips) == 3 and all(ip.startswith("10.") for ip in ips)
    finally:
        await asyncio.to_thread(server.stop)


async def test_fake_cluster_exec_runs_a_command_in_a_running_pod(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    request = LaunchRequest(job_id="execjob-0000aaaa", job_name="exec", roles=[role("main")])
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        await backend.launch(request)
        (pod,) = api.wait_for_pods(1)
        main = key(request, "main", 0)
        api.schedule(pod)
        await events.until(lambda: events.of(EventKind.PLACED))
        with pytest.raises(BackendError, match="has not started yet"):
            backend.exec_session(main, ExecRequest(command=["true"]))
        api.run(pod)
        await events.until(lambda: events.of(EventKind.STARTED))

        def run(request: ExecRequest, stdin: bytes = b"", resize: tuple[int, int] | None = None):
            session = backend.exec_session(main, request)
            try:
                if resize:
                    session.resize(*resize)
                if stdin:
                    session.write(stdin)
                session.close_stdin()
                output: dict[int, bytes] = {1: b"", 2: b""}
                while (chunk := session.read()) is not None:
                    output[chunk[0]] += chunk[1]
                return session.exit_code(), output[1], output[2]
            finally:
                session.close()

        # output by stream, stdin to its end (v5 closes it alone), the exit code
        script = "echo out; echo err >&2; wc -l; exit 3"
        found = await asyncio.to_thread(run, ExecRequest(command=["sh", "-c", script]), b"a\nb\n")
        assert (found[0], found[1].split(), found[2]) == (3, [b"out", b"2"], b"err\n")
        assert api.execs[-1] == (pod, ["sh", "-c", script], False)

        # a terminal of the size asked, resized
        on_tty = ExecRequest(command=["sh", "-c", "stty size; sleep 0.5; stty size"], tty=True)
        on_tty = on_tty.model_copy(update={"rows": 33, "columns": 101})
        code, out, _ = await asyncio.to_thread(run, on_tty, resize=(20, 60))
        assert code == 0 and out.split()[-2:] == [b"20", b"60"]

        api.exit(pod, 0)
        await events.until(lambda: events.ended())
        with pytest.raises(BackendError, match="has ended"):
            backend.exec_session(main, ExecRequest(command=["true"]))
        events.close()


def _pingpong() -> dict[str, Any]:
    return {
        "protocolVersion": 2,
        "name": "pingpong",
        "type": "job",
        "prerequisites": [{"name": "bb", "type": "dockerimage", "uri": "busybox:1.36"}],
        "taskRoles": {
            name: {
                "instances": count,
                "dockerImage": "bb",
                "resourcePerInstance": {"cpu": 1, "memoryMB": 256, "gpu": 0},
                "commands": ["echo $PAI_TASK_ROLE_ps_HOST_LIST"],
            }
            for name, count in (("ps", 1), ("worker", 2))
        },
    }


# --- the Role it is deployed with ----------------------------------------------------------------


async def test_fake_cluster_the_role_grants_exactly_what_the_backend_uses(tmp_path: Path) -> None:
    """The Role and the gang's ClusterRole in deploy/kubernetes allow every call the backend
    makes (each scenario's `api` fixture checks that) and nothing more: the backend's
    scenarios, run here on fresh fake clusters, use every verb they grant."""
    from tests.backends import test_kubernetes_gang as gang
    from tests.backends import test_start_order_kubernetes as start_order

    scenarios = (
        start_order.test_a_succeeded_dependency_holds_once_every_ps_succeeded,
        gang.test_two_gpu_gangs_with_room_for_one_run_one_after_the_other,
        gang.test_a_volcano_gang_is_one_pod_group_of_all_the_pods,
        test_fake_cluster_runs_a_two_role_job_through_every_phase,
        test_fake_cluster_failures_oom_and_start_errors_are_told_with_their_cause,
        test_fake_cluster_an_init_container_failure_is_a_start_failure,
        test_fake_cluster_an_unschedulable_gang_times_out_with_the_reason,
        test_fake_cluster_stop_ends_running_and_waiting_instances,
        test_fake_cluster_a_restarted_backend_adopts_what_runs_and_what_ended,
        test_fake_cluster_exec_runs_a_command_in_a_running_pod,
    )
    used: set[tuple[str, str]] = set()
    for number, scenario in enumerate(scenarios):
        folder = tmp_path / str(number)
        folder.mkdir()
        with FakeKubeAPI() as fake:
            await scenario(fake, folder)
        used |= fake.verbs()
    assert used == allowed_by_role()
