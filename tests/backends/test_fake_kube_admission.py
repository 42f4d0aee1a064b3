"""The fake API server refuses what a kube-apiserver refuses, with its status and message:
objects over the size limits, names that break the naming rules, pods that break the
namespace's Pod Security level, and calls the deployed Role does not grant."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from tests.fake_kube_admission import ENFORCE, pod_security_violations
from tests.fake_kube_api import FakeKubeAPI


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[tuple[FakeKubeAPI, k8s.CoreV1Api]]:
    with FakeKubeAPI() as api:
        configuration = k8s.Configuration()
        k8s_config.load_kube_config(
            config_file=str(api.kubeconfig(tmp_path / "kubeconfig")),
            client_configuration=configuration,
        )
        yield api, k8s.CoreV1Api(k8s.ApiClient(configuration))


class Refusal:
    def __init__(self, exc: ApiException) -> None:
        self.status = exc.status
        self.body = json.loads(exc.body)["message"]  # the Status's message


def refused(call: Any, *args: Any) -> Refusal:
    with pytest.raises(ApiException) as caught:
        call(*args)
    return Refusal(caught.value)


def config_map(name: str, size: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"blob": "x" * size},
    }


def pod(name: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox:1.36", **spec.pop("container", {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container], **spec},
    }


def test_data_over_one_mebibyte_and_bodies_over_three_are_refused(fake: Any) -> None:
    api, core = fake
    core.create_namespaced_config_map("jobs", config_map("fits", 1000 * 1024))
    too_long = refused(core.create_namespaced_config_map, "jobs", config_map("big", 1024 * 1024))
    assert too_long.status == 422 and "Too long: must have at most 1048576 bytes" in too_long.body
    too_large = refused(
        core.create_namespaced_config_map, "jobs", config_map("huge", 3 * 1024 * 1024)
    )
    assert too_large.status == 413 and "limit is 3145728" in too_large.body
    assert [m["metadata"]["name"] for m in api.list("configmaps", "jobs")] == ["fits"]


def test_names_must_follow_the_dns_rules(fake: Any) -> None:
    _, core = fake
    bad = refused(core.create_namespaced_config_map, "jobs", config_map("Data_1", 1))
    assert bad.status == 422 and "RFC 1123 subdomain" in bad.body
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "1st"},
        "spec": {"clusterIP": "None"},
    }
    assert "DNS-1035 label" in refused(core.create_namespaced_service, "jobs", service).body
    hosted = pod("ok", hostname="worker_0")
    assert "spec.hostname" in refused(core.create_namespaced_pod, "jobs", hosted).body


def test_pod_security_levels_follow_the_namespace_label(fake: Any) -> None:
    api, core = fake
    host = pod("host", hostNetwork=True)
    answer = refused(core.create_namespaced_pod, "jobs", host)
    assert answer.status == 403
    assert 'violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)' in (
        answer.body
    )
    core.create_namespaced_pod("jobs", pod("plain"))  # baseline admits a default pod
    api.label_namespace("jobs", **{ENFORCE: "restricted"})
    answer = refused(core.create_namespaced_pod, "jobs", pod("plain-2"))
    assert 'violates PodSecurity "restricted:latest"' in answer.body
    for check in ("allowPrivilegeEscalation != false", "runAsNonRoot != true", "seccompProfile"):
        assert check in answer.body
    strict = pod(
        "strict",
        securityContext={"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        container={
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
            }
        },
    )
    core.create_namespaced_pod("jobs", strict)
    api.label_namespace("jobs", **{ENFORCE: "privileged"})
    core.create_namespaced_pod("jobs", host)


def test_baseline_checks_capabilities_host_paths_and_ports() -> None:
    caps = pod("c", container={"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}})
    assert pod_security_violations(caps, "baseline") == [
        "non-default capabilities (container 'main' adds ['SYS_ADMIN'])"
    ]
    host_path = pod("h", volumes=[{"name": "root", "hostPath": {"path": "/"}}])
    assert pod_security_violations(host_path, "baseline") == ["hostPath volumes (volumes ['root'])"]
    port = pod("p", container={"ports": [{"containerPort": 80, "hostPort": 80}]})
    assert pod_security_violations(port, "baseline") == [
        "hostPort (container 'main' uses hostPorts [80])"
    ]
    privileged = pod("v", container={"securityContext": {"privileged": True}})
    assert pod_security_violations(privileged, "baseline")


def test_calls_the_deployed_role_does_not_grant_are_forbidden(fake: Any) -> None:
    _, core = fake
    core.list_namespaced_pod("jobs")  # granted: list pods in the jobs' namespace
    answer = refused(core.list_namespaced_secret, "jobs")
    assert answer.status == 403
    assert 'cannot list resource "secrets" in API group "" in the namespace "jobs"' in answer.body
    # the gang's ClusterRole lets it list pods everywhere, but nothing else leaves the namespace
    core.list_namespaced_pod("paigraph")
    elsewhere = refused(core.list_namespaced_config_map, "paigraph")
    assert elsewhere.status == 403 and 'the namespace "paigraph"' in elsewhere.body
