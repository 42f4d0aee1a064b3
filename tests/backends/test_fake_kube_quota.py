"""The fake API server's ResourceQuota admission (tests/fake_kube_quota.py) does what the
Kubernetes documentation says the quota admission does: pods are charged their requests while
they are not terminal, and a pod that would take its namespace past a hard limit is refused
with 403 and the quota's words."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from tests.fake_kube_api import FakeKubeAPI, deployed_rules


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[tuple[FakeKubeAPI, k8s.CoreV1Api]]:
    # the rights of the namespace-per-virtual-cluster variant: quotas, every namespace
    with FakeKubeAPI(rbac=deployed_rules(per_virtual_cluster=True)) as api:
        configuration = k8s.Configuration()
        k8s_config.load_kube_config(
            config_file=str(api.kubeconfig(tmp_path / "kubeconfig")),
            client_configuration=configuration,
        )
        yield api, k8s.CoreV1Api(k8s.ApiClient(configuration))


def pod(name: str, **requests: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox:1.36", "resources": {"requests": requests}}
            ]
        },
    }


def refusal(core: k8s.CoreV1Api, body: dict[str, Any]) -> tuple[int, str]:
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("jobs", body)
    return caught.value.status, json.loads(caught.value.body)["message"]


def test_a_pod_past_the_quota_is_refused_with_the_quotas_words(fake: Any) -> None:
    api, core = fake
    api.add_quota(
        "jobs",
        "team",
        {
            "requests.cpu": "3",
            "requests.memory": "4Gi",
            "requests.nvidia.com/gpu": "2",
            "pods": "5",
        },
    )
    core.create_namespaced_pod("jobs", pod("a", cpu="2", memory="1Gi", **{"nvidia.com/gpu": "1"}))
    status, message = refusal(core, pod("b", cpu="2", memory="1Gi"))
    assert status == 403
    assert message == (
        'pods "b" is forbidden: exceeded quota: team, requested: requests.cpu=2, '
        "used: requests.cpu=2, limited: requests.cpu=3"
    )
    status, message = refusal(core, pod("c", cpu="1", memory="4Gi", **{"nvidia.com/gpu": "2"}))
    assert message == (
        'pods "c" is forbidden: exceeded quota: team, requested: '
        "requests.memory=4Gi,requests.nvidia.com/gpu=2, used: "
        "requests.memory=1Gi,requests.nvidia.com/gpu=1, limited: "
        "requests.memory=4Gi,requests.nvidia.com/gpu=2"
    )
    core.create_namespaced_pod("jobs", pod("d", cpu="1", memory="3Gi", **{"nvidia.com/gpu": "1"}))
    # the quota controller's status: what the namespace's pods use now
    quota = json.loads(
        core.read_namespaced_resource_quota("team", "jobs", _preload_content=False).data
    )
    assert quota["status"]["used"] == {
        "requests.cpu": "3",
        "requests.memory": "4Gi",
        "requests.nvidia.com/gpu": "2",
        "pods": "2",
    }


def test_a_quota_counts_pods_and_requires_the_requests_it_limits(fake: Any) -> None:
    api, core = fake
    api.add_quota("jobs", "few", {"pods": "1", "cpu": "4"})
    status, message = refusal(core, pod("bare"))
    assert (status, message) == (
        403,
        'pods "bare" is forbidden: failed quota: few: must specify cpu',
    )
    # every container says it, init containers too
    helped = pod("helped", cpu="1")
    helped["spec"]["initContainers"] = [{"name": "init", "image": "busybox:1.36"}]
    assert refusal(core, helped) == (
        403,
        'pods "helped" is forbidden: failed quota: few: must specify cpu',
    )
    core.create_namespaced_pod("jobs", pod("one", cpu="1"))
    status, message = refusal(core, pod("two", cpu="1"))
    assert message == (
        'pods "two" is forbidden: exceeded quota: few, requested: pods=1, used: pods=1, '
        "limited: pods=1"
    )


def test_terminal_pods_no_longer_count(fake: Any) -> None:
    api, core = fake
    api.add_quota("jobs", "team", {"requests.cpu": "2"})
    core.create_namespaced_pod("jobs", pod("first", cpu="2"))
    assert refusal(core, pod("second", cpu="2"))[0] == 403
    api.schedule("first")
    api.run("first")
    api.exit("first", 0)  # Succeeded: its requests are free again, though the pod remains
    core.create_namespaced_pod("jobs", pod("second", cpu="2"))
    assert api.pod_names() == ["first", "second"]


def test_pods_in_a_namespace_that_does_not_exist_are_refused(fake: Any) -> None:
    _, core = fake
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("nowhere", pod("lost"))
    assert caught.value.status == 404
    assert json.loads(caught.value.body)["message"] == 'namespaces "nowhere" not found'
