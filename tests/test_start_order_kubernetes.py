"""Role start order on the Kubernetes backend, on the fake API server: the pods of a role that
waits for a ready ps carry an init container, after the gang's barrier, that waits until the
ps instances answer on their readiness port; its wait, run here by a real `sh` and busybox
`nc` against real sockets, holds until the port opens and ends with its code past its
deadline."""

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
    LaunchRequest,
    ReadinessCheck,
    ResourceRequest,
    RoleLaunch,
    StartDependency,
)
from backends.kubernetes_gang import BARRIER_CONTAINER
from backends.kubernetes_start_order import START_ORDER_CONTAINER
from backends.start_gate import DEPENDENCY_FAILED
from tests.fake_kube_api import FakeKubeAPI
from tests.test_kubernetes_fake_cluster import Events, allowed_by_role, backend_on, pod_of

pytestmark = pytest.mark.anyio


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as fake:
        yield fake
    used = fake.verbs()
    assert used <= allowed_by_role(), f"calls the Role does not allow: {used - allowed_by_role()}"


def ps_worker(job_id: str, *, when: str = "ready", timeout: float = 600) -> LaunchRequest:
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
                readiness=ReadinessCheck(port="http"),
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


async def test_running_is_not_held_back_on_kubernetes(api: FakeKubeAPI, tmp_path: Path) -> None:
    async with backend_on(api, tmp_path) as backend:
        events = Events(backend)
        await backend.launch(ps_worker("order-0000cafe", when="running"))
        await events.until(lambda: len(api.pods()) == 4)
        assert all(START_ORDER_CONTAINER not in init_names(p) for p in api.pods())
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
