"""Validation rules: OpenPAI's own (with its messages) and paigraph's stricter ones."""

from __future__ import annotations

from typing import Any

import pytest

from server.protocol import Issue, ParseResult, parse_job
from tests.jobs import as_json, as_yaml, draft, v1, v2


def errors(result: ParseResult) -> dict[str, tuple[str, str]]:
    """path -> (code, message) of every error."""
    return {e.path: (e.code, e.message) for e in result.errors}


def check_v2(doc: dict[str, Any]) -> ParseResult:
    return parse_job(as_yaml(doc))


def test_the_example_jobs_are_valid() -> None:
    for text in (as_yaml(v2()), as_yaml(draft()), as_json(v1())):
        result = parse_job(text)
        assert result.ok, result.errors


# ------------------------------------------------------------------------ OpenPAI's messages


def test_duplicate_prerequisites_of_one_type() -> None:
    doc = v2()
    doc["prerequisites"].append({"name": "cifar", "type": "data", "uri": ["x"]})
    assert errors(check_v2(doc))["prerequisites[3].name"] == (
        "duplicate",
        "Duplicate data prerequisites cifar.",
    )


def test_the_same_name_under_two_types_is_allowed() -> None:
    doc = v2()
    doc["prerequisites"].append({"name": "cifar", "type": "script", "uri": "x"})
    assert check_v2(doc).ok


def test_missing_prerequisites_use_openpai_message() -> None:
    doc = v2()
    doc["taskRoles"]["worker"]["data"] = "imagenet"
    doc["taskRoles"]["worker"]["prerequisites"] = ["nope"]
    found = errors(check_v2(doc))
    assert found["taskRoles.worker.data"][1] == "Prerequisite imagenet does not exist."
    assert found["taskRoles.worker.prerequisites[0]"][1] == "Prerequisite nope does not exist."


def test_docker_image_must_name_a_dockerimage() -> None:
    doc = v2()
    doc["taskRoles"]["ps"]["dockerImage"] = "cifar"
    _, message = errors(check_v2(doc))["taskRoles.ps.dockerImage"]
    assert message.startswith("Prerequisite cifar does not exist.")
    assert "data prerequisite, not a dockerimage" in message


def test_deployments() -> None:
    doc = v2(
        deployments=[
            {"name": "d", "taskRoles": {"ps": {"preCommands": ["echo pre"]}}},
            {"name": "d", "taskRoles": {"ps": {"postCommands": ["echo post"]}}},
        ],
        defaults={"deployment": "other"},
    )
    found = errors(check_v2(doc))
    assert found["deployments[1].name"][1] == "Duplicate deployments d."
    assert found["defaults.deployment"][1] == "Default deployment other does not exist."


def test_default_deployment_wraps_commands() -> None:
    doc = v2(
        deployments=[{"name": "d", "taskRoles": {"ps": {"preCommands": ["echo pre"]}}}],
        defaults={"deployment": "d", "virtualCluster": "vc1"},
    )
    spec = check_v2(doc).spec
    assert spec is not None and spec.virtual_cluster == "vc1"
    assert spec.commands_for(spec.task_roles[0])[0] == "echo pre"


def test_v1_min_task_count_message() -> None:
    doc = v1()
    doc["taskRoles"][1]["minSucceededTaskCount"] = 3
    found = errors(parse_job(as_json(doc)))
    assert found["taskRoles[1].minSucceededTaskCount"][1] == (
        "minFailedTaskCount or minSucceededTaskCount should not be greater than tasks number."
    )


def test_v1_unknown_keys_in_joi_style() -> None:
    doc = v1()
    doc["taskRoles"][0]["env"] = {"A": "1"}
    assert errors(parse_job(as_json(doc)))["taskRoles[0].env"][1].startswith('"env" is not allowed')


def test_unknown_top_level_keys_get_a_hint() -> None:
    doc = v2(virtualCluster="vc1", retryCount=2)
    found = errors(check_v2(doc))
    assert "defaults.virtualCluster" in found["virtualCluster"][1]
    assert "jobRetryCount" in found["retryCount"][1]


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"protocolVersion": 3}, "protocolVersion"),
        ({"name": "has space"}, "name"),
        ({"name": "x" * 256}, "name"),
        ({"type": "dockerimage"}, "type"),
        ({"jobRetryCount": -1}, "jobRetryCount"),
        ({"prerequisites": []}, "prerequisites"),
        ({"taskRoles": {}}, "taskRoles"),
        ({"parameters": ["a"]}, "parameters"),
    ],
)
def test_top_level_rules(change: dict[str, Any], path: str) -> None:
    assert path in errors(check_v2(v2(**change)))


def test_required_fields_are_reported_together() -> None:
    doc = v2()
    del doc["taskRoles"]["ps"]["commands"]
    del doc["taskRoles"]["ps"]["resourcePerInstance"]["gpu"]
    del doc["name"]
    found = errors(check_v2(doc))
    assert {"taskRoles.ps.commands", "taskRoles.ps.resourcePerInstance.gpu", "name"} <= set(found)
    assert all(code == "required" for code, _ in found.values())


def test_dockerimage_prerequisites_take_no_plugin_keys() -> None:
    doc = v2()
    doc["prerequisites"][0]["callbacks"] = [{"event": "taskStarts", "commands": ["x"]}]
    code, message = errors(check_v2(doc))["prerequisites[0].callbacks"]
    assert code == "unknown-field" and "dockerimage" in message


def test_data_uri_must_be_a_list_in_v2() -> None:
    doc = v2()
    doc["prerequisites"][1]["uri"] = "https://example.org/cifar.tgz"
    assert errors(check_v2(doc))["prerequisites[1].uri"][0] == "type"


# ------------------------------------------------------------------ stricter than OpenPAI


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("cpu", 0, "range"),
        ("cpu", -4, "range"),
        ("memoryMB", 99, "range"),
        ("gpu", -1, "range"),
        ("cpu", 1.5, "type"),
        ("cpu", "2", "type"),
        ("cpu", True, "type"),
    ],
)
def test_resources(field: str, value: Any, code: str) -> None:
    doc = v2()
    doc["taskRoles"]["worker"]["resourcePerInstance"][field] = value
    found = errors(check_v2(doc))
    assert found[f"taskRoles.worker.resourcePerInstance.{field}"][0] == code


def test_shm_may_not_exceed_memory() -> None:
    doc = v2()
    doc["taskRoles"]["ps"]["extraContainerOptions"] = {"shmMB": 8192}
    code, message = errors(check_v2(doc))["taskRoles.ps.extraContainerOptions.shmMB"]
    assert code == "shm-exceeds-memory" and "4096" in message


def test_default_shm_never_exceeds_memory() -> None:
    doc = v2()
    doc["taskRoles"]["ps"]["resourcePerInstance"]["memoryMB"] = 256
    spec = check_v2(doc).spec
    assert spec is not None
    assert spec.role("ps").resources.shm_mb == 256  # type: ignore[union-attr]
    assert spec.role("worker").resources.shm_mb == 512  # type: ignore[union-attr]


@pytest.mark.parametrize("value", [0, 3, -2])
def test_completion_counts_are_minus_one_or_within_instances(value: int) -> None:
    doc = v2()
    doc["taskRoles"]["worker"]["completion"] = {"minFailedInstances": value}
    code, message = errors(check_v2(doc))["taskRoles.worker.completion.minFailedInstances"]
    assert code == "completion-range" and "2 instance(s)" in message


def test_completion_null_means_the_default() -> None:
    doc = v2()
    doc["taskRoles"]["worker"]["completion"] = {
        "minFailedInstances": None,
        "minSucceededInstances": None,
    }
    role = check_v2(doc).spec.role("worker")  # type: ignore[union-attr]
    assert (role.completion.min_failed, role.completion.min_succeeded) == (1, 2)  # type: ignore[union-attr]


@pytest.mark.parametrize("count", [0, -1, 101])
def test_port_counts(count: int) -> None:
    doc = v2()
    doc["taskRoles"]["worker"]["resourcePerInstance"]["ports"] = {"grpc": count}
    assert errors(check_v2(doc))["taskRoles.worker.resourcePerInstance.ports.grpc"][0] == "range"


def test_empty_ports_mapping() -> None:
    doc = v2()
    doc["taskRoles"]["worker"]["resourcePerInstance"]["ports"] = {}
    assert "taskRoles.worker.resourcePerInstance.ports" in errors(check_v2(doc))


def test_role_names_must_fit_environment_variables() -> None:
    doc = v1()
    doc["taskRoles"][0]["name"] = "ps.server"
    code, message = errors(parse_job(as_json(doc)))["taskRoles[0].name"]
    assert code == "env-name" and "PAI_TASK_ROLE_" in message


def test_v2_role_name_pattern() -> None:
    doc = v2()
    doc["taskRoles"]["1st"] = doc["taskRoles"].pop("ps")
    assert errors(check_v2(doc))["taskRoles.1st"][0] == "pattern"


def test_draft_paths_point_into_the_tasks_list() -> None:
    doc = draft()
    doc["tasks"][1]["resource"]["portList"] = [
        {"label": "a.b", "beginAt": 70000, "portNumber": 1},
        {"label": "a.b", "beginAt": 0, "portNumber": 1},
        {"label": "ok", "beginAt": 0, "portNumber": 0},
    ]
    found = errors(parse_job(as_yaml(doc)))
    assert found["tasks[1].resource.portList[0].label"][0] == "env-name"
    assert found["tasks[1].resource.portList[0].beginAt"][0] == "port-range"
    assert found["tasks[1].resource.portList[1].label"][0] == "duplicate"
    assert found["tasks[1].resource.portList[2].portNumber"][0] == "range"


def test_duplicate_role_names_in_lists() -> None:
    doc = draft()
    doc["tasks"][1]["role"] = "worker"
    assert errors(parse_job(as_yaml(doc)))["tasks[1].role"][0] == "duplicate"
    doc1 = v1()
    doc1["taskRoles"][1]["name"] = "ps_server"
    assert errors(parse_job(as_json(doc1)))["taskRoles[1].name"][0] == "duplicate"


def test_v1_begin_at_must_leave_room() -> None:
    doc = v1()
    doc["taskRoles"][0]["portList"][0]["beginAt"] = 65535
    assert errors(parse_job(as_json(doc)))["taskRoles[0].portList[0].beginAt"][0] == "port-range"


@pytest.mark.parametrize("retry", [-3, 101])
def test_retry_counts_are_sane(retry: int) -> None:
    doc = draft()
    doc["retryCount"] = retry
    assert errors(parse_job(as_yaml(doc)))["retryCount"][0] == "range"
    doc1 = v1()
    doc1["retryCount"] = retry
    assert errors(parse_job(as_json(doc1)))["retryCount"][0] == "range"


def test_task_retry_count_range() -> None:
    doc = v2()
    doc["taskRoles"]["ps"]["taskRetryCount"] = -1
    assert errors(check_v2(doc))["taskRoles.ps.taskRetryCount"][0] == "range"


def test_every_error_is_reported_at_once() -> None:
    doc = v2()
    worker = doc["taskRoles"]["worker"]
    worker["resourcePerInstance"].update(cpu=0, memoryMB=10, gpu=-1)
    worker["instances"] = 0
    worker["dockerImage"] = "missing"
    doc["taskRoles"]["ps"]["commands"] = []
    found = errors(check_v2(doc))
    assert len(found) >= 6
    assert all(path.startswith("taskRoles.") for path in found)


def test_error_paths_split_into_segments() -> None:
    doc = draft()
    doc["tasks"][1]["resource"]["portList"] = [{"label": "x y", "portNumber": 1}]
    (issue,) = [e for e in parse_job(as_yaml(doc)).errors if e.code == "pattern"]
    assert issue.path_parts() == ["tasks", "1", "resource", "portList", "0", "label"]


def test_an_issue_seen_from_a_larger_input_keeps_its_segments() -> None:
    inner = Issue.at(["parameters", "lr.max"], "unknown-parameter", "no such parameter")
    outer = inner.within("config")
    assert outer.path_parts() == ["config", "parameters", "lr.max"]
    assert outer.path == "config.parameters.lr.max"
    assert Issue("taskRoles.worker", "x", "y").within("content").path_parts() == [
        "content",
        "taskRoles",
        "worker",
    ]


# ------------------------------------------------------------------------ size limits


def aliased_roles(count: int, instances: int = 1) -> str:
    """A v2 job of `count` roles that are one role repeated through a YAML alias: a few bytes
    of document per role."""
    head = f"""protocolVersion: 2
name: many
type: job
prerequisites:
  - {{name: img, type: dockerimage, uri: busybox}}
taskRoles:
  r0: &role
    instances: {instances}
    dockerImage: img
    resourcePerInstance: {{cpu: 1, memoryMB: 128, gpu: 0}}
    commands: ['echo <% $parameters.x %>']
"""
    return head + "".join(f"  r{i}: *role\n" for i in range(1, count))


def test_a_job_has_at_most_100_task_roles() -> None:
    assert parse_job(aliased_roles(100)).ok
    assert errors(parse_job(aliased_roles(101))) == {
        "taskRoles": ("max-items", "a job may have at most 100 task roles, got 101")
    }


def test_a_role_repeated_9000_times_through_aliases_is_refused_by_the_limit() -> None:
    text = aliased_roles(9000)
    assert len(text) > 100_000
    result = parse_job(text)
    assert result.spec is None
    assert errors(result) == {
        "taskRoles": ("max-items", "a job may have at most 100 task roles, got 9000")
    }


def test_the_role_limit_holds_in_every_dialect() -> None:
    doc1 = v1()
    doc1["taskRoles"] = [dict(doc1["taskRoles"][1], name=f"w{i}") for i in range(101)]
    assert errors(parse_job(as_json(doc1)))["taskRoles"][0] == "max-items"
    doc = draft()
    doc["tasks"] = [dict(doc["tasks"][1], role=f"t{i}") for i in range(101)]
    assert errors(parse_job(as_yaml(doc)))["tasks"] == (
        "max-items",
        "a job may have at most 100 task roles, got 101",
    )


def test_instances_per_role_and_per_job_are_limited() -> None:
    doc = v2()
    doc["taskRoles"]["worker"]["instances"] = 1001
    assert errors(check_v2(doc))["taskRoles.worker.instances"] == (
        "range",
        "instances must be at most 1000, got 1001",
    )
    assert parse_job(aliased_roles(5, instances=1000)).ok
    assert errors(parse_job(aliased_roles(6, instances=1000))) == {
        "taskRoles": (
            "range",
            "the instances of all task roles together must be at most 5000, got 6000",
        )
    }


# ------------------------------------------------------------------------ layout mistakes

DEDENTED = """\
protocolVersion: 2
name: dedent
type: job
prerequisites:
  - {name: image, type: dockerimage, uri: "ubuntu:22.04"}
taskRoles:
  worker:
    instances: 2
    dockerImage: image
  resourcePerInstance: {cpu: 1, memoryMB: 512, gpu: 0}
  commands:
    - echo hi
"""


def test_fields_dedented_out_of_a_role_give_one_error_naming_the_role() -> None:
    result = parse_job(DEDENTED)
    assert errors(result) == {
        "taskRoles": (
            "misplaced-field",
            "`resourcePerInstance` and `commands` are at the level of task roles: indent them "
            "under `worker`?",
        )
    }


def test_a_role_named_like_a_field_is_still_a_role() -> None:
    doc = v2()
    doc["taskRoles"]["commands"] = doc["taskRoles"].pop(next(iter(doc["taskRoles"])))
    result = check_v2(doc)
    assert result.ok, result.errors


def test_a_tab_in_the_indentation_names_its_line() -> None:
    text = DEDENTED.replace("    dockerImage: image", "\tdockerImage: image")
    [error] = parse_job(text).errors
    assert error.code == "yaml-syntax"
    assert error.message.startswith("line 9 uses a tab; YAML indents with spaces"), error


@pytest.mark.parametrize(
    ("where", "key", "hint"),
    [
        ("role", "instance", "did you mean `instances`?"),
        ("role", "Commands", "did you mean `commands`?"),
        ("role", "cpu", "`cpu` belongs under `resourcePerInstance`: indent it there?"),
        ("top", "commands", "`commands` belongs to a task role: indent it under one"),
        ("top", "paramters", "did you mean `parameters`?"),
    ],
)
def test_an_unknown_field_suggests_what_was_meant(where: str, key: str, hint: str) -> None:
    doc = v2()
    role = next(iter(doc["taskRoles"]))
    (doc["taskRoles"][role] if where == "role" else doc)[key] = 2
    path = f"taskRoles.{role}.{key}" if where == "role" else key
    code, message = errors(check_v2(doc))[path]
    assert code == "unknown-field"
    assert message.startswith(f"unknown field `{key}`; {hint}"), message
