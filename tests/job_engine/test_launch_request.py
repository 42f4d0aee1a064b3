"""From a parsed job to the LaunchRequest a backend runs: images, materials, hooks, rules."""

from __future__ import annotations

import pytest

from backends.base import Fetch, ImageAuth, LaunchNote, LaunchRequest
from server.jobs.launch import NotRunnable, launch_request
from server.jobs.simulated import simulation_warnings
from server.protocol import resolve_job

JOB = """
protocolVersion: 2
name: composed
type: job
prerequisites:
  - {name: img, type: dockerimage, uri: "paigraph/busybox:test"}
  - {name: mnist, type: data, uri: ["http://example.test/mnist.zip"]}
  - {name: code, type: script, uri: "https://example.test/code.git@abc123"}
  - {name: models, type: output, uri: ""}
  - name: setup
    type: script
    plugin: com.microsoft.pai.runtimeplugin.cmd
    callbacks:
      - {event: taskStarts, commands: [echo setup-start]}
      - {event: taskSucceeds, commands: [echo setup-done]}
      - {event: taskFails, commands: [echo setup-failed]}
  - name: notify
    type: script
    plugin: com.microsoft.pai.runtimeplugin.cmd
    callbacks:
      - {event: taskStarts, commands: [echo notify-start]}
      - {event: taskSucceeds, commands: [echo notify-done]}
taskRoles:
  trainer:
    instances: 2
    dockerImage: img
    data: mnist
    script: code
    output: models
    prerequisites: [setup, notify]
    resourcePerInstance: {cpu: 2, memoryMB: 1024, gpu: 0, ports: {grpc: 2}}
    commands: [python train.py]
  evaluator:
    dockerImage: img
    resourcePerInstance: {cpu: 1, memoryMB: 512, gpu: 0}
    completion: {minSucceededInstances: -1}
    commands: [echo eval]
extras:
  com.microsoft.pai.runtimeplugin:
    - plugin: cmd
      taskroles: [evaluator]
      parameters:
        callbacks:
          - {event: taskStarts, commands: [echo extras-start]}
    - plugin: ssh
      parameters: {jobssh: true}
"""


def _request(text: str = JOB):
    result = resolve_job(text)
    assert result.spec is not None, result.errors
    return launch_request(result.spec, job_id="j1", attempt=3, user="alice")


def test_roles_carry_image_resources_ports_and_rules() -> None:
    request = _request()
    assert (request.job_id, request.attempt, request.user) == ("j1", 3, "alice")
    trainer = request.role("trainer")
    assert trainer.image == "paigraph/busybox:test"
    assert (trainer.instances, trainer.resources.cpu, trainer.resources.memory_mb) == (2, 2, 1024)
    assert [(p.label, p.count) for p in trainer.resources.ports] == [
        ("grpc", 2),
        ("ssh", 1),
        ("http", 1),
    ]
    assert (trainer.min_failed, trainer.min_succeeded) == (1, 2)
    evaluator = request.role("evaluator")
    assert (evaluator.min_failed, evaluator.min_succeeded) == (1, -1)


def test_data_script_and_output_become_materials() -> None:
    trainer = _request().role("trainer")
    assert [(m.name, m.kind, m.uris) for m in trainer.materials] == [
        ("mnist", Fetch.DOWNLOAD, ["http://example.test/mnist.zip"]),
        ("code", Fetch.CLONE, ["https://example.test/code.git@abc123"]),
        ("models", Fetch.MOUNT, []),
    ]
    assert _request().role("evaluator").materials == []


def test_cmd_callbacks_become_hooks_in_plugin_order_and_reverse_after() -> None:
    request = _request()
    hooks = request.role("trainer").hooks
    assert hooks.on_start == ["echo setup-start", "echo notify-start"]
    assert hooks.on_success == ["echo notify-done", "echo setup-done"]
    assert hooks.on_failure == ["echo setup-failed"]
    # the extras entry is filtered to its task roles; the ssh plugin is not a cmd plugin
    assert request.role("evaluator").hooks.on_start == ["echo extras-start"]


def test_v1_data_and_output_are_exported_never_fetched() -> None:
    text = """{"jobName": "old", "image": "paigraph/busybox:test", "dataDir": "hdfs://nn/data",
      "taskRoles": [{"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 256,
      "command": "true"}]}"""
    request = _request(text)
    assert request.env["PAI_DATA_DIR"] == "hdfs://nn/data"
    assert request.env["PAI_OUTPUT_DIR"] == "/Output/old"  # $PAI_DEFAULT_FS_URI/Output/$jobName
    assert request.role("main").materials == []


V1_DIRS = """{{"jobName": "old", "image": "paigraph/busybox:test", "virtualCluster": "research",
  "dataDir": "$PAI_DEFAULT_FS_URI/data/$PAI_USER_NAME/${{PAI_JOB_NAME}}_$PAI_JOB_NAME_X",
  "outputDir": "$PAI_DEFAULT_FS_URI/out/$PAI_USERNAME/$PAI_JOB_VC_NAME/$PAI_TASK_INDEX",
  "codeDir": "{code}",
  "taskRoles": [{{"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 256,
  "command": "true"}}]}}"""


def test_the_default_file_system_of_the_backend_is_pai_default_fs_uri_and_expanded() -> None:
    """On a backend with a default file system (the simulator's), `$PAI_DEFAULT_FS_URI` in v1's
    locations and in a prerequisite's URI names it, and every instance is told it."""
    fs = "hdfs://paigraph-dfs:9000"
    result = resolve_job(V1_DIRS.format(code="$PAI_DEFAULT_FS_URI/code/$PAI_USER_NAME"))
    assert result.spec is not None, result.errors
    request = launch_request(result.spec, job_id="j", user="alice", default_fs=fs)
    assert request.env["PAI_DEFAULT_FS_URI"] == fs
    assert request.env["PAI_DATA_DIR"] == f"{fs}/data/alice/old_$PAI_JOB_NAME_X"
    ((code),) = request.role("main").materials
    assert (code.name, code.uris, code.as_directory) == ("code", [f"{fs}/code/alice"], True)
    v2 = JOB.replace("http://example.test/mnist.zip", "$PAI_DEFAULT_FS_URI/mnist")
    v2_result = resolve_job(v2)
    assert v2_result.spec is not None, v2_result.errors
    trainer = launch_request(v2_result.spec, job_id="j", default_fs=fs).role("trainer")
    assert trainer.materials[0].uris == [f"{fs}/mnist"]


def test_v1_locations_expand_the_job_variables_and_codedir_is_copied_to_code() -> None:
    result = resolve_job(V1_DIRS.format(code="https://example.org/src/train.py"))
    assert result.spec is not None, result.errors
    request = launch_request(result.spec, job_id="j", user="alice")
    # whole names only; a variable with one value per instance stays for the shell
    assert request.env["PAI_DATA_DIR"] == "/data/alice/old_$PAI_JOB_NAME_X"
    assert request.env["PAI_OUTPUT_DIR"] == "/out/alice/research/$PAI_TASK_INDEX"
    assert request.env["PAI_CODE_DIR"] == "https://example.org/src/train.py"
    ((code),) = request.role("main").materials
    assert (code.name, code.kind, code.uris, code.as_directory) == (
        "code",
        Fetch.DOWNLOAD,
        ["https://example.org/src/train.py"],
        True,
    )


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("s3://b/code", "s3://b/code cannot be copied into the container: there is no s3"),
        ("code/here", "'code/here' is neither a URL nor an absolute path"),
    ],
)
def test_a_v1_codedir_that_cannot_be_copied_is_not_runnable(code: str, message: str) -> None:
    result = resolve_job(V1_DIRS.format(code=code))
    assert result.spec is not None, result.errors
    with pytest.raises(NotRunnable) as err:
        launch_request(result.spec, job_id="j", user="alice")
    assert err.value.path == "codeDir"
    assert err.value.message.startswith(message)


def test_a_marketplace_image_reference_is_not_runnable_without_the_service() -> None:
    text = JOB.replace(
        "dockerImage: img\n    data", "dockerImage: marketplace://name/img\n    data"
    )
    result = resolve_job(text)
    assert result.spec is not None, result.errors
    with pytest.raises(NotRunnable) as caught:
        launch_request(result.spec, job_id="j1")
    assert caught.value.path == "taskRoles.trainer.dockerImage"
    assert "marketplace" in caught.value.message


def test_data_and_scripts_listed_among_a_roles_prerequisites_are_fetched_too() -> None:
    """Seed 004's form: the dataset is named in the role's `prerequisites`, not in `data`.
    It is downloaded like `data`; a plugin prerequisite (setup, notify) is not fetched."""
    text = JOB.replace(
        "  evaluator:\n    dockerImage: img\n",
        "  evaluator:\n    dockerImage: img\n    prerequisites: [mnist, code, mnist]\n",
    )
    evaluator = _request(text).role("evaluator")
    assert [(m.name, m.kind, m.uris) for m in evaluator.materials] == [
        ("mnist", Fetch.DOWNLOAD, ["http://example.test/mnist.zip"]),
        ("code", Fetch.CLONE, ["https://example.test/code.git@abc123"]),
    ]
    assert [m.name for m in _request(text).role("trainer").materials] == ["mnist", "code", "models"]


def test_a_v1_auth_file_is_the_image_auth_of_every_role() -> None:
    text = V1_DIRS.format(code="/src").replace(
        '"virtualCluster"',
        '"authFile": "$PAI_DEFAULT_FS_URI/auth/$PAI_USER_NAME", "virtualCluster"',
    )
    result = resolve_job(text)
    assert result.spec is not None, result.errors
    request = launch_request(result.spec, job_id="j", user="alice")
    assert request.role("main").image_auth == ImageAuth(file="/auth/alice")
    hdfs = resolve_job(text.replace("$PAI_DEFAULT_FS_URI", "hdfs://nn"))
    assert hdfs.spec is not None
    with pytest.raises(NotRunnable) as err:
        launch_request(hdfs.spec, job_id="j", user="alice")
    assert err.value.path == "authFile"
    assert err.value.message.startswith("hdfs://nn/auth/alice cannot be read here")


class _Simulating:
    """A backend that simulates the HDFS, as the Docker simulator does."""

    default_fs_uri = "hdfs://paigraph-dfs:9000"

    def launch_notes(self, request: LaunchRequest) -> list[LaunchNote]:
        return [
            LaunchNote(material=m.name, message="simulated") for m in request.roles[0].materials
        ]


def test_what_a_backend_simulates_is_warned_about_at_the_field_the_user_wrote() -> None:
    written = V1_DIRS.format(code="$PAI_DEFAULT_FS_URI/code").splitlines(keepends=True)
    text = "".join(line for line in written if '"outputDir"' not in line)
    result = resolve_job(text)
    assert result.spec is not None, result.errors
    backend = _Simulating()
    request = launch_request(result.spec, job_id="j", default_fs=backend.default_fs_uri)
    warnings = simulation_warnings(result.spec, request, backend)
    # outputDir was not written: its default is not warned about
    assert [(w.path, w.code) for w in warnings] == [
        ("codeDir", "simulated"),
        ("dataDir", "simulated"),
    ]
    assert simulation_warnings(result.spec, request, object()) == []  # a backend that says nothing

    draft = resolve_job(DRAFT_CIFAR)
    assert draft.spec is not None, draft.errors
    request = launch_request(draft.spec, job_id="j", default_fs=backend.default_fs_uri)
    warned = simulation_warnings(draft.spec, request, backend)
    assert [w.path for w in warned] == ["prerequisites[1].uri", "prerequisites[2].uri"]


DRAFT_CIFAR = """\
protocol_version: v2
name: cifar
type: job
tasks:
  - role: worker
    data: cifar10
    storage: models
    dockerimage: tf
    resource:
      resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}
    command: [train]
prerequisites:
  - {protocol_version: v2, name: tf, type: dockerimage, uri: openpai/tf}
  - {protocol_version: v2, name: cifar10, type: data, uri: [$PAI_DEFAULT_FS_URI/cifar]}
  - {protocol_version: v2, name: models, type: storage, uri: [hdfs://nn:9000/models]}
"""
