"""OpenPAI's `ssh` and `tensorboard` runtime plugins: a warning that says what paigraph does
and does not do, the ssh plugin's keys and peers, and the `tensorboard` port on the first task
role. (For real on the simulator: tests/e2e/test_ssh_plugin.py, tests/cli/test_instance_exec.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backends.base import Placement
from backends.runtime_env import runtime_env
from backends.ssh_access import AUTHORIZED_KEYS, CLIENT_CONFIG, JOB_KEY, ssh_files
from server.jobs.launch import NotRunnable, launch_request
from server.protocol import parse_job
from server.protocol.engine import resolve_job
from tests.cli.test_cli import run

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


def test_the_ssh_plugin_warns_that_it_needs_an_sshd_and_points_to_paigraph_shell() -> None:
    result = parse_job(job([{"plugin": "cmd", "parameters": {"callbacks": []}}, SSH]))
    assert result.ok
    (warning,) = result.warnings
    assert warning.path == f"extras.{PLUGINS}[1]"
    assert warning.code == "ssh-plugin-no-sshd"
    assert "paigraph shell JOB ROLE INDEX" in warning.message
    assert "only if the image has an sshd" in warning.message
    assert "<role>-<index>" in warning.message

    # seed 004's form: a prerequisite whose plugin is the runtime plugin
    as_item = {"name": "ssh_item", "type": "script", "plugin": f"{PLUGINS}.ssh", "jobssh": True}
    result = parse_job(job([], [as_item]))
    assert [(w.path, w.code) for w in result.warnings] == [
        ("prerequisites[1]", "ssh-plugin-no-sshd")
    ]


USER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ann"


def test_a_userssh_that_is_not_a_public_key_is_refused_naming_the_field() -> None:
    for userssh, words in [
        ({"type": "custom", "value": "hunter2"}, "'hunter2' is not one"),
        ({"type": "custom", "value": 42}, "value must be an OpenSSH public key line"),
        ("ssh-ed25519", "'ssh-ed25519' is not one"),
        (["ssh-ed25519 AAAA"], "must be a map"),
    ]:
        plugin = {"plugin": "ssh", "parameters": {"userssh": userssh}}
        result = parse_job(job([plugin]))
        assert not result.ok
        (error,) = result.errors
        assert error.path == f"extras.{PLUGINS}[0].parameters.userssh"
        assert error.code == "invalid-userssh" and words in error.message


def test_a_userssh_from_the_jobs_secrets_or_parameters_is_checked_once_filled_in() -> None:
    """OpenPAI's own ssh test job gives the key as `<% $secrets.userssh %>`: accepted as read,
    and the key (or what is wrong with it) is known when the launch is built."""
    plugin = {
        "plugin": "ssh",
        "parameters": {
            "jobssh": True,
            "userssh": {"type": "custom", "value": "<% $secrets.userssh %>"},
        },
    }

    def with_secrets(secrets: dict[str, str] | None, userssh: Any = None) -> Any:
        doc = json.loads(job([plugin] if userssh is None else [userssh]))
        if secrets is not None:
            doc["secrets"] = secrets
        doc["parameters"] = {"key": USER_KEY}
        result = resolve_job(json.dumps(doc))
        assert result.ok, [str(e) for e in result.errors]
        return result.spec

    access = launch_request(with_secrets({"userssh": USER_KEY}), job_id="j").ssh
    assert access is not None and access.authorized_keys == [USER_KEY, access.job_public_key]
    from_parameter = {"plugin": "sshd", "parameters": {"userssh": "<% $parameters.key %>"}}
    access = launch_request(with_secrets(None, from_parameter), job_id="j").ssh
    assert access is not None and access.authorized_keys == [USER_KEY]

    where = f"extras.{PLUGINS}[0].parameters.userssh"
    with pytest.raises(NotRunnable) as bad:
        launch_request(with_secrets({"userssh": "hunter2"}), job_id="j")
    assert bad.value.path == where
    assert bad.value.message == (
        "value must hold OpenSSH public key lines (ssh-ed25519 AAAA... comment); the secret "
        "it refers to holds a line that is not one"
    )  # without showing the secret
    with pytest.raises(NotRunnable) as missing:
        launch_request(with_secrets({}), job_id="j")
    assert missing.value.path == where
    assert "refers to <% $secrets.userssh %>, which the job's secrets do not define" in (
        missing.value.message
    )
    assert "hunter2" not in str(missing.value)


def test_the_ssh_barrier_is_warned_about() -> None:
    plugin = {"plugin": "ssh", "parameters": {"jobssh": True, "sshbarrier": True}}
    result = parse_job(job([plugin]))
    assert result.ok
    assert [(w.path, w.code) for w in result.warnings] == [
        (f"extras.{PLUGINS}[0]", "ssh-plugin-no-sshd"),
        (f"extras.{PLUGINS}[0].parameters.sshbarrier", "ssh-barrier-not-supported"),
    ]
    assert "does not wait" in result.warnings[1].message


def test_the_ssh_plugin_gives_the_launch_the_users_key_and_a_fresh_job_key_pair() -> None:
    plugin = {"plugin": "ssh", "parameters": {"jobssh": True, "userssh": {"value": USER_KEY}}}
    result = parse_job(job([plugin]))
    assert result.ok and result.spec is not None
    first = launch_request(result.spec, job_id="j", attempt=1).ssh
    second = launch_request(result.spec, job_id="j", attempt=2).ssh
    assert first is not None and second is not None
    assert first.authorized_keys == [USER_KEY, first.job_public_key]
    assert first.job_public_key.startswith("ssh-ed25519 ")
    assert first.job_private_key.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert first.job_private_key not in repr(first)
    assert second.job_public_key != first.job_public_key  # one pair per attempt

    # without jobssh, only the user's key; without the plugin, nothing
    userssh_only = {"plugin": "ssh", "parameters": {"userssh": {"value": USER_KEY}}}
    only = launch_request(parse_job(job([userssh_only])).spec, job_id="j").ssh
    assert only is not None and only.authorized_keys == [USER_KEY] and not only.job_private_key
    assert launch_request(parse_job(job([])).spec, job_id="j").ssh is None

    # the older sshd plugin took the key itself; an empty userssh authorises nothing
    sshd = {"plugin": "sshd", "parameters": {"userssh": USER_KEY}}
    assert launch_request(parse_job(job([sshd])).spec, job_id="j").ssh.authorized_keys == [USER_KEY]
    empty = {"plugin": "ssh", "parameters": {"jobssh": False, "userssh": {"type": "", "value": ""}}}
    assert launch_request(parse_job(job([empty])).spec, job_id="j").ssh.authorized_keys == []


def test_the_ssh_files_name_every_peer_at_its_address_and_ssh_port() -> None:
    plugin = {"plugin": "ssh", "parameters": {"jobssh": True, "userssh": {"value": USER_KEY}}}
    request = launch_request(parse_job(job([plugin])).spec, job_id="j")
    placements = {
        (role, index): Placement(
            node="n", host_ip=f"10.0.0.{n}", ports={"ssh": [2000 + n], "http": [3000 + n]}
        )
        for n, (role, index) in enumerate([("trainer", 0), ("trainer", 1), ("evaluator", 0)])
    }
    files = ssh_files(request, runtime_env(request, placements, "trainer", 1))
    assert files[AUTHORIZED_KEYS].splitlines() == request.ssh.authorized_keys
    assert files[JOB_KEY] == request.ssh.job_private_key
    config = files[CLIENT_CONFIG]
    for host, address, port in [
        ("trainer-0", "10.0.0.0", 2000),
        ("trainer-1", "10.0.0.1", 2001),
        ("evaluator-0", "10.0.0.2", 2002),
    ]:
        assert f"Host {host}\n  HostName {address}\n  Port {port}\n" in config
    assert config.count("IdentityFile ~/.ssh/id_paigraph_job") == 3
    assert ssh_files(launch_request(parse_job(job([])).spec, job_id="j"), {}) == {}


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
