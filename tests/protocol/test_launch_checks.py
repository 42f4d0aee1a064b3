"""What the backend could never start is refused when the job is read: NUL bytes anywhere a
command, the environment or the store would get them, and image names Docker cannot parse."""

from __future__ import annotations

import json
from typing import Any

import pytest

from server.protocol import parse_document, parse_job, resolve_job
from server.protocol.launch_checks import launch_issues
from tests.jobs import as_json, v1, v2


def job(commands: list[str], *, image: str = "paigraph/busybox:test", **top: Any) -> str:
    return json.dumps(
        {
            "protocolVersion": 2,
            "name": "checked",
            "type": "job",
            "prerequisites": [{"name": "img", "type": "dockerimage", "uri": image}],
            "taskRoles": {
                "worker": {
                    "dockerImage": "img",
                    "resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0},
                    "commands": commands,
                }
            },
            **top,
        }
    )


def errors(result: Any) -> dict[str, tuple[str, str]]:
    """path -> (code, message) of every error."""
    return {e.path: (e.code, e.message) for e in result.errors}


def test_a_nul_byte_in_a_command_is_refused_with_its_path() -> None:
    found = errors(resolve_job(job(["echo ok", "echo a\0b"])))
    assert list(found) == ["taskRoles.worker.commands[1]"]
    code, message = found["taskRoles.worker.commands[1]"]
    assert code == "nul-byte" and "NUL byte" in message


def test_a_nul_byte_in_a_parameter_is_refused_before_it_is_rendered() -> None:
    result = resolve_job(job(["echo <% $parameters.x %>"]), {"x": "a\0b"})
    assert result.spec is None
    assert errors(result)["parameters.x"][0] == "nul-byte"


@pytest.mark.parametrize(
    ("top", "path"),
    [
        ({"secrets": {"token": "s\0"}}, "secrets.token"),
        ({"description": "two\0parts"}, "description"),
        ({"extras": {"k\0": 1}}, "extras.k\\0"),
    ],
)
def test_a_nul_byte_anywhere_in_the_document_is_refused(top: dict[str, Any], path: str) -> None:
    assert errors(parse_job(job(["echo"], **top))).get(path, ("",))[0] == "nul-byte"


def test_a_nul_byte_in_a_v1_job_env_is_refused() -> None:
    doc = v1()
    doc["jobEnvs"] = {"MODE": "fast\0"}
    assert errors(parse_job(as_json(doc)))["jobEnvs.MODE"][0] == "nul-byte"


def test_a_command_that_gets_a_nul_byte_only_when_rendered_is_refused() -> None:
    spec = resolve_job(job(["echo ok"])).spec
    assert spec is not None
    role = spec.task_roles[0].model_copy(update={"commands": ["echo ok", "run \0"]})
    issues = launch_issues(spec.model_copy(update={"task_roles": [role]}))
    assert [(i.path, i.code) for i in issues] == [("taskRoles.worker.commands[1]", "nul-byte")]
    assert "rendered" in issues[0].message


@pytest.mark.parametrize(
    ("image", "words"),
    [
        ("busybox latest", "whitespace"),
        (" busybox", "whitespace"),
        ("Ubuntu:18.04", "lowercase"),
        ("team/My-Image", "lowercase"),
        ("busybox:", "tag"),
        ("busybox:-x", "tag"),
        ("busybox@sha256:abc", "digest"),
        ("a//b", "repository path"),
        ("bad_registry.example:5000/x", "registry"),
        ("x" * 256, "255"),
    ],
)
def test_an_image_docker_cannot_parse_is_refused_with_its_path(image: str, words: str) -> None:
    found = errors(parse_job(job(["echo"], image=image)))
    code, message = found["prerequisites[0].uri"]
    assert code == "image-reference" and words in message


@pytest.mark.parametrize(
    "image",
    [
        "busybox",
        "paigraph/busybox:test",
        "openpai/standard:python_3.6-pytorch_1.2.0-gpu",
        "localhost:5000/team/image:1.0",
        "registry.example.org/a__b/c-d.e:v1",
        "[::1]:5000/image",
        "busybox@sha256:" + "ab" * 32,
        "busybox:1.36@sha256:" + "ab" * 32,
    ],
)
def test_an_image_docker_accepts_is_accepted(image: str) -> None:
    assert resolve_job(job(["echo"], image=image)).ok


def test_a_v1_image_is_checked_too() -> None:
    doc = v1()
    doc["image"] = "busybox latest"
    assert errors(parse_job(as_json(doc)))["image"][0] == "image-reference"


def test_an_image_template_is_judged_once_it_is_filled_in() -> None:
    component = "protocolVersion: 2\nname: img\ntype: dockerimage\nuri: '{{ image }}'\n"
    assert parse_document(component).ok  # a marketplace component still to be filled in
    spec = resolve_job(as_json(v2())).spec
    assert spec is not None
    unfilled = [p.model_copy(update={"uri": ["{{ image }}"]}) for p in spec.prerequisites]
    issues = launch_issues(spec.model_copy(update={"prerequisites": unfilled}))
    found = {(i.path, i.code) for i in issues}
    assert ("taskRoles.worker.dockerImage", "image-reference") in found
