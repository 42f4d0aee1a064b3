"""One driver per backend for the conformance suite (tests/backends/test_backend_conformance.py):
the Docker simulator on the local engine, and Kubernetes on the fake API server with a kubelet
played here that runs each bound pod's init containers (the gang's barrier, the start-order wait)
against the fake's pod DNS and its main container on the local Docker engine, so both backends run
the same commands in real containers and a test reads what those saw."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
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
from backends.kubernetes_gang import BARRIER_CONTAINER
from backends.kubernetes_pod_spec import CONFIG_DIR
from backends.kubernetes_settings import KubernetesSettings
from backends.kubernetes_start_order import START_ORDER_CONTAINER
from simulator.containers import Engine
from simulator.oom_kills import killed_for_memory
from simulator.settings import NodeSpec
from tests.fake_kube_api import FakeKubeAPI
from tests.simulated import ENDED, IMAGE, remove_leftovers
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


_SHIMS = {
    # what the init containers ask of cluster DNS, answered from the fake's DNS names (the
    # hosts file the kubelet keeps): `getent hosts NAME`, `nslookup NAME`, and `nc` to a name
    "getent": '[ "$1" = hosts ] || exit 2\nawk -v n="$2" \'$2 == n { print; found = 1 } '
    'END { exit !found }\' "$FAKE_KUBE_HOSTS"\n',
    "nslookup": 'awk -v n="$1" \'$2 == n { print "Address: " $1; found = 1 } '
    'END { exit !found }\' "$FAKE_KUBE_HOSTS"\n',
    "nc": 'n=$#\nwhile [ "$n" -gt 0 ]; do\n  a=$1; shift\n'
    '  ip=$(awk -v n="$a" \'$2 == n { print $1; exit }\' "$FAKE_KUBE_HOSTS")\n'
    '  set -- "$@" "${ip:-$a}"; n=$((n - 1))\ndone\nexec /usr/bin/busybox nc "$@"\n',
}
PLAYED_INIT = (BARRIER_CONTAINER, START_ORDER_CONTAINER)
SANDBOX_IMAGE = IMAGE  # what holds a pod's network (the pause container's part)
SPARE_SANDBOXES = 4  # started ahead, so binding a pod needs no container start


@dataclass
class _KubeletPod:
    """What the kubelet runs for one pod: its sandbox (which holds the pod's network and
    address, as the pause container does), the init container running, then main."""

    name: str
    sandbox: Container
    inits: list[dict[str, Any]]
    process: subprocess.Popen[bytes] | None = None
    running_init: str = ""
    output: Path | None = None
    failed: bool = False
    main: Container | None = None
    logged: int = 0


class DockerKubelet:
    """Plays the kubelet for the fake API server. Once the scheduler binds a pod, a sandbox
    container gives it its address (the pod IP, as the pause container does), then its init
    containers run one by one, each to success before the next (tests/fake_kube_init.py):
    the gang's barrier and the start-order wait run their own scripts, here on this machine
    with `getent`, `nslookup` and `nc` answered from the fake's pod DNS (peers' pods that
    exist, have an address and are selected by the headless Service), and `nc` reaching the
    depended-on pods' real sockets. An init container that fails fails the pod. Then the main
    container runs on the local Docker engine in the sandbox's network, as the kubelet starts
    it (the runtime-config volume projected from the attempt's ConfigMaps and the pod's
    annotations, the pod IP by the downward API, peers' names in its hosts file); its output
    is the pod's log and its exit code the pod's ending. A pod deleted from the API has its
    containers removed (the fake tells the SIGTERM ending). The prepare init container (it
    fetches materials into volumes) is not run here: it is told as having succeeded."""

    def __init__(self, api: FakeKubeAPI, work_dir: Path) -> None:
        self.api = api
        self.work_dir = work_dir
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.label = uuid.uuid4().hex[:12]
        self.engine = docker.from_env()
        self.hosts = work_dir / "hosts"
        self.hosts.write_text("127.0.0.1 localhost\n")
        shims = work_dir / "bin"
        shims.mkdir(exist_ok=True)
        for tool, script in _SHIMS.items():
            (shims / tool).write_text("#!/bin/sh\n" + script)
            (shims / tool).chmod(0o755)
        self.env = {
            **os.environ,
            "PATH": f"{shims}:{os.environ['PATH']}",
            "FAKE_KUBE_HOSTS": str(self.hosts),
        }
        self.pods: dict[str, _KubeletPod] = {}  # pod uid -> what runs for it
        self._spare: list[tuple[Container, str]] = []  # sandboxes started ahead, with their IP
        self._given: dict[str, Container] = {}  # pod uid -> the sandbox its address is of
        self._sandbox_lock = threading.Lock()
        api.allocate_ip = self._allocate
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for pod in self.pods.values():
            if pod.process is not None and pod.process.poll() is None:
                pod.process.kill()
                pod.process.wait()
        for container in self.engine.containers.list(
            all=True, filters={"label": f"{KUBELET_LABEL}={self.label}"}
        ):
            with contextlib.suppress(docker.errors.APIError):
                container.remove(force=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self._tick()

    def _allocate(self, pod: dict[str, Any]) -> str:
        """The bound pod's address: a sandbox's, started ahead when one is spare (the fake
        calls this under its lock; it never calls the fake)."""
        with self._sandbox_lock:
            sandbox, ip = self._spare.pop() if self._spare else self._new_sandbox()
            self._given[pod["metadata"]["uid"]] = sandbox
        return ip

    def _new_sandbox(self) -> tuple[Container, str]:
        sandbox = self.engine.containers.run(
            SANDBOX_IMAGE,
            command=["sleep", "86400"],
            volumes={str(self.hosts): {"bind": "/etc/hosts", "mode": "ro"}},
            labels={KUBELET_LABEL: self.label},
            detach=True,
        )
        sandbox.reload()
        networks = sandbox.attrs["NetworkSettings"]["Networks"]
        return sandbox, next(n["IPAddress"] for n in networks.values() if n.get("IPAddress"))

    def _tick(self) -> None:
        with self._sandbox_lock:
            missing = SPARE_SANDBOXES - len(self._spare)
        for _ in range(missing):
            spare = self._new_sandbox()
            with self._sandbox_lock:
                self._spare.append(spare)
        pods = {p["metadata"]["uid"]: p for p in self.api.pods()}
        for uid, pod in pods.items():
            if uid not in self.pods and _ready_to_start(pod):
                self.pods[uid] = self._sandbox(pod)
        # the hosts file is shared with every sandbox: written in place, never replaced
        names = sorted(self.api.dns_names().items())
        text = "127.0.0.1 localhost\n" + "".join(f"{ip} {name}\n" for name, ip in names)
        if self.hosts.read_text() != text:
            self.hosts.write_text(text)
        for uid, run in list(self.pods.items()):
            if uid not in pods:  # deleted: the kubelet kills what it ran
                self._remove(run)
                del self.pods[uid]
            elif run.main is None:
                self._initialize(run, pods[uid])
            else:
                self._watch_main(run, pods[uid])

    def _sandbox(self, pod: dict[str, Any]) -> _KubeletPod:
        """The pod's sandbox: the one its address was given from when it was bound (one bound
        by the test itself gets its own now, and its address changes to it)."""
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        with self._sandbox_lock:
            sandbox = self._given.pop(uid, None)
        if sandbox is None:
            sandbox, ip = self._new_sandbox()
            self.api.set_pod_ip(name, ip)
        inits = list(pod["spec"].get("initContainers") or [])
        return _KubeletPod(name=name, sandbox=sandbox, inits=inits)

    def _initialize(self, run: _KubeletPod, pod: dict[str, Any]) -> None:
        """Run the init containers in order, then main."""
        if run.failed:
            return
        if run.process is not None:
            code = run.process.poll()
            if code is None:
                return
            assert run.output is not None
            said = run.output.read_text(errors="replace")
            self.api.init_exit(run.name, run.running_init, code, said)
            run.process = None
            run.failed = code != 0
            return
        if run.inits:
            init = run.inits.pop(0)
            self.api.init_start(run.name, init["name"])
            if init["name"] not in PLAYED_INIT:
                self.api.init_exit(run.name, init["name"], 0)
                return
            run.running_init = init["name"]
            run.output = self.work_dir / f"{run.name}.{init['name']}.out"
            with run.output.open("wb") as out:
                run.process = subprocess.Popen(
                    init["command"], env=self.env, stdout=out, stderr=subprocess.STDOUT
                )
            return
        run.main = self._start(pod, run.sandbox)
        self.api.run(run.name)

    def _watch_main(self, run: _KubeletPod, pod: dict[str, Any]) -> None:
        assert run.main is not None
        with contextlib.suppress(docker.errors.NotFound):
            run.main.reload()
            output = run.main.logs()
            if len(output) > run.logged:
                self.api.write_log(run.name, output[run.logged :].decode(errors="replace"))
                run.logged = len(output)
            if run.main.status == "exited" and _main_running(pod):
                info = Engine(self.engine).inspect(run.main.id)
                assert info is not None and info.exit_code is not None
                # the kubelet tells the cgroup's kill as OOMKilled (Docker's flag alone can
                # miss it under load)
                if killed_for_memory(self.engine.api, info):
                    self.api.oom(run.name)
                else:
                    self.api.exit(run.name, info.exit_code)

    def _remove(self, run: _KubeletPod) -> None:
        if run.process is not None and run.process.poll() is None:
            run.process.kill()
            run.process.wait()
        for container in (run.main, run.sandbox):
            if container is not None:
                with contextlib.suppress(docker.errors.APIError):
                    container.remove(force=True)

    def _start(self, pod: dict[str, Any], sandbox: Container) -> Container:
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
            network_mode=f"container:{sandbox.id}",
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
        and pod["status"].get("phase") == "Pending"
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
