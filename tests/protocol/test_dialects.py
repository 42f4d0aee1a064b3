"""Dialect detection and normalisation into the canonical JobSpec, with its defaults."""

from __future__ import annotations

import pytest
import yaml

from server.protocol import Dialect, Kind, PrerequisiteType, parse_document, parse_job
from tests.corpus import CORPUS, seed_yaml_blocks
from tests.jobs import as_json, as_yaml, draft, v1, v2


@pytest.mark.shared("seeds")
def test_seed_examples_are_accepted() -> None:
    (cifar,) = [b for b in seed_yaml_blocks("000") if "name: tensorflow_cifar10" in b]
    result = parse_job(cifar)
    assert result.ok, result.errors
    spec = result.spec
    assert spec is not None and spec.dialect is Dialect.DRAFT
    assert [r.name for r in spec.task_roles] == ["worker", "ps_server"]
    worker = spec.role("worker")
    assert worker is not None
    assert (worker.data, worker.script, worker.output) == (
        "cifar10",
        "tensorflow_cnnbenchmarks",
        "mycifar10",
    )
    assert spec.prerequisite("mycifar10", PrerequisiteType.STORAGE) is not None
    assert worker.resources.gpu == 4 and worker.resources.shm_mb == 64

    (serving,) = seed_yaml_blocks("001")
    result = parse_job(serving)
    assert result.ok, result.errors
    assert result.spec is not None and result.spec.retry_count == -2
    port = result.spec.task_roles[0].resources.port("model_server")
    assert port is not None and port.count == 1


@pytest.mark.shared("corpus")
def test_nested_job_variant() -> None:
    path = CORPUS / "drafts/pai__rest-server__marketplace__tensorflow_cifar10_serving.yaml"
    result = parse_job(path.read_bytes())
    assert result.ok, result.errors
    spec = result.spec
    assert spec is not None and spec.name == "mnist_tensorflow_serving"
    # `instances: $job.parameters.num_of_worker` takes the parameter's value
    assert spec.task_roles[0].instances == 1
    overridden = parse_job(path.read_bytes(), {"num_of_worker": 3})
    assert overridden.spec is not None and overridden.spec.task_roles[0].instances == 3


def test_instances_from_a_missing_parameter() -> None:
    doc = draft()
    doc["tasks"][0]["resource"]["instances"] = "$job.parameters.workers"
    (error,) = parse_job(as_yaml(doc)).errors
    assert error.path == "tasks[0].resource.instances"
    assert "'workers', which is not defined" in error.message


def test_draft_task_may_name_an_output_instead_of_a_storage() -> None:
    doc = draft()
    task = doc["tasks"][0]
    task["output"] = task.pop("storage")
    doc["prerequisites"][2]["type"] = "output"
    result = parse_job(as_yaml(doc))
    assert result.ok, result.errors
    assert result.spec is not None and result.spec.task_roles[0].output == "models"


def test_draft_task_without_dockerimage_uses_the_only_image() -> None:
    doc = draft()
    del doc["tasks"][1]["dockerimage"]
    spec = parse_job(as_yaml(doc)).spec
    assert spec is not None and spec.task_roles[1].docker_image == "tf"


def test_defaults() -> None:
    v2_spec = parse_job(as_yaml(v2())).spec
    draft_spec = parse_job(as_yaml(draft())).spec
    v1_spec = parse_job(as_json(v1())).spec
    assert v2_spec and draft_spec and v1_spec
    for spec in (v2_spec, draft_spec, v1_spec):
        assert spec.virtual_cluster == "default"
        assert spec.retry_count == 0
        for role in spec.task_roles:
            labels = [p.label for p in role.resources.ports]
            assert {"ssh", "http"} <= set(labels)
            assert role.completion.min_failed == 1
    ps = v2_spec.role("ps")
    assert ps is not None and ps.instances == 1 and ps.resources.shm_mb == 512
    assert ps.completion.min_succeeded == 1  # v2: every instance
    assert draft_spec.task_roles[1].instances == 1
    assert draft_spec.task_roles[1].resources.shm_mb == 64
    assert draft_spec.task_roles[0].completion.min_succeeded == -1  # draft/v1: disabled
    v1_worker = v1_spec.role("worker")
    assert v1_worker is not None
    assert (v1_worker.resources.cpu, v1_worker.resources.memory_mb) == (1, 100)
    assert v1_worker.resources.shm_mb == 64


def test_v1_normalisation() -> None:
    spec = parse_job(as_json(v1())).spec
    assert spec is not None and spec.dialect is Dialect.V1
    assert spec.prerequisite("default", PrerequisiteType.DOCKERIMAGE).uri == ["openpai/tf"]  # type: ignore[union-attr]
    assert spec.env == {"MODE": "fast", "PAI_DATA_DIR": "hdfs://nn/data"}
    ps = spec.role("ps_server")
    assert ps is not None and ps.data == "default" and ps.commands == ["python ps.py"]
    grpc = ps.resources.port("grpc")
    assert grpc is not None and (grpc.count, grpc.begin_at) == (2, 20000)


def test_original_text_is_kept() -> None:
    text = as_yaml(v2())
    spec = parse_job(text).spec
    assert spec is not None and spec.source == text


def test_detection_reports_the_dialect() -> None:
    assert parse_job(as_yaml(v2())).dialect is Dialect.V2
    assert parse_job(as_yaml(draft())).dialect is Dialect.DRAFT
    assert parse_job(as_json(v1())).dialect is Dialect.V1
    unknown = parse_job("name: x\nfoo: 1\n")
    assert [e.code for e in unknown.errors] == ["unknown-dialect"]


def test_components() -> None:
    for text, type_ in (
        ("protocolVersion: 2\nname: img\ntype: dockerimage\nuri: busybox\n", "dockerimage"),
        ("protocol_version: v2\nname: models\ntype: storage\nuri: [hdfs://x]\n", "storage"),
        ("name: data1\ntype: data\nuri: [http://x/y.zip]\n", "data"),
    ):
        result = parse_document(text)
        assert result.ok and result.kind is Kind.COMPONENT, result.errors
        assert result.component is not None and result.component.type.value == type_
        assert parse_job(text).errors[0].code == "not-a-job"


SEED_004_JOB = """
protocolVersion: 2
name: mnist_with_marketplace
type: job
prerequisites:
  - type: dockerimage
    uri: 'openpai/standard:python_3.6-pytorch_1.2.0-gpu'
    name: docker_image_0
  - name: install_wget
    type: script
    plugin: com.microsoft.pai.runtimeplugin.cmd
    failurePolicy: ignore
    callbacks:
      - event: taskStarts
        commands: [apt update, apt install -y wget]
      - event: taskFails
        commands: ['echo "sleeping {{ min }} minutes"']
  - name: imagenet
    type: data
    plugin: com.microsoft.pai.runtimeplugin.cmd
    require:
      - name: marketplace://name/confignfs_pvc
        template_variables: {mountPath: /mnt/confignfs_pvc}
      - marketplace://prerequisites/itemId/7
    requireStorages:
      - name: confignfs
        mountPath: /mnt/confignfs
    template_variables:
      - name: dataPath
    callbacks:
      - event: taskStarts
        commands: ['mkdir -p {{ dataPath }}']
taskRoles:
  taskrole:
    instances: 1
    completion: {minFailedInstances: 1}
    taskRetryCount: 0
    prerequisites:
      - install_wget
      - imagenet
      - mnist
      - marketplace://prerequisites/itemId/1
      - https://example.org/prerequisites/debug_hook.yaml
    dockerImage: docker_image_0
    resourcePerInstance: {gpu: 1, cpu: 3, memoryMB: 29065}
    commands: [sleep 0s]
defaults:
  virtualCluster: default
extras:
  reference_prerequisites:
    - name: mnist
      require:
        - name: marketplace://name/mnist
          template_variables: {dataPath: /dataset/mnist}
"""


def test_seed_004_prerequisite_features() -> None:
    result = parse_job(SEED_004_JOB)
    assert result.ok, result.errors
    spec = result.spec
    assert spec is not None
    imagenet = spec.prerequisite("imagenet")
    assert imagenet is not None
    assert [r.name for r in imagenet.require] == [
        "marketplace://name/confignfs_pvc",
        "marketplace://prerequisites/itemId/7",
    ]
    assert imagenet.require[0].template_variables == {"mountPath": "/mnt/confignfs_pvc"}
    assert imagenet.require_storages[0].mount_path == "/mnt/confignfs"
    assert imagenet.template_variables == ["dataPath"]
    wget = spec.prerequisite("install_wget")
    assert wget is not None and wget.failure_policy == "ignore"
    assert [c.event.value for c in wget.callbacks] == ["taskStarts", "taskFails"]
    role = spec.task_roles[0]
    assert role.prerequisites[-2:] == [
        "marketplace://prerequisites/itemId/1",
        "https://example.org/prerequisites/debug_hook.yaml",
    ]
    assert spec.extras["reference_prerequisites"][0]["name"] == "mnist"


def test_bad_references_and_callbacks() -> None:
    doc = yaml.safe_load(SEED_004_JOB)
    doc["taskRoles"]["taskrole"]["prerequisites"].append("marketplace://items/3")
    doc["prerequisites"][1]["callbacks"][0]["event"] = "containerStart"
    doc["prerequisites"][2]["requireStorages"][0]["mountPath"] = "relative/dir"
    found = {e.path: e.code for e in parse_job(as_yaml(doc)).errors}
    assert found == {
        "taskRoles.taskrole.prerequisites[5]": "reference",
        "prerequisites[1].callbacks[0].event": "enum",
        "prerequisites[2].requireStorages[0].mountPath": "path",
    }


def test_plugin_item_without_type_is_a_component() -> None:
    text = """
name: install_wget
plugin: cmd
plugin_params:
  callbacks:
    - event: taskStarts
      commands: [apt update, apt install -y wget]
"""
    result = parse_document(text)
    assert result.ok and result.kind is Kind.COMPONENT, result.errors
    assert result.component is not None
    assert result.component.type is PrerequisiteType.PLUGIN
    assert result.component.callbacks[0].commands == ["apt update", "apt install -y wget"]


def test_a_script_given_a_list_of_repositories_keeps_it_through_v2() -> None:
    from server.protocol import to_v2_yaml

    job = draft()
    job["prerequisites"] = [
        *job["prerequisites"],
        {"name": "two", "type": "script", "uri": ["https://h/a/one@v1", "https://h/b/two.git"]},
        {"name": "single", "type": "script", "uri": "https://h/a/one@v1"},
    ]
    spec = parse_job(as_yaml(job)).spec
    assert spec is not None
    written = yaml.safe_load(to_v2_yaml(spec))
    scripts = {p["name"]: p["uri"] for p in written["prerequisites"] if p["type"] == "script"}
    assert scripts["two"] == ["https://h/a/one@v1", "https://h/b/two.git"]
    assert scripts["single"] == "https://h/a/one@v1"
    again = parse_job(to_v2_yaml(spec)).spec
    assert again is not None
    assert again.prerequisite("two", PrerequisiteType.SCRIPT).uri_list
    assert not again.prerequisite("single", PrerequisiteType.SCRIPT).uri_list
