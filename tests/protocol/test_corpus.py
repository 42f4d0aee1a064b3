"""Compatibility with real job configs: ../shared/corpus and the verdicts in its INDEX.md."""

from __future__ import annotations

import re

import pytest

from server.protocol import Kind, parse_document, parse_job
from tests.corpus import CORPUS, STRICTER, Entry, files_in, index, top_level

pytestmark = pytest.mark.shared("corpus")

# Files of drafts/ and what paigraph must say about each. "job" and "component" are accepted;
# anything else is the start of the error code expected for an incomplete or broken draft.
DRAFTS: dict[str, str] = {
    "pai__docs__pai-protocal.yaml": "yaml-syntax",
    "pai__docs__pai-protocol.yaml": "yaml-syntax",
    "pai__marketplace__dockerimage__caffe2.yaml": "component",
    "pai__marketplace__dockerimage__cntk.yaml": "component",
    "pai__marketplace__dockerimage__keras_tf.yaml": "component",
    "pai__marketplace__dockerimage__mxnet.yaml": "component",
    "pai__marketplace__dockerimage__tf_serving_example.yaml": "component",
    "pai__marketplace__job__caffe2_resnet50.yaml": "job",
    "pai__marketplace__job__caffe_mnist.yaml": "job",
    "pai__marketplace__job__chainer_cifar.yaml": "job",
    "pai__marketplace__job__cntk_g2p.yaml": "job",
    "pai__marketplace__job__keras_tensorflow_mnist.yaml": "job",
    "pai__marketplace__job__mxnet_autoencoder.yaml": "job",
    "pai__marketplace__job__pytorch_mnist.yaml": "job",
    "pai__marketplace__job__pytorch_regression.yaml": "job",
    "pai__marketplace__job__tensorflow_mnist_distributed.yaml": "job",
    "pai__marketplace__script__pytorch_examples.yaml": "component",
    # the `job:` variant with no tasks: a description only, not a runnable job
    "pai__rest-server__marketplace__Jeff-GoogleNet.yaml": "required",
    "pai__rest-server__marketplace__alice-alexnet.yaml": "required",
    "pai__rest-server__marketplace__bob-coco.yaml": "required",
    "pai__rest-server__marketplace__bob-face-dataset-FaceNet.yaml": "required",
    "pai__rest-server__marketplace__jane-cat-dataset.yaml": "required",
    # tasks that run in a docker image the file never defines
    "pai__rest-server__marketplace__alice-dog-face.yaml": "unknown-prerequisite",
    "pai__rest-server__marketplace__alice-face1.yaml": "unknown-prerequisite",
    "pai__rest-server__marketplace__alice-pig-face.yaml": "unknown-prerequisite",
    "pai__rest-server__marketplace__bob-classification.yaml": "unknown-prerequisite",
    "pai__rest-server__marketplace__bob-classification3.yaml": "unknown-prerequisite",
    # a prerequisite name with a space cannot be referenced from a task
    "pai__rest-server__marketplace__bob-xgboost.yaml": "pattern",
    "pai__rest-server__marketplace__spacev.yaml": "job",
    # `model: {{model}}`: plain YAML reads a mapping used as a key, but `{{ name }}` is the
    # marketplace's template syntax, taken out before the YAML is read (placeholders.py)
    "pai__rest-server__marketplace__tensorflow_cifar10.yaml": "job",
    "pai__rest-server__marketplace__tensorflow_cifar10_serving.yaml": "job",
    "pai__rest-server__template_example__mnist_caffe.yaml": "job",
}

# For each INVALID verdict of the rest-server, where paigraph reports the problem.
INVALID_TOP_LEVEL: dict[str, tuple[str, str]] = {
    "openpai-runtime__test__git_repo_test_job.yaml": (
        "taskRoles.worker.data",
        "Prerequisite cifar10 does not exist.",
    ),
    "pai__docs__kube-runtime__README.md__block0.json": ("taskRoles[0].env", '"env" is not allowed'),
    "pai__src__kube-runtime__test__docker_image_auth.yaml": ("", "more than one YAML document"),
    "pai__tests__end_to_end__etc__cntk.json": ("taskRoles[0].name", "must match"),
}
REST_SERVER_UNIT_TESTS: dict[str, str] = {
    "invalid3": "taskRoles",
    "invalid4": "name",
    "invalid6": "taskRoles.valid_name.commands",
    "invalid7": "prerequisites[0]",
}


def _ids(entries: list[Entry]) -> list[str]:
    return [e.file for e in entries]


@pytest.mark.parametrize("entry", top_level(valid=True), ids=_ids(top_level(valid=True)))
def test_every_config_openpai_accepts_is_accepted(entry: Entry) -> None:
    result = parse_job(entry.path.read_bytes())
    if entry.file in STRICTER:
        assert not result.ok, f"listed as stricter ({STRICTER[entry.file]}) but accepted"
        return
    assert result.ok, "\n".join(map(str, result.errors))
    assert result.kind is Kind.JOB
    expected = "v1" if entry.kind.startswith("v1") else "v2"
    assert result.dialect is not None and result.dialect.value == expected
    assert result.spec is not None and result.spec.task_roles


def test_the_corpus_is_all_there() -> None:
    assert len(top_level(valid=True)) >= 100
    assert len(top_level(valid=False)) == len(INVALID_TOP_LEVEL)


@pytest.mark.parametrize("file", sorted(INVALID_TOP_LEVEL))
def test_configs_openpai_rejects_are_rejected_at_the_named_path(file: str) -> None:
    path, fragment = INVALID_TOP_LEVEL[file]
    result = parse_job((CORPUS / file).read_bytes())
    assert not result.ok
    matching = [e for e in result.errors if e.path == path and fragment in e.message]
    assert matching, "\n".join(map(str, result.errors))


INVALID_FOLDER = [e for e in index() if e.folder == "invalid"]


@pytest.mark.parametrize("entry", INVALID_FOLDER, ids=_ids(INVALID_FOLDER))
def test_every_broken_file_is_rejected_where_the_verdict_says(entry: Entry) -> None:
    result = parse_document(entry.path.read_bytes())
    assert not result.ok and result.errors
    verdict = entry.verdict
    unit_test = re.search(r"protocol\.js__(invalid\d+)__", entry.file)
    if unit_test:
        expected = REST_SERVER_UNIT_TESTS[unit_test.group(1)]
        assert any(
            e.path == expected or e.path.startswith(expected + ".") for e in result.errors
        ), "\n".join(map(str, result.errors))
        return
    line = re.search(r"line (\d+)", verdict)
    assert line, verdict
    (error,) = result.errors
    reported = re.search(r"line (\d+), column (\d+)", error.message)
    assert reported, error.message
    if entry.file.endswith(".json"):
        # a comment is reported where it starts; a trailing comma where it stands, which can be
        # the line before the one the JSON parser stumbled on
        assert error.code in ("json-comment", "json-trailing-comma")
        assert abs(int(reported.group(1)) - int(line.group(1))) <= 1
    else:
        assert error.code == "yaml-syntax"
        assert int(reported.group(1)) == int(line.group(1))


def test_json_comments_name_the_line_column_and_the_fix() -> None:
    result = parse_document((CORPUS / "invalid/pai__examples__mpi__cntk-mpi.json").read_bytes())
    (error,) = result.errors
    assert error.code == "json-comment"
    assert "line 5, column 3" in error.message
    assert "remove the // comment" in error.message


@pytest.mark.parametrize("file", sorted(DRAFTS))
def test_drafts(file: str) -> None:
    expected = DRAFTS[file]
    result = parse_document((CORPUS / "drafts" / file).read_bytes())
    if expected in ("job", "component"):
        assert result.ok, "\n".join(map(str, result.errors))
        assert result.kind is Kind(expected)
        assert result.dialect is not None and result.dialect.value == "draft"
    else:
        assert not result.ok
        assert any(e.code == expected for e in result.errors), "\n".join(map(str, result.errors))


def test_every_draft_file_is_listed() -> None:
    assert sorted(p.name for p in (CORPUS / "drafts").iterdir()) == sorted(DRAFTS)


COMPONENTS = files_in(CORPUS / "components")


@pytest.mark.parametrize("path", COMPONENTS, ids=[p.name for p in COMPONENTS])
def test_components_are_recognised_and_refused_as_jobs(path) -> None:  # type: ignore[no-untyped-def]
    result = parse_document(path.read_bytes())
    assert result.ok and result.kind is Kind.COMPONENT
    assert result.component is not None
    expected_type = path.name.split("__")[2]
    assert result.component.type.value == expected_type

    as_job = parse_job(path.read_bytes())
    assert not as_job.ok
    (error, *_) = as_job.errors
    assert error.code == "not-a-job"
    assert f"this is a {expected_type} component, not a job" in error.message


FRAGMENTS = files_in(CORPUS / "fragments")


@pytest.mark.parametrize("path", FRAGMENTS, ids=[p.name for p in FRAGMENTS])
def test_fragments_get_an_answer_not_an_exception(path) -> None:  # type: ignore[no-untyped-def]
    result = parse_document(path.read_bytes())
    assert result.ok or result.errors
    for error in result.errors:
        assert error.message and error.code
