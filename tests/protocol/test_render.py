"""Rendering parameters into commands, secrets masking, and writing back as v2."""

from __future__ import annotations

import pytest
import yaml

from server.protocol import Dialect, mask_secrets, parse_job, resolve_job, to_v2_yaml
from server.protocol.writer import exported_value, v1_code_dir_as_script
from tests.corpus import STRICTER, top_level
from tests.jobs import as_json, as_yaml, draft, v1, v2


def test_v2_references() -> None:
    result = resolve_job(as_yaml(v2()))
    assert result.ok and not result.warnings
    worker = result.spec.role("worker")  # type: ignore[union-attr]
    assert worker is not None
    assert worker.commands == [
        "wget https://example.org/cifar.tgz",
        "git clone https://example.org/bench.git",
        "python train.py --batch 32",
    ]


def test_submission_parameters_override_the_config() -> None:
    result = resolve_job(as_yaml(v2()), {"model": "vgg16", "extra": 1})
    assert result.spec is not None
    assert result.spec.role("ps").commands == ["python ps.py --model vgg16"]  # type: ignore[union-attr]
    assert result.spec.parameters == {"model": "vgg16", "batch": 32, "extra": 1}


def test_draft_references() -> None:
    spec = resolve_job(as_yaml(draft()), {"model": "vgg"}).spec
    assert spec is not None
    assert spec.task_roles[0].commands == [
        "tar xzf cifar10/x.tgz",
        "train --model vgg --out models",
    ]


def test_mustache_variables_in_any_dialect() -> None:
    doc = v2()
    doc["taskRoles"]["ps"]["commands"] = ["echo {{ model }} {{batch}} {{.Status}}"]
    spec = resolve_job(as_yaml(doc)).spec
    assert spec is not None
    assert spec.role("ps").commands == ["echo resnet20 32 {{.Status}}"]  # type: ignore[union-attr]


def test_secrets_are_never_rendered() -> None:
    doc = v2(secrets={"token": "s3cret"})
    doc["taskRoles"]["ps"]["commands"] = ["login <% $secrets.token %>"]
    result = resolve_job(as_yaml(doc))
    assert result.spec is not None and not result.warnings
    assert result.spec.role("ps").commands == ["login <% $secrets.token %>"]  # type: ignore[union-attr]
    written = to_v2_yaml(result.spec)
    assert "s3cret" not in written
    assert "s3cret" not in repr(result.spec)
    assert "s3cret" not in result.spec.model_dump_json()


def test_unresolved_references_are_warnings_left_in_place() -> None:
    doc = v2()
    doc["taskRoles"]["ps"]["commands"] = ["run <% $parameters.nope %> <% $data.uri[0] %> {{ x }}"]
    result = resolve_job(as_yaml(doc))
    assert result.ok
    assert result.spec.role("ps").commands == [  # type: ignore[union-attr]
        "run <% $parameters.nope %> <% $data.uri[0] %> {{ x }}"
    ]
    assert {w.path for w in result.warnings} == {"taskRoles.ps.commands[0]"}
    assert len(result.warnings) == 3
    assert all(w.code == "unresolved-reference" for w in result.warnings)


def test_v1_commands_are_left_alone() -> None:
    doc = v1()
    doc["taskRoles"][0]["command"] = "echo $$x$$ {{ y }}"
    spec = resolve_job(as_json(doc)).spec
    assert spec is not None and spec.task_roles[0].commands == ["echo $$x$$ {{ y }}"]


def test_mask_secrets_replaces_the_whole_block() -> None:
    text = (
        "protocolVersion: 2\nname: j\nsecrets:\n  user: alice\n  token: abc\n"
        "  nested:\n    key: v\n# a comment\ntype: job\n"
    )
    masked = mask_secrets(text)
    assert "abc" not in masked and "alice" not in masked
    assert 'secrets: "******"' in masked
    # a comment after the block may still hold secrets; it goes with the block
    assert masked.endswith('secrets: "******"\ntype: job\n')
    assert mask_secrets("name: j\nsecrets: {a: 1}") == 'name: j\nsecrets: "******"\n'


VALID = [e for e in top_level(valid=True) if e.file not in STRICTER]


@pytest.mark.shared("corpus")
@pytest.mark.parametrize("entry", VALID, ids=[e.file for e in VALID])
def test_written_v2_reads_back_as_the_same_job(entry) -> None:  # type: ignore[no-untyped-def]
    parsed = parse_job(entry.path.read_bytes()).spec
    assert parsed is not None
    written = to_v2_yaml(parsed)
    # the writer names a v1 codeDir `code`, where v1 placed it; nothing else is renamed here
    original = v1_code_dir_as_script(parsed)
    again = parse_job(written)
    assert again.ok, (again.errors, written)
    copy = again.spec
    assert copy is not None and copy.dialect is Dialect.V2
    assert copy.name == original.name
    assert copy.retry_count == original.retry_count
    assert copy.virtual_cluster == original.virtual_cluster
    assert copy.prerequisites == original.prerequisites
    assert copy.parameters == original.parameters
    for before, after in zip(original.task_roles, copy.task_roles, strict=True):
        assert after.model_copy(update={"env": before.env}) == before
        env = {**original.env, **before.env}
        exports = [f"export {k}={exported_value(k, v)}" for k, v in env.items()]
        assert copy.commands_for(after) == exports + original.commands_for(before)


def test_drafts_convert_to_v2() -> None:
    spec = parse_job(as_yaml(draft())).spec
    assert spec is not None
    again = parse_job(to_v2_yaml(spec)).spec
    assert again is not None
    worker = again.role("worker")
    assert worker is not None and worker.output == "models"
    assert again.prerequisite("models") is not None
    grpc = worker.resources.port("grpc")
    assert grpc is not None and grpc.count == 1


@pytest.mark.parametrize(
    "text",
    [
        '{"protocolVersion": 2, "name": "j", "type": "job", "secrets": {"token": "s3cr3t-value"},'
        ' "prerequisites": [{"name": "i", "type": "dockerimage", "uri": "busybox"}],'
        ' "taskRoles": {"t": {"dockerImage": "i", "commands": ["echo"],'
        ' "resourcePerInstance": {"cpu": 1, "memoryMB": 256, "gpu": 0}}}}',
        "protocolVersion: 2\nname: j\ntype: job\nsecrets: {token: s3cr3t-value}\n"
        "prerequisites: [{name: i, type: dockerimage, uri: busybox}]\n"
        "taskRoles: {t: {dockerImage: i, commands: [echo],"
        " resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}}}\n",
    ],
    ids=["json", "flow-yaml"],
)
def test_secrets_are_masked_in_the_kept_text_whatever_its_style(text: str) -> None:
    result = parse_job(text)
    assert result.spec is not None, result.errors
    assert "s3cr3t-value" not in result.spec.source
    assert result.spec.secrets == {"token": "s3cr3t-value"}
    kept = yaml.safe_load(result.spec.source)  # still the same document, secrets masked
    assert kept["secrets"] == "******"
    assert kept["taskRoles"]["t"]["commands"] == ["echo"]
