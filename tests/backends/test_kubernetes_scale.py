"""A large attempt's objects: every one within its API limit at 5,000 instances, and every
instance still given exactly the environment runtime_env defines (the objects are built from
one environment per role plus each instance's own variables; bench/kubernetes_objects.py
measures the time)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from backends import kubernetes_attempt
from backends.base import LaunchRequest, PortRequest, ResourceRequest, RoleLaunch
from backends.kubernetes_manifests import AttemptBuilder
from backends.kubernetes_settings import KubernetesSettings
from backends.runtime_env import instance_variables, runtime_env
from tests.backends.test_kubernetes_manifests import config_files, request_of
from tests.fake_kube_admission import DATA_LIMIT, name_refusal, size_refusal
from tests.fake_kube_api import validate
from tests.jobs import V2_JOB

SETTINGS = KubernetesSettings(state_dir=Path("/nonexistent"))
RESOURCES = {"Service": "services", "ConfigMap": "configmaps", "Secret": "secrets"}
ANNOTATIONS_LIMIT = 256 * 1024


def large_job(workers: int) -> LaunchRequest:
    def role(name: str, instances: int) -> RoleLaunch:
        return RoleLaunch(
            name=name,
            instances=instances,
            image="busybox:1.36",
            resources=ResourceRequest(cpu=1, memory_mb=512, ports=[PortRequest(label="grpc")]),
            commands=["train --rank $PAI_TASK_INDEX"],
            env={"ROLE_SETTING": name},
        )

    return LaunchRequest(
        job_id="large-0a1b2c3d",
        job_name="large",
        user="alice",
        roles=[role("ps", 4), role("worker", workers)],
        secrets={"token": "t"},
        env={"JOB_SETTING": "on"},
    )


def test_no_object_of_a_5000_instance_attempt_is_over_its_api_limit() -> None:
    request = large_job(4996)
    objects = AttemptBuilder(request, SETTINGS, "jobs").objects()
    assert len(objects.pods) == 5000
    assert objects.extra_config_maps, "the shared environment is split over ConfigMaps"
    for obj in objects.all():
        resource = RESOURCES.get(obj["kind"], "pods" if obj["kind"] == "Pod" else "other")
        assert size_refusal(resource, obj) is None, obj["metadata"]["name"]
        assert name_refusal(resource, obj) is None, obj["metadata"]["name"]
        notes = obj["metadata"].get("annotations") or {}
        assert sum(len(k) + len(v.encode()) for k, v in notes.items()) < ANNOTATIONS_LIMIT
    for config in [objects.config_map, *objects.extra_config_maps]:
        data = sum(len(k) + len(v.encode()) for k, v in config["data"].items())
        assert data <= DATA_LIMIT
    for obj in [objects.service, objects.config_map, *objects.extra_config_maps, objects.pods[-1]]:
        validate(obj)


def test_every_instance_of_a_large_attempt_reads_its_whole_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # parts of 16 KiB, so a few hundred instances need several (the environment of thousands
    # is more than one process may be given: the kernel's limit, not the objects')
    monkeypatch.setattr(kubernetes_attempt, "ENV_PART_BYTES", 16 * 1024)
    request = large_job(296)
    builder = AttemptBuilder(request, SETTINGS, "jobs")
    objects = builder.objects()
    assert len(objects.extra_config_maps) > 2
    by_host = {p["spec"]["hostname"]: p for p in objects.pods}
    for host, (role, index) in {"ps-3": ("ps", 3), "worker-295": ("worker", 295)}.items():
        folder = tmp_path / host
        folder.mkdir()
        for path, text in config_files(objects, by_host[host]).items():
            (folder / path).write_text(text)
        # what the pod's command does: the parts in name order, then the instance's own part
        shown = subprocess.run(
            [
                "sh",
                "-c",
                f"env -i sh -c 'cat {folder}/env-common-*.sh {folder}/env-instance.sh "
                f"> {folder}/all.sh; . {folder}/all.sh; env -0'",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        got = dict(item.split("=", 1) for item in shown.split("\0") if item and "=" in item)
        got.pop("PWD", None), got.pop("SHLVL", None), got.pop("_", None)
        expected = runtime_env(request, builder.placements, role, index)
        del expected["PAI_CONTAINER_HOST_IP"], expected["PAI_CURRENT_CONTAINER_IP"]
        assert got == expected


def test_an_instances_environment_is_its_roles_first_with_its_own_variables() -> None:
    """What the builder relies on: runtime_env of instance i is that of instance 0 with
    instance_variables(i) in place and the job's and role's env over them."""
    for request in (request_of(V2_JOB), large_job(5)):
        builder = AttemptBuilder(request, SETTINGS, "jobs")
        placements = builder.placements
        for role in request.roles:
            first = runtime_env(request, placements, role.name, 0)
            for index in range(role.instances):
                own = instance_variables(role, index, placements[(role.name, index)])
                rebuilt = {**first, **own, **request.env, **role.env}
                assert rebuilt == runtime_env(request, placements, role.name, index)


def test_an_attempt_adopted_from_before_the_split_keeps_its_one_config_map(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An attempt made before the shared environment was split has it all in one ConfigMap;
    an instance run again after an upgrade reads that one, not parts never made."""
    monkeypatch.setattr(kubernetes_attempt, "ENV_PART_BYTES", 16 * 1024)
    request = large_job(296)
    assert AttemptBuilder(request, SETTINGS, "jobs").objects().extra_config_maps
    adopted = AttemptBuilder(request, SETTINGS, "jobs", {}, legacy=True)
    pod = adopted.pod("worker", 7, run=2)
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "runtime-config"]
    names = [s["configMap"]["name"] for s in volume["projected"]["sources"] if "configMap" in s]
    assert names == [adopted.config_map()["metadata"]["name"]]
