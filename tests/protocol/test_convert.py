"""Converting a job to protocol v2 for editing (server/protocol/convert.py): the seeds' own
jobs in all three dialects convert whatever the cluster could run, the converted job runs the
same commands as the original, and its parameters keep their effect."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml

from server.protocol import resolve_job
from server.protocol.convert import convert_to_v2, without_json_comments
from tests.corpus import seed_job


def commands(text: str, parameters: dict[str, object] | None = None) -> dict[str, list[str]]:
    """Each role's commands as the job would run them."""
    resolved = resolve_job(text, parameters)
    assert resolved.spec is not None, resolved.issues
    return {role.name: role.commands for role in resolved.spec.task_roles}


@pytest.mark.shared("seeds")
def test_the_seed_draft_job_keeps_its_parameters_as_v2_templates() -> None:
    draft = seed_job("000", "tensorflow_cifar10")
    converted = convert_to_v2(draft)
    assert converted.errors == [] and converted.notes == []
    assert converted.config is not None
    doc = yaml.safe_load(converted.config)
    assert doc["protocolVersion"] == 2
    worker = doc["taskRoles"]["worker"]
    # the asks this cluster may refuse are carried over as written, to be fixed in the forms
    assert worker["resourcePerInstance"]["gpu"] == 4
    last = worker["commands"][-1]
    assert "--model=<% $parameters.model %>" in last
    assert "--batch_size=<% $parameters.batchsize %>" in last
    assert "--data_name=<% $data.name %>" in last and "<% $output.name %>/cifar10_model" in last
    assert "$$" not in converted.config
    # the converted job runs what the original runs ...
    assert commands(converted.config) == commands(draft)
    # ... and a parameter still changes it
    changed = commands(converted.config, {"model": "resnet56"})["worker"][-1]
    assert "--model=resnet56" in changed and "--batch_size=32" in changed


@pytest.mark.shared("seeds")
@pytest.mark.parametrize("seed", ["001", "002"])
def test_the_seed_serving_job_converts(seed: str) -> None:
    draft = seed_job(seed, "tensorflow_serving_mnist")
    converted = convert_to_v2(draft)
    assert converted.errors == [] and converted.config is not None
    doc = yaml.safe_load(converted.config)
    assert doc["taskRoles"]["worker"]["resourcePerInstance"]["gpu"] == 1
    assert commands(converted.config) == commands(draft)


@pytest.mark.shared("seeds")
def test_the_seed_v1_json_converts_without_its_comments() -> None:
    written = seed_job("003", "tensorflow-distributed-jobguid", "js")
    assert "//" in written  # the seed writes its example with comments, which JSON has not
    assert resolve_job(written).errors[0].code == "json-comment"
    converted = convert_to_v2(written)
    assert converted.errors == [] and converted.config is not None
    assert [(n.path, n.code) for n in converted.notes] == [("", "converted")]
    doc = yaml.safe_load(converted.config)
    assert doc["defaults"]["virtualCluster"] == "your_virtual_cluster"
    assert doc["taskRoles"]["worker"]["resourcePerInstance"]["gpu"] == 4
    assert commands(converted.config) == commands(without_json_comments(written))


def test_an_instance_count_from_a_parameter_is_written_as_its_value_with_a_note() -> None:
    draft = textwrap.dedent(
        """\
        protocol_version: v2
        name: counted
        type: job
        parameters: {workers: 3, greeting: hi}
        prerequisites:
          - {name: box, type: dockerimage, uri: busybox}
        tasks:
          - role: worker
            parameters: {who: team}
            resource:
              instances: $job.parameters.workers
              resourcePerInstance: {cpu: 1, memoryMB: 128, gpu: 0}
            command:
              - echo $$greeting$$ from $$role$$ of $$who$$ in $job.tasks.worker.dockerimage
        """
    )
    converted = convert_to_v2(draft)
    assert converted.config is not None
    role = yaml.safe_load(converted.config)["taskRoles"]["worker"]
    assert role["instances"] == 3
    assert role["commands"] == ["echo <% $parameters.greeting %> from worker of team in box"]
    notes = {".".join(n.segments): n.message for n in converted.notes}
    assert set(notes) == {"taskRoles.worker.instances", "taskRoles.worker.commands.0"}
    assert "parameter 'workers'" in notes["taskRoles.worker.instances"]
    assert (
        "$$role$$, $$who$$, $job.tasks.worker.dockerimage" in notes["taskRoles.worker.commands.0"]
    )
    assert all(n.severity == "warning" for n in converted.notes)
    assert commands(converted.config) == commands(draft)


def test_a_v2_job_is_given_back_as_written_and_an_unreadable_one_is_not_converted() -> None:
    v2 = "protocolVersion: 2\nname: same  # kept\ntype: job\ntaskRoles: {}\n"
    assert convert_to_v2(v2).config is None  # no task role: the protocol cannot read it
    readable = (
        "protocolVersion: 2\nname: same  # a comment that stays\ntype: job\n"
        "prerequisites: [{name: box, type: dockerimage, uri: busybox}]\n"
        "taskRoles:\n  main: {dockerImage: box, resourcePerInstance: {cpu: 1, memoryMB: 128, "
        'gpu: 0}, commands: ["true"]}\n'
    )
    assert convert_to_v2(readable).config == readable
    broken = "protocol_version: v2\nname: broken\ntype: job\ntasks:\n  - role: a\n"
    converted = convert_to_v2(broken)
    assert converted.config is None
    assert {".".join(e.segments) for e in converted.errors} >= {"tasks.0.command"}


def test_json_comments_go_but_strings_that_look_like_them_stay() -> None:
    text = '{\n  // a comment\n  "uri": "http://host//x", /* two\nlines */ "n": "a\\"//b"\n}'
    stripped = without_json_comments(text)
    assert json.loads(stripped) == {"uri": "http://host//x", "n": 'a"//b'}
    assert stripped.count("\n") == text.count("\n")


def test_a_v1_jobs_locations_convert_to_what_its_commands_were_given() -> None:
    """v1 expanded $PAI_DEFAULT_FS_URI and $PAI_JOB_NAME in dataDir / codeDir and copied
    codeDir to code/: the converted job exports the expanded locations and places its code
    there, so `python code/x.py --data_dir=$PAI_DATA_DIR` reads the same."""
    v1 = {
        "jobName": "located",
        "image": "busybox",
        "dataDir": "$PAI_DEFAULT_FS_URI/data/$PAI_JOB_NAME",
        "codeDir": "hdfs://nn:9000/code's",
        "jobEnvs": {"plain": "$PAI_JOB_NAME"},
        "taskRoles": [
            {"name": "main", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 256,
             "command": "python code/x.py --data_dir=$PAI_DATA_DIR"},
        ],
    }  # fmt: skip
    converted = convert_to_v2(json.dumps(v1))
    assert converted.config is not None
    doc = yaml.safe_load(converted.config)
    assert doc["taskRoles"]["main"]["script"] == "code"
    assert {"name": "code", "type": "script", "uri": "hdfs://nn:9000/code's"} in doc[
        "prerequisites"
    ]
    exports = doc["deployments"][0]["taskRoles"]["main"]["preCommands"]
    # jobEnvs are its parameters: exported through them, as written unless a parameter is set
    assert doc["parameters"] == {"plain": "$PAI_JOB_NAME"}
    assert "export plain='<% $parameters.plain %>'" in exports
    for given, exported in (({}, "$PAI_JOB_NAME"), ({"plain": "other"}, "other")):
        resolved = resolve_job(converted.config, given).spec
        assert resolved is not None
        (deployment,) = resolved.deployments
        assert f"export plain='{exported}'" in deployment.pre_commands["main"]
    assert 'export PAI_DATA_DIR="${PAI_DEFAULT_FS_URI}"\'/data/\'"${PAI_JOB_NAME}"' in exports
    assert "export PAI_CODE_DIR='hdfs://nn:9000/code'\"'\"'s'" in exports
