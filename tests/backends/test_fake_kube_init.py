"""The fake API server's kubelet runs init containers and answers pod DNS as Kubernetes
documents (tests/fake_kube_init.py), on the objects the backend creates for a gang."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends.kubernetes_gang import BARRIER_CONTAINER
from backends.kubernetes_manifests import AttemptBuilder
from backends.kubernetes_settings import KubernetesSettings
from backends.kubernetes_start_order import START_ORDER_CONTAINER
from tests.backends.test_start_order_kubernetes import ps_worker
from tests.fake_kube_api import FakeKubeAPI
from tests.fake_kube_init import init_progress


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as fake:
        fake.add_node("node-1", cpu=16, memory_mi=16384)
        yield fake


def create_attempt(api: FakeKubeAPI) -> dict[str, dict[str, Any]]:
    """The objects of a ps/worker attempt whose workers wait for a ready ps, created and
    bound; hostname -> pod."""
    settings = KubernetesSettings(state_dir=Path("/nonexistent"))
    objects = AttemptBuilder(ps_worker("init-0000abcd"), settings, "jobs").objects()
    for pod in objects.pods:  # the gang's gates lifted, as the backend does once it fits
        pod["spec"].pop("schedulingGates", None)
    for resource, obj in [
        ("services", objects.service),
        ("configmaps", objects.config_map),
        *[("pods", pod) for pod in objects.pods],
    ]:
        obj.setdefault("metadata", {}).pop("ownerReferences", None)
        code, answer = api.create(resource, "jobs", obj)
        assert code == 201, answer
    return {p["spec"]["hostname"]: p for p in api.pods()}


def status(api: FakeKubeAPI, name: str) -> dict[str, Any]:
    pod = api.get("pods", "jobs", name)
    assert pod is not None
    return pod


def test_init_containers_run_in_order_and_main_waits_for_them(api: FakeKubeAPI) -> None:
    pods = create_attempt(api)
    worker = pods["worker-0"]["metadata"]["name"]
    pod = status(api, worker)
    inits = [s["name"] for s in pod["status"]["initContainerStatuses"]]
    assert inits[-2:] == [BARRIER_CONTAINER, START_ORDER_CONTAINER]
    assert pod["status"]["phase"] == "Pending"
    assert init_progress(pod) == f"Init:0/{len(inits)}"
    initialized = next(c for c in pod["status"]["conditions"] if c["type"] == "Initialized")
    assert (initialized["status"], initialized["reason"]) == ("False", "ContainersNotInitialized")
    with pytest.raises(RuntimeError, match="cannot start before"):
        api.init_start(worker, START_ORDER_CONTAINER)
    for name in inits[:-1]:
        api.init_start(worker, name)
        api.init_exit(worker, name, 0)
    assert init_progress(status(api, worker)) == f"Init:{len(inits) - 1}/{len(inits)}"
    main = status(api, worker)["status"]["containerStatuses"][0]
    assert main["state"] == {"waiting": {"reason": "PodInitializing"}}
    api.init_start(worker, START_ORDER_CONTAINER)
    api.init_exit(worker, START_ORDER_CONTAINER, 0)
    pod = status(api, worker)
    assert init_progress(pod) == ""
    assert {"type": "Initialized", "status": "True"} in pod["status"]["conditions"]


def test_a_failed_init_container_fails_a_pod_that_never_restarts(api: FakeKubeAPI) -> None:
    pods = create_attempt(api)
    worker = pods["worker-1"]["metadata"]["name"]
    inits = [s["name"] for s in status(api, worker)["status"]["initContainerStatuses"]]
    api.init_start(worker, inits[0])
    api.init_exit(worker, inits[0], 3, "no peer resolves\n")
    pod = status(api, worker)
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["status"]["phase"] == "Failed"
    ended = pod["status"]["initContainerStatuses"][0]["state"]["terminated"]
    assert (ended["exitCode"], ended["message"]) == (3, "no peer resolves\n")
    with pytest.raises(RuntimeError):
        api.run(worker)


def test_peer_names_resolve_once_their_pods_have_addresses_under_the_headless_service(
    api: FakeKubeAPI,
) -> None:
    pods = create_attempt(api)
    service = pods["ps-0"]["spec"]["subdomain"]
    names = api.dns_names()
    assert {f"{host}.{service}" for host in pods} <= set(names)
    assert (
        names[f"ps-0.{service}.jobs.svc.cluster.local"]
        == status(api, pods["ps-0"]["metadata"]["name"])["status"]["podIP"]
    )
    api.delete("services", "jobs", service)
    assert api.dns_names() == {}, "no headless Service, no names"


def test_a_failed_init_container_runs_again_when_the_pod_restarts_on_failure(
    api: FakeKubeAPI,
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "retried"},
        "spec": {
            "restartPolicy": "OnFailure",
            "initContainers": [{"name": "first", "image": "busybox:1.36"}],
            "containers": [{"name": "main", "image": "busybox:1.36"}],
        },
    }
    code, answer = api.create("pods", "jobs", pod)
    assert code == 201, answer
    api.init_start("retried", "first")
    api.init_exit("retried", "first", 1, "not yet\n")
    first = status(api, "retried")["status"]
    assert first["phase"] == "Pending"
    (init,) = first["initContainerStatuses"]
    assert init["restartCount"] == 1
    assert init["lastState"]["terminated"]["exitCode"] == 1
    assert init["state"] == {"waiting": {"reason": "CrashLoopBackOff"}}
    api.init_start("retried", "first")
    api.init_exit("retried", "first", 0)
    api.run("retried")
    assert status(api, "retried")["status"]["phase"] == "Running"
