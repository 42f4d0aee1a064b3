"""Draft and v1 names that protocol v2 does not allow: written under a v2 spelling, read back
as they were."""

from __future__ import annotations

import pytest

from server.protocol import parse_job, to_v2_yaml
from server.protocol.v2_names import is_v2_name, v2_name

DRAFT = """protocol_version: v2
name: {name}
type: job
prerequisites:
  - {{protocol_version: v2, name: img, type: dockerimage, uri: ubuntu}}
  - {{protocol_version: v2, name: mnist.v1, type: data, uri: ["http://example.org/x"]}}
tasks:
  - role: worker
    dockerimage: img
    data: mnist.v1
    resource: {{resourcePerInstance: {{cpu: 1, memoryMB: 1024, gpu: 0}}}}
    command: [echo hi]
"""


@pytest.mark.parametrize("name", ["a.b", "~", "train.v2~final", "é"])
def test_every_name_gets_a_v2_spelling_that_v2_accepts(name: str) -> None:
    spelled = v2_name(name)
    assert is_v2_name(spelled)
    assert v2_name(name) == spelled  # deterministic


def test_valid_v2_names_are_kept_and_others_stay_apart() -> None:
    assert v2_name("resnet-50_b") == "resnet-50_b"
    assert v2_name("a.b") != v2_name("a~b")  # both would be `a-b` without the hash
    assert v2_name("a.b").startswith("a-b-")


def test_a_draft_job_with_dotted_names_writes_v2_that_reads_back_as_the_same_job() -> None:
    first = parse_job(DRAFT.format(name="train.v2"))
    assert first.ok, first.errors
    written = to_v2_yaml(first.spec)
    assert f"name: {v2_name('train.v2')}\n" in written
    again = parse_job(written)
    assert again.ok, again.errors
    assert again.spec.name == "train.v2"
    assert [p.name for p in again.spec.prerequisites] == ["img", "mnist.v1"]
    assert again.spec.task_roles[0].data == "mnist.v1"
    assert to_v2_yaml(again.spec) == written  # and round and round


def test_a_v1_job_name_with_a_dot_round_trips() -> None:
    v1 = '{"jobName": "resnet.50", "image": "ubuntu", "taskRoles": [{"name": "w", "command": "x"}]}'
    first = parse_job(v1)
    again = parse_job(to_v2_yaml(first.spec))
    assert again.ok, again.errors
    assert again.spec.name == "resnet.50"


def test_an_edited_v2_name_is_not_overridden_by_the_recorded_original() -> None:
    written = to_v2_yaml(parse_job(DRAFT.format(name="train.v2")).spec)
    edited = written.replace(f"name: {v2_name('train.v2')}\n", "name: mine\n", 1)
    again = parse_job(edited)
    assert again.ok, again.errors
    assert again.spec.name == "mine"
