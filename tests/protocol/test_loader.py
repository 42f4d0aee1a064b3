"""Hostile and broken input: each gets one clear error, never an exception."""

from __future__ import annotations

import json

import pytest

from server.protocol import parse_document, parse_job
from server.protocol.loader import MAX_DEPTH, LoadError, load_document
from tests.jobs import as_yaml, v2

BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcdefg", "bcdefgh", strict=True)
)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (BOMB, "alias-bomb"),
        ("&a [*a]", "recursive-alias"),
        ("[" * 200_000 + "]" * 200_000, "too-deep"),
        ("".join("  " * i + f"k{i}:\n" for i in range(100)) + "  " * 100 + "v: 1\n", "too-deep"),
        ("- " * 100 + "x\n", "too-deep"),
        (as_yaml(v2()) + "---\nsecrets: {a: 1}\n", "multiple-documents"),
        ("just a string\n", "root-type"),
        ("- a\n- b\n", "root-type"),
        ("42", "root-type"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00", "binary"),
        (b"name: \xff\xfe\n", "not-utf8"),
        ("", "empty-document"),
        ("# nothing here\n\n", "empty-document"),
        ("name: [unclosed\n", "yaml-syntax"),
        ("a:\n\tb: 1\n", "yaml-syntax"),
        ("!!python/object/apply:os.system [ls]\n", "yaml-syntax"),
        ('{"jobName": "x", // comment\n "image": "y"}', "json-comment"),
        ('{"jobName": "x", /* c */ "image": "y"}', "json-comment"),
        ('{"jobName": "x", "taskRoles": [],}', "json-trailing-comma"),
        ('{"jobName": "x" "image": "y"}', "json-syntax"),
    ],
)
def test_hostile_input_gets_one_clear_error(text: str | bytes, code: str) -> None:
    for parse in (parse_document, parse_job):
        result = parse(text)
        assert not result.ok
        assert [e.code for e in result.errors] == [code], result.errors
        assert "Traceback" not in result.errors[0].message


def test_size_limit() -> None:
    big = as_yaml(v2()) + "# " + "x" * (1024 * 1024) + "\n"
    (error,) = parse_job(big).errors
    assert error.code == "too-large" and "1048576" in error.message
    assert parse_job(big, max_bytes=4 * 1024 * 1024).ok


def test_yaml_syntax_errors_say_where() -> None:
    (error,) = parse_job("name: x\ntype: job\ntaskRoles:\n  a: b: c\n").errors
    assert "line 4, column" in error.message


def test_a_json_key_given_twice_is_refused_with_its_line() -> None:
    config = json.loads(json.dumps(v2()))
    text = json.dumps(config, indent=2)
    twice = text.replace('"name": ', '"name": "first",\n  "name": ', 1)
    (error,) = parse_job(twice).errors
    line = twice.splitlines().index('  "name": "first",') + 2
    assert error.code == "json-duplicate-key"
    assert error.message.startswith(f"invalid JSON at line {line}, column 3: duplicate key 'name'")
    # the same key in different objects, and a brace inside a string, are no duplicates
    assert parse_job(json.dumps({**config, "description": 'a "}" {"name": x'})).ok


def test_anchors_within_limits_still_work() -> None:
    text = """
protocolVersion: 2
name: anchors
type: job
prerequisites:
  - {name: img, type: dockerimage, uri: busybox}
taskRoles:
  a: &role
    dockerImage: img
    resourcePerInstance: {cpu: 1, memoryMB: 128, gpu: 0}
    commands: [echo hi]
  b: *role
"""
    result = parse_job(text)
    assert result.ok, result.errors
    assert [r.name for r in result.spec.task_roles] == ["a", "b"]  # type: ignore[union-attr]


def test_bom_and_bytes_are_accepted() -> None:
    assert parse_job(b"\xef\xbb\xbf" + as_yaml(v2()).encode()).ok


@pytest.mark.parametrize("depth", [MAX_DEPTH - 2, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1])
def test_depth_limit_is_the_same_with_and_without_aliases(depth: int) -> None:
    """The alias-free fast path and the full alias-aware walk draw the line at the same depth."""
    nested = "a: " + "[" * (depth - 1) + "1" + "]" * (depth - 1)
    outcomes = []
    for text in (nested, "x: &shared [1]\ny: *shared\n" + nested):
        try:
            load_document(text)
            outcomes.append("ok")
        except LoadError as exc:
            outcomes.append(exc.issue.code)
    assert outcomes[0] == outcomes[1]
    assert outcomes[0] == ("ok" if depth < MAX_DEPTH else "too-deep")


def test_dates_and_non_string_keys_are_normalised_only_when_present() -> None:
    data = load_document("when: 2024-01-02\n2: two\ntrue: yes\nnull: nothing\n").data
    assert data == {"when": "2024-01-02", "2": "two", "true": True, "null": "nothing"}


def test_a_yaml_key_given_twice_is_refused_with_its_line() -> None:
    text = "protocolVersion: 2\nname: first\ntype: job\nname: second\n"
    (error,) = parse_job(text).errors
    assert error.code == "yaml-duplicate-key"
    assert error.message.startswith("invalid YAML at line 4, column 1: duplicate key 'name'")
    nested = "a:\n  b: 1\n  c: {d: 1, d: 2}\n"
    (error,) = parse_job(nested).errors
    assert "line 3" in error.message and "'d'" in error.message


def test_keys_merged_in_may_be_overridden_but_a_number_and_its_text_are_one_key() -> None:
    merged = "base: &b {cpu: 1, gpu: 0}\nrole:\n  <<: *b\n  cpu: 2\n"
    assert load_document(merged).data["role"] == {"cpu": 2, "gpu": 0}
    with pytest.raises(LoadError, match="line 2, column 1: duplicate key '1'"):
        load_document("1: number\n'1': text\n")
