"""OpenPAI's `ssh` and `tensorboard` runtime plugins: a warning that says what paigraph does
instead, and the `tensorboard` port on the first task role. (Published for real on the
simulator: tests/test_instance_exec.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from server.jobs.launch import launch_request
from server.protocol import parse_job
from tests.test_cli import run

PLUGINS = "com.microsoft.pai.runtimeplugin"


def job(plugins: list[dict[str, Any]], prerequisites: list[dict[str, Any]] = ()) -> str:
    role = {
        "instances": 2,
        "dockerImage": "img",
        "resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 0},
        "commands": ["python train.py"],
    }
    return json.dumps(
        {
            "protocolVersion": 2,
            "name": "plugged",
            "type": "job",
            "prerequisites": [
                {"name": "img", "type": "dockerimage", "uri": "paigraph/busybox:test"},
                *prerequisites,
            ],
            "taskRoles": {"trainer": role, "evaluator": {**role, "instances": 1}},
            "extras": {PLUGINS: plugins},
        }
    )


TENSORBOARD = {"plugin": "tensorboard", "parameters": {"port": 11449, "logdir": {"a": "/logs"}}}
SSH = {"plugin": "ssh", "parameters": {"jobssh": True, "userssh": {}}}


def test_the_ssh_plugin_warns_and_points_to_paigraph_shell() -> None:
    result = parse_job(job([{"plugin": "cmd", "parameters": {"callbacks": []}}, SSH]))
    assert result.ok
    (warning,) = result.warnings
    assert warning.path == f"extras.{PLUGINS}[1]"
    assert warning.code == "ssh-plugin-no-sshd"
    assert "paigraph shell JOB ROLE INDEX" in warning.message
    assert "<role>-<index>" in warning.message

    # seed 004's form: a prerequisite whose plugin is the runtime plugin
    as_item = {"name": "ssh_item", "type": "script", "plugin": f"{PLUGINS}.ssh", "jobssh": True}
    result = parse_job(job([], [as_item]))
    assert [(w.path, w.code) for w in result.warnings] == [
        ("prerequisites[1]", "ssh-plugin-no-sshd")
    ]


def test_the_tensorboard_plugin_gets_a_port_on_the_first_role_and_a_warning() -> None:
    result = parse_job(job([TENSORBOARD]))
    assert result.ok and result.spec is not None
    (warning,) = result.warnings
    assert (warning.path, warning.code) == (f"extras.{PLUGINS}[0]", "tensorboard-not-started")
    assert "'trainer'" in warning.message and "instead of port 11449" in warning.message
    assert "$PAI_CONTAINER_HOST_tensorboard_PORT_LIST" in warning.message
    request = launch_request(result.spec, job_id="j")
    labels = {r.name: [p.label for p in r.resources.ports] for r in request.roles}
    assert labels == {"trainer": ["ssh", "http", "tensorboard"], "evaluator": ["ssh", "http"]}

    # without the plugin, no such port
    plain = parse_job(job([]))
    assert plain.warnings == [] and plain.spec is not None
    assert plain.spec.task_roles[0].resources.port("tensorboard") is None


def test_validate_shows_the_warnings(tmp_path: Path) -> None:
    path = tmp_path / "plugged.json"
    path.write_text(job([SSH, TENSORBOARD]))
    code, out, err = run("validate", path)
    text = " ".join((out + err).split())
    assert code == 0, text
    assert "ssh-plugin-no-sshd" in text or "paigraph shell" in text
    assert "tensorboard" in text
