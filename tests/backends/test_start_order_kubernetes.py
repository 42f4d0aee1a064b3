"""Role start order on the Kubernetes backend, on the fake API server: the pods of a role that
waits carry an init container, after the gang's barrier, that waits until the server writes
`go` into the attempt's start-order ConfigMap (or, for a ps ready by a port, until the ps
instances answer on it); the depended-on role's readiness check is its main container's
readinessProbe, and the server judges from the pods' Ready condition and terminations. The
wait itself is run here by a real `sh` and busybox `nc` against real sockets and files."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends.base import (
    EventKind,
    InstanceKey,
    LaunchRequest,
    ReadinessCheck,
    ResourceRequest,
    RoleLaunch,
    StartDependency,
)
from backends.kubernetes_gang import BARRIER_CONTAINER
from backends.kubernetes_start_order import ORDER_DIR, START_ORDER_CONTAINER
from backends.start_gate import DEPENDENCY_FAILED
from tests.backends.test_kubernetes_fake_cluster import Events, allowed_by_role, backend_on, pod_of
from tests.fake_kube_api import FakeKubeAPI
from tests.waiting import until_async

pytestmark = pytest.mark.anyio


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as fake:
        yield fake
    used = fake.verbs()
    assert used <= allowed_by_role(), f"calls the Role does not allow: {used - allowed_by_role()}"


def ps_worker(
    job_id: str,
    *,
    when: str = "ready",
    timeout: float = 600,
    readiness: ReadinessCheck | None = None,
) -> LaunchRequest:
    resources = ResourceRequest(cpu=1, memory_mb=256, shm_mb=64)
    return LaunchRequest(
        job_id=job_id,
        job_name="order",
        roles=[
            RoleLaunch(
                name="ps",
                instances=2,
                image="busybox:1.36",
                resources=resources,
                commands=["serve"],
                readiness=readiness or ReadinessCheck(port="http"),
                min_succeeded=-1,
            ),
            RoleLaunch(
                name="worker",
                instances=2,
                image="busybox:1.36",
                resources=resources,
                commands=["train"],
                depends_on=[StartDependency(role="ps", when=when, instances=2)],
                dependency_timeout_seconds=timeout,
            ),
        ],
    )


def schedule_workers(api: FakeKubeAPI) -> None:
    """Both workers bound to nodes: into their init containers, their commands not started."""
    for host in ("worker-0", "worker-1"):
        api.schedule(pod_of(api, host))


async def server_says_go(api: FakeKubeAPI, timeout: float = 10) -> None:
    """Until the attempt's start-order ConfigMap says go to both workers."""
    await until_async(
        lambda: order_said(api) == {"worker-0": "go", "worker-1": "go"} or None,
        "the server to say go",
        timeout,
    )


def init_names(pod: dict[str, Any]) -> list[str]:
    return [c["name"] for c in pod["spec"].get("initContainers") or []]


def declared_ports(api: FakeKubeAPI, host: str) -> set[int]:
    """The ports the pod of `host` declares for its main container."""
    pod = next(p for p in api.pods() if p["metadata"]["name"] == pod_of(api, host))
    return {entry["containerPort"] for entry in pod["spec"]["containers"][0].get("ports") or []}


async def test_workers_wait_in_an_init_container_after_the_barrier(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        request = ps_worker("order-0000abcd")
        await backend.launch(request)
        await events.until(lambda: len(api.pods()) == 4)
        pods = {p["spec"]["hostname"]: p for p in api.pods()}
        assert init_names(pods["worker-0"])[-2:] == [BARRIER_CONTAINER, START_ORDER_CONTAINER]
        assert START_ORDER_CONTAINER not in init_names(pods["ps-0"])
        script = next(
            c
            for c in pods["worker-1"]["spec"]["initContainers"]
            if c["name"] == START_ORDER_CONTAINER
        )["command"][-1]
        for host in ("ps-0", "ps-1"):
            found = re.search(rf"answers {host}\.\S+ (\d+) ", script)
            assert found is not None, script
            assert int(found.group(1)) in declared_ports(api, host)
        assert "waiting for 2 of 2 ps instances to be ready" in script
        # the pod holds no Kubernetes API rights for it: no token is mounted
        assert pods["worker-0"]["spec"].get("automountServiceAccountToken") is False
        events.close()


async def test_a_wait_past_its_deadline_fails_the_pod_with_its_code(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        await backend.launch(ps_worker("order-0000beef", timeout=5))
        await events.until(lambda: len(api.pods()) == 4)
        said = "[paigraph start order] its commands did not start: it waited 5 s for 2 of 2 ps"
        api.init_failed(
            pod_of(api, "worker-0"), DEPENDENCY_FAILED, said, container=START_ORDER_CONTAINER
        )
        ended = await events.until(lambda: events.ended().get("worker-0"), 30)
        assert (ended.kind, ended.completion_code) == (EventKind.START_FAILED, DEPENDENCY_FAILED)
        assert (ended.reason or "").startswith("its commands did not start: it waited 5 s")
        events.close()


def order_said(api: FakeKubeAPI) -> dict[str, str]:
    """What the attempt's start-order ConfigMap tells each waiting instance."""
    (found,) = [
        m for m in api.list("configmaps", "jobs") if m["metadata"]["name"].endswith("-order")
    ]
    return dict(found.get("data") or {})


def run_all(api: FakeKubeAPI, *hosts: str) -> None:
    for host in hosts:
        api.schedule(pod_of(api, host))
        api.run(pod_of(api, host))


def set_ready(api: FakeKubeAPI, host: str, ready: bool = True) -> None:
    """The kubelet's readinessProbe passed (or failed failureThreshold times) for `host`."""
    with api._pod(pod_of(api, host), "jobs") as pod:
        pod["status"]["containerStatuses"][0]["ready"] = ready
        others = [c for c in pod["status"].get("conditions") or [] if c["type"] != "Ready"]
        pod["status"]["conditions"] = [*others, {"type": "Ready", "status": str(ready)}]


async def test_a_command_readiness_is_a_probe_and_the_server_says_go(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    check = ReadinessCheck(
        command=["test", "-e", "/tmp/up"],
        period_seconds=2,
        timeout_seconds=0.5,
        failure_threshold=4,
    )
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        await backend.launch(ps_worker("order-0000c0de", readiness=check))
        await events.until(lambda: len(api.pods()) == 4)
        pods = {p["spec"]["hostname"]: p for p in api.pods()}
        probe = pods["ps-0"]["spec"]["containers"][0]["readinessProbe"]
        assert probe == {
            "exec": {"command": ["test", "-e", "/tmp/up"]},
            "periodSeconds": 2,
            "timeoutSeconds": 1,
            "failureThreshold": 4,
        }
        worker = pods["worker-0"]["spec"]
        (waits,) = [c for c in worker["initContainers"] if c["name"] == START_ORDER_CONTAINER]
        assert {"name": "PAIGRAPH_START_ORDER_KEY", "value": "worker-0"} in waits["env"]
        mounted = {m["name"] for m in waits["volumeMounts"]}
        assert any(v["name"] in mounted and "configMap" in v for v in worker["volumes"])
        assert order_said(api) == {"worker-0": "wait", "worker-1": "wait"}

        run_all(api, "ps-0", "ps-1")
        schedule_workers(api)  # in their init containers: not running yet
        placed = await events.until(
            lambda: len(events.of(EventKind.PLACED)) == 4 and events.of(EventKind.PLACED, "worker")
        )
        assert all(e.reason == "waiting for 2 of 2 ps instances to be ready" for e in placed)
        assert not [e.reason for e in events.of(EventKind.PLACED, "ps") if e.reason]
        set_ready(api, "ps-0")
        await events.until(lambda: len(events.of(EventKind.STARTED, "ps")) == 2)
        assert order_said(api) == {"worker-0": "wait", "worker-1": "wait"}  # 1 of 2 is ready
        set_ready(api, "ps-1")
        await server_says_go(api)
        events.close()


async def test_a_succeeded_dependency_holds_once_every_ps_succeeded(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        await backend.launch(ps_worker("order-00005ucc", when="succeeded"))
        await events.until(lambda: len(api.pods()) == 4)
        run_all(api, "ps-0", "ps-1")
        schedule_workers(api)
        await events.until(lambda: len(events.of(EventKind.STARTED)) == 2)
        set_ready(api, "ps-0")
        set_ready(api, "ps-1")  # ready is not what the workers wait for
        api.exit(pod_of(api, "ps-0"), 0)
        await events.until(lambda: "ps-0" in events.ended())
        assert order_said(api) == {"worker-0": "wait", "worker-1": "wait"}
        api.exit(pod_of(api, "ps-1"), 0)
        await server_says_go(api)
        assert not [e for e in events.ended().values() if e.role == "worker"]
        events.close()


async def test_a_dependency_that_can_never_hold_ends_the_waiting_pods_with_its_code(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        await backend.launch(ps_worker("order-0000dead", when="succeeded"))
        await events.until(lambda: len(api.pods()) == 4)
        run_all(api, "ps-0", "ps-1")
        schedule_workers(api)
        api.exit(pod_of(api, "ps-1"), 3)
        ended = await events.until(
            lambda: (
                {k: e for k, e in events.ended().items() if k.startswith("worker")}
                if len(events.ended()) == 3
                else None
            )
        )
        for event in ended.values():
            assert (event.kind, event.completion_code) == (
                EventKind.START_FAILED,
                DEPENDENCY_FAILED,
            )
            assert "waited for 2 of 2 ps instances to succeed" in (event.reason or "")
            assert "too many of them ended" in (event.reason or "")
        assert order_said(api) == {"worker-0": "wait", "worker-1": "wait"}
        events.close()


async def test_a_started_worker_is_not_held_back_again_when_a_ps_runs_again(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        request = ps_worker("order-0000a9a1", when="running")
        await backend.launch(request)
        await events.until(lambda: len(api.pods()) == 4)
        schedule_workers(api)
        run_all(api, "ps-0", "ps-1")
        await server_says_go(api)
        for host in ("worker-0", "worker-1"):
            api.run(pod_of(api, host))
        await events.until(lambda: len(events.of(EventKind.STARTED)) == 4)
        api.exit(pod_of(api, "ps-0"), 1)
        await events.until(lambda: "ps-0" in events.ended())
        ps = request.roles[0]
        await backend.relaunch(
            InstanceKey(job_id=request.job_id, attempt=request.attempt, role=ps.name, index=0), 2
        )
        await until_async(
            lambda: pod_of(api, "ps-0").endswith("-r2") or None, "ps-0's second run", 10
        )
        assert order_said(api) == {"worker-0": "go", "worker-1": "go"}
        assert not [e for e in events.ended().values() if e.role == "worker"]
        events.close()


async def test_a_retried_worker_waits_again(api: FakeKubeAPI, tmp_path: Path) -> None:
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        request = ps_worker("order-0000a9a2")
        await backend.launch(request)
        await events.until(lambda: len(api.pods()) == 4)
        schedule_workers(api)
        run_all(api, "ps-0", "ps-1")
        set_ready(api, "ps-0")
        set_ready(api, "ps-1")
        await server_says_go(api)
        api.run(pod_of(api, "worker-0"))
        api.exit(pod_of(api, "worker-0"), 1)
        await events.until(lambda: "worker-0" in events.ended())
        set_ready(api, "ps-1", False)  # it failed its probe failureThreshold times
        await backend.relaunch(
            InstanceKey(job_id=request.job_id, attempt=request.attempt, role="worker", index=0), 2
        )
        await until_async(
            lambda: pod_of(api, "worker-0").endswith("-r2") or None, "worker-0's new run", 10
        )
        api.schedule(pod_of(api, "worker-0"))
        await events.until(lambda: len(events.of(EventKind.PLACED, "worker")) == 3)
        # its new run waits again, while worker-1, which was told before, is not told again
        assert order_said(api) == {"worker-0": "wait", "worker-1": "go"}
        set_ready(api, "ps-1")
        await until_async(
            lambda: order_said(api)["worker-0"] == "go" or None, "the server to say go again", 10
        )
        events.close()


# --- the wait itself, run by a real shell against real sockets -----------------------------


@pytest.fixture
def busybox_nc(tmp_path: Path) -> dict[str, str]:
    """An environment whose `nc` is busybox's, as in the init image."""
    busybox = "/usr/bin/busybox"
    if not os.path.exists(busybox):
        pytest.skip("busybox is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nc").symlink_to(busybox)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


async def wait_script(api: FakeKubeAPI, tmp_path: Path, ports: list[int], timeout: float) -> str:
    """The worker's wait as the backend writes it, its ps addresses pointed at loopback and
    `ports` (the fake cluster has no DNS)."""
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        await backend.launch(ps_worker(f"order-{len(ports)}{int(timeout):07x}", timeout=timeout))
        await events.until(lambda: len(api.pods()) == 4)
        pod = next(p for p in api.pods() if p["spec"]["hostname"] == "worker-0")
        events.close()
    script = next(c for c in pod["spec"]["initContainers"] if c["name"] == START_ORDER_CONTAINER)
    text = script["command"][-1]
    if not ports:
        return text
    lines = iter(ports)
    return re.sub(r"answers \S+ \d+ ", lambda _: f"answers 127.0.0.1 {next(lines)} ", text)


def listener() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    return server


async def test_the_wait_holds_until_every_ps_listens(
    api: FakeKubeAPI, tmp_path: Path, busybox_nc: dict[str, str]
) -> None:
    first, second = listener(), listener()
    ports = [first.getsockname()[1], second.getsockname()[1]]
    first.listen()
    script = await wait_script(api, tmp_path, ports, timeout=60)
    with subprocess.Popen(
        ["sh", "-c", script], env=busybox_nc, stdout=subprocess.PIPE, text=True
    ) as wait:
        assert wait.stdout is not None
        said = wait.stdout.readline()
        assert "waiting for 2 of 2 ps instances to be ready" in said
        assert wait.poll() is None  # one ps listens, the other not yet: it still waits
        second.listen()
        out, _ = wait.communicate(timeout=30)
    assert wait.returncode == 0, out
    assert "what this role waits for holds" in out
    first.close()
    second.close()


async def test_the_wait_ends_with_its_code_past_its_deadline(
    api: FakeKubeAPI, tmp_path: Path, busybox_nc: dict[str, str]
) -> None:
    closed = listener()  # bound, never listening: connections are refused
    port = closed.getsockname()[1]
    script = await wait_script(api, tmp_path, [port, port], timeout=1)
    done = subprocess.run(
        ["sh", "-c", script], env=busybox_nc, capture_output=True, text=True, timeout=60
    )
    closed.close()
    assert done.returncode == DEPENDENCY_FAILED
    assert "waited 1 s (dependencyTimeoutSeconds) for 2 of 2 ps instances" in done.stdout


def order_env(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The wait's environment with its ConfigMap volume at a directory of the test's."""
    (tmp_path / "order").mkdir(exist_ok=True)
    return {
        **env,
        "PAIGRAPH_START_ORDER_DIR": str(tmp_path / "order"),
        "PAIGRAPH_START_ORDER_KEY": "worker-0",
    }


async def test_the_wait_holds_once_the_server_says_go(
    api: FakeKubeAPI, tmp_path: Path, busybox_nc: dict[str, str]
) -> None:
    check = ReadinessCheck(command=["true"])
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        await backend.launch(ps_worker("order-00000f11", readiness=check))
        await events.until(lambda: len(api.pods()) == 4)
        pod = next(p for p in api.pods() if p["spec"]["hostname"] == "worker-0")
        events.close()
    (waits,) = [c for c in pod["spec"]["initContainers"] if c["name"] == START_ORDER_CONTAINER]
    assert waits["volumeMounts"][0]["mountPath"] == ORDER_DIR
    env = order_env(busybox_nc, tmp_path)
    verdict = tmp_path / "order" / "worker-0"
    verdict.write_text("wait")
    with subprocess.Popen(
        ["sh", "-c", waits["command"][-1]], env=env, stdout=subprocess.PIPE, text=True
    ) as wait:
        assert wait.stdout is not None
        assert "waiting for 2 of 2 ps instances to be ready" in wait.stdout.readline()
        assert wait.poll() is None
        verdict.write_text("go")
        out, _ = wait.communicate(timeout=30)
    assert wait.returncode == 0, out
    assert "what this role waits for holds" in out


async def test_a_wait_the_server_never_ends_fails_past_its_deadline(
    api: FakeKubeAPI, tmp_path: Path, busybox_nc: dict[str, str]
) -> None:
    check = ReadinessCheck(command=["true"])
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        await backend.launch(ps_worker("order-00000f12", readiness=check, timeout=1))
        await events.until(lambda: len(api.pods()) == 4)
        pod = next(p for p in api.pods() if p["spec"]["hostname"] == "worker-0")
        events.close()
    (waits,) = [c for c in pod["spec"]["initContainers"] if c["name"] == START_ORDER_CONTAINER]
    env = order_env(busybox_nc, tmp_path)
    (tmp_path / "order" / "worker-0").write_text("wait")
    done = subprocess.run(
        ["sh", "-c", waits["command"][-1]], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == DEPENDENCY_FAILED
    assert "waited 1 s (dependencyTimeoutSeconds) for 2 of 2 ps instances" in done.stdout


async def test_the_start_order_config_map_goes_with_its_attempt(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        await backend.launch(ps_worker("order-0000901e", when="running"))
        await events.until(lambda: len(api.pods()) == 4)
        assert order_said(api) == {"worker-0": "wait", "worker-1": "wait"}
        await backend.forget("order-0000901e", 1)
        await until_async(
            lambda: (
                not any(
                    m["metadata"]["name"].endswith("-order") for m in api.list("configmaps", "jobs")
                )
                or None
            ),
            "the start-order ConfigMap to go",
            10,
        )
        events.close()


async def test_a_go_the_api_server_refused_is_written_again(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        await backend.launch(ps_worker("order-0000bad0", when="running"))
        await events.until(lambda: len(api.pods()) == 4)
        schedule_workers(api)
        api.refuse("patch", "configmaps", 403, "refused by a policy", times=1)
        run_all(api, "ps-0", "ps-1")
        await server_says_go(api, timeout=15)
        assert ("patch", "configmaps") in api.calls
        events.close()
