"""One driver per backend for the conformance suite (tests/test_backend_conformance.py): the
Docker simulator on the local engine, and Kubernetes on the fake API server with a kubelet
played here that runs each bound pod's main container on the local Docker engine, so both
backends run the same commands in real containers and a test reads what those saw."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import docker
import docker.errors
from docker.models.containers import Container

from backends.base import EventKind, InstanceEvent, InstanceKey, InstanceReport, LaunchRequest
from backends.docker import DockerBackend
from backends.kubernetes import KubernetesBackend
from backends.kubernetes_manifests import CONFIG_DIR
from backends.kubernetes_settings import KubernetesSettings
from simulator.settings import NodeSpec
from tests.fake_kube_api import FakeKubeAPI
from tests.simulated import ENDED, remove_leftovers
from tests.simulated import settings as simulator_settings
from tests.waiting import until_notified_async

NODE_CPU = 4  # each of the two nodes both backends are given
NODE_MEMORY_MB = 8192
NODES = ("node-a", "node-b")
KUBELET_LABEL = "paigraph.test.kubelet"


class Backend(Protocol):
    """What the suite calls on either backend (backends.base.Backend's methods)."""

    async def launch(self, request: LaunchRequest) -> None: ...
    async def stop(self, job_id: str, attempt: int, grace_seconds: float = 10.0) -> None: ...
    def events(self) -> AsyncIterator[InstanceEvent]: ...
    def logs(self, key: InstanceKey, **kw: Any) -> AsyncIterator[Any]: ...
    async def relaunch(self, key: InstanceKey, run: int | None = None) -> None: ...
    async def reconcile(self) -> list[InstanceReport]: ...
    async def forget(self, job_id: str, attempt: int) -> None: ...
    async def close(self) -> None: ...


class Events:
    """A backend's events, read in the background so a test can wait for a condition."""

    def __init__(self, backend: Backend) -> None:
        self.seen: list[InstanceEvent] = []
        self._changed = asyncio.Condition()
        self._task = asyncio.create_task(self._pump(backend))

    async def _pump(self, backend: Backend) -> None:
        async for event in backend.events():
            async with self._changed:
                self.seen.append(event)
                self._changed.notify_all()

    def of(self, request: LaunchRequest, *kinds: EventKind) -> list[InstanceEvent]:
        return [
            e
            for e in self.seen
            if e.job_id == request.job_id
            and e.attempt == request.attempt
            and (not kinds or e.kind in kinds)
        ]

    def ended(self, request: LaunchRequest) -> dict[str, InstanceEvent]:
        """Instance (`role-index`) -> its latest ending event."""
        return {f"{e.role}-{e.index}": e for e in self.of(request, *ENDED)}

    async def until(self, condition: Callable[[], Any], what: str, timeout: float = 90) -> Any:
        return await until_notified_async(self._changed, condition, what, timeout)

    async def all_ended(self, request: LaunchRequest) -> dict[str, InstanceEvent]:
        await self.until(
            lambda: len(self.ended(request)) == request.total_instances,
            f"every instance of {request.job_id} ending",
        )
        return self.ended(request)

    def close(self) -> None:
        self._task.cancel()


@dataclass
class Driver:
    """A started backend of one kind and what the suite needs around it."""

    kind: str  # "docker" or "kubernetes"
    backend: Backend
    events: Events
    reopen: Callable[[], Any]  # an async context manager: a second backend on the same state
    differences: dict[str, str] = field(default_factory=dict)

    async def log(self, key: InstanceKey) -> str:
        return "".join([chunk.data async for chunk in self.backend.logs(key)])


class DockerKubelet:
    """Plays the kubelet for the fake API server: once the scheduler binds a pod, its main
    container runs on the local Docker engine as the kubelet would start it (the runtime-config
    volume projected from the attempt's ConfigMaps and the pod's annotations, the pod IP given
    by the downward API), its output is the pod's log and its exit code the pod's ending. A
    pod deleted from the API has its container removed (the fake tells the SIGTERM ending).
    Init containers (prepare, barrier) are not run: the fake has no DNS for the barrier."""

    def __init__(self, api: FakeKubeAPI, work_dir: Path) -> None:
        self.api = api
        self.work_dir = work_dir
        self.label = uuid.uuid4().hex[:12]
        self.engine = docker.from_env()
        # pod uid -> its name, container and the bytes of its output logged so far
        self.running: dict[str, tuple[str, Container, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for container in self.engine.containers.list(
            all=True, filters={"label": f"{KUBELET_LABEL}={self.label}"}
        ):
            with contextlib.suppress(docker.errors.APIError):
                container.remove(force=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self._tick()

    def _tick(self) -> None:
        pods = {p["metadata"]["uid"]: p for p in self.api.pods()}
        for uid, pod in pods.items():
            if uid not in self.running and _ready_to_start(pod):
                name = pod["metadata"]["name"]
                self.running[uid] = (name, self._start(pod), 0)
                self.api.run(name)
        for uid, (name, container, logged) in list(self.running.items()):
            if uid not in pods:  # deleted: the kubelet kills what it ran
                with contextlib.suppress(docker.errors.APIError):
                    container.remove(force=True)
                del self.running[uid]
                continue
            with contextlib.suppress(docker.errors.NotFound):
                container.reload()
                output = container.logs()
                if len(output) > logged:
                    self.api.write_log(name, output[logged:].decode(errors="replace"))
                    self.running[uid] = (name, container, len(output))
                state = container.attrs["State"]
                if container.status == "exited" and _main_running(pods[uid]):
                    if state["OOMKilled"]:  # the kubelet tells the cgroup's kill as OOMKilled
                        self.api.oom(name)
                    else:
                        self.api.exit(name, state["ExitCode"])

    def _start(self, pod: dict[str, Any]) -> Container:
        name = pod["metadata"]["name"]
        config = self.work_dir / name
        config.mkdir(parents=True, exist_ok=True)
        for path, text in self._projected(pod).items():
            (config / path).write_text(text)
        (main,) = pod["spec"]["containers"]
        pod_ip = pod["status"]["podIP"]
        env = {e["name"]: e.get("value", pod_ip) for e in main.get("env", [])}
        return self.engine.containers.run(
            main["image"],
            command=main["command"],
            environment=env,
            working_dir=main["workingDir"],
            volumes={str(config): {"bind": CONFIG_DIR, "mode": "ro"}},
            labels={KUBELET_LABEL: self.label},
            mem_limit=_docker_memory(main["resources"]["limits"]["memory"]),
            detach=True,
        )

    def _projected(self, pod: dict[str, Any]) -> dict[str, str]:
        """The runtime-config volume's files, as the kubelet projects them."""
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "runtime-config"]
        files: dict[str, str] = {}
        for source in volume["projected"]["sources"]:
            if "configMap" in source:
                config_map = self.api.get("configmaps", "jobs", source["configMap"]["name"])
                assert config_map is not None, source
                for item in source["configMap"]["items"]:
                    files[item["path"]] = config_map["data"][item["key"]]
            for item in source.get("downwardAPI", {}).get("items", []):
                annotation = item["fieldRef"]["fieldPath"][len("metadata.annotations['") : -2]
                files[item["path"]] = pod["metadata"]["annotations"][annotation]
        return files


def _docker_memory(quantity: str) -> str:
    """A memory quantity as the backend writes it (`<n>Mi`) in Docker's words."""
    assert quantity.endswith("Mi"), quantity
    return f"{quantity[:-2]}m"


def _main_state(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = [s for s in pod["status"].get("containerStatuses", []) if s["name"] == "main"]
    return statuses[0]["state"] if statuses else {}


def _ready_to_start(pod: dict[str, Any]) -> bool:
    return (
        bool(pod["spec"].get("nodeName"))
        and not pod["metadata"].get("deletionTimestamp")
        and "waiting" in _main_state(pod)
    )


def _main_running(pod: dict[str, Any]) -> bool:
    return "running" in _main_state(pod)


@asynccontextmanager
async def docker_driver(tmp_path: Path) -> AsyncIterator[Driver]:
    nodes = [NodeSpec(name=n, cpu=NODE_CPU, memory_mb=NODE_MEMORY_MB, gpu=0) for n in NODES]
    config = simulator_settings(tmp_path / "state", nodes=nodes, stop_grace_seconds=2)
    owner = f"conform-{uuid.uuid4().hex[:8]}"

    @asynccontextmanager
    async def opened() -> AsyncIterator[DockerBackend]:
        sim = DockerBackend(config, owner=owner)
        await sim.start()
        try:
            yield sim
        finally:
            await sim.close()

    try:
        async with opened() as sim:
            events = Events(sim)
            try:
                yield Driver("docker", sim, events, opened)
            finally:
                events.close()
    finally:
        remove_leftovers(owner)


@asynccontextmanager
async def kubernetes_driver(tmp_path: Path) -> AsyncIterator[Driver]:
    with FakeKubeAPI() as api:
        for node in NODES:
            api.add_node(node, cpu=NODE_CPU, memory_mi=NODE_MEMORY_MB)
        config = KubernetesSettings(
            kubeconfig=str(api.kubeconfig(tmp_path / "kubeconfig")),
            state_dir=tmp_path / "state",
            stop_grace_seconds=2,
        )
        kubelet = DockerKubelet(api, tmp_path / "kubelet")

        @asynccontextmanager
        async def opened() -> AsyncIterator[KubernetesBackend]:
            backend = KubernetesBackend(config)
            backend.check()
            await backend.start()
            try:
                yield backend
            finally:
                await backend.close()

        try:
            async with opened() as backend:
                events = Events(backend)
                try:
                    yield Driver("kubernetes", backend, events, opened)
                finally:
                    events.close()
        finally:
            await asyncio.to_thread(kubelet.close)
