"""A registry credential written as itself is lifted into a secret, in every dialect and style a
job or component can be written in: the kept text holds a reference, never the value, the job's
secrets hold the value, and a warning at the credential's path names the secret."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from server.marketplace.items import read_item
from server.marketplace.service import published_config
from server.protocol import parse_document, parse_job
from server.protocol.scrub import scrubbed_document

ROLE = "resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}"

V2_BLOCK = """\
protocolVersion: 2
name: j   # the job
type: job
prerequisites:
  - name: img
    type: dockerimage
    uri: registry.example.org/team/x:1
    auth:
      username: robot-user
      password: 'Pa55-word'  # to be rotated
      registryuri: registry.example.org
taskRoles:
  t:
    dockerImage: img
    commands: [echo hi]
    resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}
"""


def test_a_literal_password_becomes_a_secret_and_the_rest_of_the_text_is_kept() -> None:
    result = parse_job(V2_BLOCK)
    assert result.spec is not None, result.errors
    spec = result.spec
    assert spec.secrets == {"img-username": "robot-user", "img-password": "Pa55-word"}
    auth = spec.prerequisites[0].auth
    assert auth is not None
    assert (auth.username, auth.password) == (
        "<% $secrets.img-username %>",
        "<% $secrets.img-password %>",
    )
    assert "Pa55-word" not in spec.source and "robot-user" not in spec.source
    # only the credential lines changed: comments and layout elsewhere are as written
    assert spec.source.startswith("protocolVersion: 2\nname: j   # the job\n")
    assert '      password: "<% $secrets.img-password %>"\n' in spec.source
    assert spec.source.endswith('secrets: "******"\n')
    assert "Pa55-word" not in spec.model_dump_json()
    warnings = {w.path: w for w in result.warnings}
    assert warnings["prerequisites[0].auth.password"].code == "literal-credential"
    assert "'img-password'" in warnings["prerequisites[0].auth.password"].message
    assert "prerequisites[0].auth.username" in warnings


def test_a_secret_reference_is_left_as_written_and_nothing_is_warned() -> None:
    text = V2_BLOCK.replace("robot-user", "<% $secrets.user %>").replace(
        "'Pa55-word'", "<% $secrets.pw %>"
    )
    text += "secrets: {user: robot-user, pw: Pa55-word}\n"
    result = parse_job(text)
    assert result.spec is not None, result.errors
    assert result.spec.secrets == {"user": "robot-user", "pw": "Pa55-word"}
    assert not [w for w in result.warnings if w.code == "literal-credential"]


def test_a_lifted_secret_never_takes_the_name_of_one_the_job_has() -> None:
    text = V2_BLOCK + "secrets: {img-password: mine}\n"
    result = parse_job(text)
    assert result.spec is not None, result.errors
    assert result.spec.secrets["img-password"] == "mine"
    assert result.spec.secrets["img-password-2"] == "Pa55-word"
    assert result.spec.source.count('secrets: "******"') == 1


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(
            {
                "protocolVersion": 2,
                "name": "j",
                "type": "job",
                "prerequisites": [
                    {
                        "name": "img",
                        "type": "dockerimage",
                        "uri": "busybox",
                        "auth": {"username": "robot-user", "password": "Pa55-word"},
                    }
                ],
                "taskRoles": {
                    "t": {
                        "dockerImage": "img",
                        "commands": ["echo"],
                        "resourcePerInstance": {"cpu": 1, "memoryMB": 256, "gpu": 0},
                    }
                },
            }
        ),
        "protocolVersion: 2\nname: j\ntype: job\nprerequisites: [{name: img, type: dockerimage,"
        " uri: busybox, auth: {username: robot-user, password: Pa55-word}}]\n"
        f"taskRoles: {{t: {{dockerImage: img, commands: [echo], {ROLE}}}}}\n",
        "protocol_version: 2\nname: j\ntype: job\nprerequisites:\n  - protocol_version: 2\n"
        "    name: img\n    type: dockerimage\n    uri: busybox\n    auth:\n"
        "      username: robot-user\n      password: Pa55-word\n"
        "tasks:\n  - role: t\n    dockerimage: img\n    resource:\n      instances: 1\n"
        "      resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}\n    command: [echo]\n",
    ],
    ids=["v2-json", "v2-flow", "draft"],
)
def test_every_style_and_dialect_keeps_no_credential(text: str) -> None:
    result = parse_job(text)
    assert result.spec is not None, result.errors
    assert result.spec.secrets["img-password"] == "Pa55-word"
    assert "Pa55-word" not in result.spec.source and "robot-user" not in result.spec.source
    kept = yaml.safe_load(result.spec.source)  # still a document, with references
    prerequisites = kept["prerequisites"]
    assert prerequisites[0]["auth"]["password"] == "<% $secrets.img-password %>"


def test_a_component_with_credentials_is_published_with_references() -> None:
    component = (
        "name: img\ntype: dockerimage\nuri: busybox\n"
        "auth:\n  username: robot-user\n  password: Pa55-word\n"
    )
    result = parse_document(component)
    assert result.component is not None, result.errors
    assert "Pa55-word" not in result.source
    item = read_item(component)
    assert "Pa55-word" not in item.content and "robot-user" not in item.content
    assert {w.code for w in item.warnings} == {"literal-credential"}
    assert scrubbed_document(component).text == result.source  # the migration writes the same


def test_a_published_job_declares_its_secrets_without_values() -> None:
    stored = parse_job(V2_BLOCK + "secrets: {token: t0ken-value}\n").spec
    assert stored is not None
    item = read_item(published_config(stored.source))
    assert yaml.safe_load(item.content)["secrets"] == {
        "img-username": "",
        "img-password": "",
    }  # the job's own `token` is used nowhere in it, so nothing asks for it
    assert "secrets-not-published" in {w.code for w in item.warnings}
    assert "t0ken-value" not in item.content and "Pa55-word" not in item.content


@settings(max_examples=200, deadline=None)
@given(
    password=st.text(
        st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=30
    ).map(lambda s: "Pw!" + s),
    style=st.sampled_from(["plain", "single", "double", "flow"]),
)
def test_no_written_password_survives_in_the_kept_text(password: str, style: str) -> None:
    value = json.dumps(password) if style in ("double", "flow") else password
    if style == "single":
        value = "'" + password.replace("'", "''") + "'"
    auth = (
        f"    auth: {{password: {value}}}\n"
        if style == "flow"
        else f"    auth:\n      password: {value}\n"
    )
    text = (
        "protocolVersion: 2\nname: j\ntype: job\nprerequisites:\n"
        "  - name: img\n    type: dockerimage\n    uri: busybox\n" + auth + "taskRoles:\n"
        f"  t: {{dockerImage: img, commands: [echo], {ROLE}}}\n"
    )
    try:
        written = yaml.safe_load(text)["prerequisites"][0]["auth"]["password"]
    except yaml.YAMLError:
        return  # not a document this style can write
    if written != password or not password.strip() or "<%" in password or "$$" in password:
        return  # not a value written as itself (a reference or a parameter is rendered later)
    result = parse_job(text)
    if result.spec is None:
        return
    assert result.spec.secrets == {"img-password": password}
    assert password not in result.spec.source
