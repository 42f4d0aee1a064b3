"""Property tests of the protocol engine's contract, on mutated real configs and on garbage.

The contract: `parse_document`, `parse_job` and `resolve_job` never raise. They return a
ParseResult that is either ok (with a spec, or for `parse_document` a component) or not ok
with a non-empty list of errors, each with a path, a code and a message. A job that is
accepted writes back (`to_v2_yaml`) to v2 YAML that is accepted again as the same job.

The mutations start from the real configs of ../shared/corpus (the top-level files OpenPAI
accepts, the drafts and the components): delete a key or item at any depth, replace any value
with a random JSON-ish value, insert keys (random or ones the protocol knows), wrap a value in a
list; then dump the result as YAML or JSON, as text or bytes.
"""

from __future__ import annotations

import copy
import datetime
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from server.protocol import (
    Dialect,
    Issue,
    Kind,
    ParseResult,
    parse_document,
    parse_job,
    resolve_job,
    to_v2_yaml,
)
from server.protocol.writer import v1_code_dir_as_script
from tests.corpus import CORPUS, files_in, top_level

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

SETTINGS = settings(
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)

# ------------------------------------------------------------------------------ the seeds


def _load(text: str, name: str) -> Any:
    if name.endswith(".json"):
        return json.loads(text)
    return yaml.load(text, Loader=_Loader)


def _seeds() -> list[tuple[str, Any, str]]:
    """(file, parsed data, text) for every seed file that plain YAML/JSON can read."""
    paths = [e.path for e in top_level(valid=True)]
    paths += files_in(CORPUS / "drafts")
    paths += files_in(CORPUS / "components")
    seeds = []
    for path in paths:
        text = path.read_text(encoding="utf-8-sig")
        try:
            data = _load(text, path.name)
        except (ValueError, yaml.YAMLError):
            continue  # the drafts that are not valid YAML; the engine tests cover those
        if isinstance(data, dict):
            seeds.append((str(path.relative_to(CORPUS)), data, text))
    return seeds


def _accepted(text: str) -> bool:
    try:
        return parse_job(text).ok
    except Exception:  # reported by test_every_corpus_seed_...; keep collecting the others
        return False


SEEDS = _seeds()
ACCEPTED_JOBS = [s for s in SEEDS if _accepted(s[2])]


@pytest.mark.shared("corpus")
def test_there_are_seeds() -> None:
    assert len(SEEDS) >= 150
    assert len(ACCEPTED_JOBS) >= 100


# ------------------------------------------------------------------------- the contract


def assert_contract(result: ParseResult, *, job_only: bool) -> None:
    assert isinstance(result, ParseResult)
    for issue in result.issues:
        assert isinstance(issue, Issue)
        assert isinstance(issue.path, str)
        assert isinstance(issue.code, str) and issue.code, issue
        assert isinstance(issue.message, str) and issue.message, issue
    if result.ok:
        assert not result.errors
        if job_only:
            assert result.spec is not None and result.component is None
            assert result.kind is Kind.JOB
        else:
            assert (result.spec is not None) != (result.component is not None)
        if result.spec is not None:  # a job runs something: `taskRoles: {}` is refused too
            assert result.spec.task_roles, "accepted a job with no task roles"
    else:
        assert result.errors, "rejected without saying why"
        assert result.spec is None and result.component is None


@dataclass
class Answers:
    """What parse_job and resolve_job said about one input."""

    job: ParseResult
    resolved: ParseResult

    @property
    def ok(self) -> bool:
        return self.job.ok

    @property
    def errors(self) -> list[Issue]:
        return self.job.errors


def check_all(data: str | bytes, parameters: dict[str, Any] | None = None) -> Answers:
    """Run all three entry points on `data`, checking the contract of each."""
    assert_contract(parse_document(data, parameters), job_only=False)
    job = parse_job(data, parameters)
    assert_contract(job, job_only=True)
    resolved = resolve_job(data, parameters)
    assert_contract(resolved, job_only=True)
    assert resolved.ok == job.ok
    return Answers(job, resolved)


def assert_round_trip(answers: Answers) -> None:
    """An accepted job, written as v2 (as parsed and as resolved), reads back as the same job:
    the same role names in the same order, with the same instance counts."""
    for spec in (answers.job.spec, answers.resolved.spec):
        assert spec is not None
        written = to_v2_yaml(spec)
        again = parse_job(written)
        if spec.secrets:
            # by design secrets are written masked ("******"), and a masked config is refused
            # until the real values are put back: that must be the only complaint
            assert [(e.path, e.code) for e in again.errors] == [("secrets", "masked-secrets")]
            again = parse_job(written.replace("secrets: '******'", "secrets: {}"))
        assert again.ok, "\n".join([written, *map(str, again.errors)])
        assert again.dialect is Dialect.V2
        assert again.spec is not None
        assert [(r.name, r.instances) for r in again.spec.task_roles] == [
            (r.name, r.instances) for r in spec.task_roles
        ]
        assert again.spec.name == spec.name  # `a.b` is written as a v2 name and comes back
        assert [(p.type, p.name) for p in again.spec.prerequisites] == [
            (p.type, p.name) for p in v1_code_dir_as_script(spec).prerequisites
        ]


# --------------------------------------------------------------------------- strategies

PROTOCOL_KEYS = [
    # v2
    "protocolVersion",
    "name",
    "type",
    "version",
    "prerequisites",
    "parameters",
    "secrets",
    "jobRetryCount",
    "taskRoles",
    "deployments",
    "defaults",
    "extras",
    "instances",
    "completion",
    "minFailedInstances",
    "minSucceededInstances",
    "taskRetryCount",
    "dockerImage",
    "data",
    "output",
    "script",
    "extraContainerOptions",
    "shmMB",
    "infiniband",
    "resourcePerInstance",
    "cpu",
    "memoryMB",
    "gpu",
    "ports",
    "commands",
    "uri",
    "auth",
    "plugin",
    "callbacks",
    "require",
    "preCommands",
    "postCommands",
    "virtualCluster",
    "deployment",
    "paigraph",
    "portBeginAt",
    "roleParameters",
    # v1
    "jobName",
    "image",
    "taskNumber",
    "memoryMB",
    "gpuNumber",
    "command",
    "portList",
    "label",
    "beginAt",
    "portNumber",
    "jobEnvs",
    "minFailedTaskCount",
    "minSucceededTaskCount",
    "retryCount",
    # draft
    "protocol_version",
    "tasks",
    "job",
    "role",
    "dockerimage",
    "resource",
    "storage",
    "env",
]

INTERESTING_STRINGS = [
    "",
    " ",
    "0",
    "-1",
    "2",
    "1e309",
    "null",
    "~",
    "yes",
    "job",
    "dockerimage",
    "data",
    "script",
    "output",
    "storage",
    "v2",
    "<% $parameters.epochs %>",
    "<% $data.uri[0] %>",
    "<% $script.uri %>",
    "<% $output.name %>",
    "<% $secrets.password %>",
    "<% $parameters.a.b[3] %>",
    "$$epochs$$",
    "$$data$$",
    "$job.parameters.lr",
    "$job.tasks.worker.data",
    "{{ name }}",
    "{{",
    "<%",
    "worker",
    "a b",
    "a.b",
    "x" * 300,
]

HUGE_INTS = [
    0,
    1,
    -1,
    -2,
    65535,
    65536,
    2**31 - 1,
    2**31,
    2**53 + 1,
    2**63,
    2**64,
    -(2**63),
    10**100,
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=70_000),
    st.integers(),
    st.integers(min_value=-(2**256), max_value=2**256),
    st.sampled_from(HUGE_INTS),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from(INTERESTING_STRINGS),
)
keys = st.one_of(
    st.sampled_from(PROTOCOL_KEYS),
    st.text(max_size=12),
    st.sampled_from([0, 1, -1, True, None, 1.5]),
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=4),
    ),
    max_leaves=10,
)
# YAML can say more than JSON: dates and timestamps are what unquoted versions often become.
yaml_values = st.one_of(
    json_values,
    st.dates(),
    st.datetimes(),
)

Path_ = tuple[Any, ...]


def _paths(node: Any, path: Path_ = ()) -> list[Path_]:
    """Every place in the document, the root first."""
    out = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, (*path, index))
    return out


def _get(doc: Any, path: Path_) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _set(doc: Any, path: Path_, value: Any) -> Any:
    """Set the value at path; returns the (possibly new) root."""
    if not path:
        return value
    _get(doc, path[:-1])[path[-1]] = value
    return doc


@st.composite
def mutated(draw: st.DrawFn, values: st.SearchStrategy[Any] = json_values) -> Any:
    """A real config with one to four random mutations."""
    _file, data, _text = draw(st.sampled_from(SEEDS))
    doc = copy.deepcopy(data)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        paths = _paths(doc)
        op = draw(st.sampled_from(["delete", "replace", "insert", "wrap"]))
        if op == "delete" and len(paths) > 1:
            path = draw(st.sampled_from(paths[1:]))
            parent = _get(doc, path[:-1])
            if isinstance(parent, dict):
                del parent[path[-1]]
            else:
                parent.pop(path[-1])
        elif op == "insert":
            containers = [p for p in paths if isinstance(_get(doc, p), (dict, list))]
            if not containers:
                continue
            container = _get(doc, draw(st.sampled_from(containers)))
            value = draw(values)
            if isinstance(container, dict):
                container[draw(keys)] = value
            else:
                container.insert(draw(st.integers(0, len(container))), value)
        elif op == "wrap":
            path = draw(st.sampled_from(paths))
            doc = _set(doc, path, [_get(doc, path)])
        else:
            path = draw(st.sampled_from(paths))
            doc = _set(doc, path, draw(values))
    return doc


def _json_default(value: Any) -> Any:
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    raise TypeError(f"not JSON: {value!r}")


DUMPERS: dict[str, Callable[[Any], str | bytes]] = {
    "yaml": lambda d: yaml.safe_dump(d, sort_keys=False, allow_unicode=True),
    "yaml-flow": lambda d: yaml.safe_dump(d, default_flow_style=True, width=80),
    "yaml-bytes": lambda d: yaml.safe_dump(d, sort_keys=False, allow_unicode=True).encode(),
    "json": lambda d: json.dumps(d, default=_json_default),
    "json-indented": lambda d: json.dumps(d, indent=2, ensure_ascii=False, default=_json_default),
    "json-bytes": lambda d: json.dumps(d, default=_json_default).encode(),
}


def _dump(doc: Any, how: str) -> str | bytes:
    try:
        return DUMPERS[how](doc)
    except (TypeError, ValueError, yaml.YAMLError):
        assume(False)  # e.g. a date as a JSON key: not a document anyone could write
        raise AssertionError("unreachable") from None


parameters = st.none() | st.dictionaries(
    st.sampled_from(["epochs", "lr", "batchsize", "name", "data", "x"]) | st.text(max_size=6),
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    max_size=3,
)

# Names the draft and v1 dialects allow and v2 does not, which once failed to write back.
_DOT_NAMED_DRAFT = {
    "protocol_version": "v2",
    "name": "a.b",
    "type": "job",
    "prerequisites": [
        {"protocol_version": "v2", "name": "img", "type": "dockerimage", "uri": "ubuntu"},
        {"protocol_version": "v2", "name": "~", "type": "data", "uri": ["http://x/y"]},
    ],
    "tasks": [
        {
            "role": "worker",
            "dockerimage": "img",
            "data": "~",
            "resource": {"resourcePerInstance": {"cpu": 1, "memoryMB": 1024, "gpu": 0}},
            "command": ["echo hi"],
        }
    ],
}
_DOT_NAMED_V1 = {
    "jobName": "a.b",
    "image": "ubuntu",
    "taskRoles": [{"name": "worker", "cpuNumber": 1, "memoryMB": 1024, "command": "echo hi"}],
}

# A runtime plugin whose name is not a string, which once raised while warning about it.
_PLUGIN_NAMED_BY_A_LIST = {
    "protocolVersion": 2,
    "name": "plugins",
    "type": "job",
    "prerequisites": [{"type": "dockerimage", "uri": "ubuntu", "name": "img"}],
    "taskRoles": {
        "main": {
            "dockerImage": "img",
            "resourcePerInstance": {"gpu": 0, "cpu": 1, "memoryMB": 1024},
            "commands": ["echo hi"],
        }
    },
    "extras": {"com.microsoft.pai.runtimeplugin": [{"plugin": [], "parameters": {}}]},
}

# ------------------------------------------------------------------------------- tests


@pytest.mark.shared("corpus")
@settings(SETTINGS, max_examples=250)
@given(doc=mutated(yaml_values), how=st.sampled_from(sorted(DUMPERS)), params=parameters)
@example(doc=_DOT_NAMED_DRAFT, how="yaml", params=None)
@example(doc={**_DOT_NAMED_DRAFT, "name": "~"}, how="json", params=None)
@example(doc=_DOT_NAMED_V1, how="json", params=None)
def test_mutated_configs_get_an_answer_not_an_exception(
    doc: Any, how: str, params: dict[str, Any] | None
) -> None:
    result = check_all(_dump(doc, how), params)
    if result.ok:
        assert_round_trip(result)


@pytest.mark.shared("corpus")
@settings(SETTINGS, max_examples=150)
@given(doc=mutated(), how=st.sampled_from(sorted(DUMPERS)))
@example(doc=_DOT_NAMED_DRAFT, how="yaml-flow")
@example(doc=_PLUGIN_NAMED_BY_A_LIST, how="json")
@example(doc=_DOT_NAMED_V1, how="json-indented")
def test_accepted_mutations_write_back_to_the_same_v2_job(doc: Any, how: str) -> None:
    result = check_all(_dump(doc, how))
    assume(result.ok)
    assert_round_trip(result)


@pytest.mark.shared("corpus")
@settings(SETTINGS, max_examples=100)
@given(doc=mutated(), wrapper=st.sampled_from(["list", "job", "tasks", "taskRoles"]))
def test_configs_moved_under_another_key_are_refused_or_accepted_cleanly(
    doc: Any, wrapper: str
) -> None:
    wrapped = [doc] if wrapper == "list" else {wrapper: doc}
    result = check_all(yaml.safe_dump(wrapped))
    if wrapper == "list":
        assert not result.ok
        assert result.errors[0].code == "root-type"


@settings(SETTINGS, max_examples=200)
@given(text=st.text(max_size=300))
def test_arbitrary_text_never_raises(text: str) -> None:
    check_all(text)


YAMLISH = st.lists(
    st.sampled_from([*"{}[]:,-?'\"#&*!|>%@`~ \n\t\\abc01.eE+", "\r\n", "  ", "<<", "---"]),
    max_size=80,
).map("".join)


@settings(SETTINGS, max_examples=200)
@given(text=YAMLISH)
def test_yaml_and_json_punctuation_never_raises(text: str) -> None:
    check_all(text)


@settings(SETTINGS, max_examples=200)
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    check_all(data)


@pytest.mark.shared("corpus")
@settings(SETTINGS, max_examples=100)
@given(
    seed=st.sampled_from(SEEDS),
    cut=st.floats(min_value=0, max_value=1),
    junk=st.binary(max_size=8),
)
def test_truncated_and_corrupted_real_configs_never_raise(
    seed: tuple[str, Any, str], cut: float, junk: bytes
) -> None:
    raw = seed[2].encode()
    at = int(len(raw) * cut)
    check_all(raw[:at])
    check_all(raw[:at] + junk + raw[at:])


# Values a user can write that the earlier strategies cannot produce as Python data.


@pytest.mark.shared("corpus")
@settings(SETTINGS, max_examples=30)
@given(
    doc=mutated(),
    digits=st.integers(min_value=4301, max_value=6000),
    as_json=st.booleans(),
    data=st.data(),
)
def test_huge_integer_literals_never_raise(
    doc: Any, digits: int, as_json: bool, data: st.DataObject
) -> None:
    """An integer literal longer than Python's int-string conversion limit (4300 digits)."""
    marker = "HUGE_INTEGER_MARKER"
    doc = _set(doc, data.draw(st.sampled_from(_paths(doc))), marker)
    text = json.dumps(doc, default=_json_default) if as_json else yaml.safe_dump(doc)
    assume(marker in text)
    literal = "1" + "0" * (digits - 1)
    check_all(text.replace(f'"{marker}"', literal).replace(marker, literal))


@settings(SETTINGS, max_examples=50)
@given(text=st.text(alphabet=st.characters(categories=["Cs", "Ll", "Zs"]), max_size=20))
def test_text_with_lone_surrogates_never_raises(text: str) -> None:
    """A str can hold lone surrogates, e.g. from a JSON request body with "\\ud800"."""
    check_all(text)
    check_all("name: " + text)


@pytest.mark.shared("corpus")
@settings(SETTINGS, max_examples=50)
@given(
    seed=st.sampled_from(ACCEPTED_JOBS),
    surrogate=st.characters(categories=["Cs"]),
)
def test_json_escaped_surrogates_in_accepted_jobs_write_back(
    seed: tuple[str, Any, str], surrogate: str
) -> None:
    """JSON may spell a lone surrogate as an escape: refused cleanly, or accepted and written."""
    doc = copy.deepcopy(seed[1])
    doc["description"] = f"about {surrogate}"
    result = check_all(json.dumps(doc, default=_json_default))
    if result.ok:  # refusing the text is as good as accepting it; crashing is not
        assert_round_trip(result)


# ------------------------------------------------------------------- the seeds themselves


@pytest.mark.shared("corpus")
@pytest.mark.parametrize("seed", SEEDS, ids=[s[0] for s in SEEDS])
def test_every_corpus_seed_meets_the_contract_and_accepted_jobs_write_back(
    seed: tuple[str, Any, str],
) -> None:
    result = check_all(seed[2])
    if result.ok:
        assert_round_trip(result)


# ------------------------------------------------------- small inputs the properties found

V2 = """protocolVersion: 2
name: small
type: job
prerequisites:
  - {name: img, type: dockerimage, uri: ubuntu}
taskRoles:
  worker:
    dockerImage: img
    resourcePerInstance: {cpu: 1, memoryMB: 1024, gpu: 0}
    commands: [echo hi]
"""
DRAFT = """protocol_version: v2
name: small
type: job
prerequisites:
  - {protocol_version: v2, name: img, type: dockerimage, uri: ubuntu}
tasks:
  - role: worker
    dockerimage: img
    resource: {instances: 1, resourcePerInstance: {cpu: 1, memoryMB: 1024, gpu: 0}}
    command: [echo hi]
"""
V1 = """{"jobName": "small", "image": "ubuntu",
 "taskRoles": [{"name": "worker", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 1024,
                "command": "echo hi"}]}"""
HUGE = "1" + "0" * 5000  # longer than Python's int-from-string limit of 4300 digits

SMALL_CASES: dict[str, str] = {
    # a list or mapping where a type name is expected
    "top-level-type-list": "type: []\n",
    "top-level-type-mapping": "name: x\ntype: {a: 1}\n",
    "prerequisite-type-list": V2.replace("type: dockerimage", "type: [dockerimage]"),
    "draft-prerequisite-type-mapping": DRAFT.replace("type: dockerimage", "type: {a: 1}"),
    # mapping keys that are not strings
    "parameters-integer-key": V2 + "parameters: {1: a}\n",
    "extras-boolean-key": V2 + "extras: {true: a}\n",
    "extra-container-options-integer-key": V2.replace(
        "    commands:", "    extraContainerOptions: {1: 2}\n    commands:"
    ),
    "draft-parameters-integer-key": DRAFT + "parameters: {1: 2}\n",
    "draft-task-parameters-integer-key": DRAFT.replace(
        "    command:", "    parameters: {1: 2}\n    command:"
    ),
    "v1-extras-integer-key": V1.replace('"image"', '"extras": {"1": 2}, "image"').replace(
        '{"1": 2}', "{1: 2}"
    ),
    "component-integer-key": "name: x\ntype: script\nuri: https://example.org/x.git\n1: 2\n",
    "component-plugin-params-integer-key": (
        "name: x\ntype: data\nuri: [https://example.org/x]\nplugin_params: {1: 2}\n"
    ),
    # a mapping-valued parameter rendered into a command: keys of mixed types, non-JSON values
    "parameter-mapping-mixed-keys": V2.replace("[echo hi]", "['echo <% $parameters.p %>']")
    + "parameters: {p: {null: 1, a: 2}}\n",
    "parameter-mapping-with-a-date": V2.replace("[echo hi]", "['echo {{ p }}']")
    + "parameters: {p: {day: 2020-01-01}}\n",
    "draft-parameter-mapping-mixed-keys": DRAFT.replace("[echo hi]", "['echo $$p$$']")
    + "parameters: {p: {1: a, b: c}}\n",
    # an empty task-role map: `taskRoles:` with nothing under it is null
    "v2-null-task-roles": V2.split("taskRoles:")[0] + "taskRoles:\n",
    "v2-empty-task-roles": V2.split("taskRoles:")[0] + "taskRoles: {}\n",
    # a deployment that names a role but gives it no commands
    "v2-deployment-role-without-commands": V2
    + "deployments: [{name: d, taskRoles: {worker: {}}}]\ndefaults: {deployment: d}\n",
    # a job with secrets (written back masked)
    "secrets-integer-key": V2 + "secrets: {1: a}\n",
    "secrets": V2.replace("[echo hi]", "['echo <% $secrets.token %>']") + "secrets: {token: t}\n",
    # a job name that is null
    "v2-null-name": V2.replace("name: small", "name: null"),
    "draft-null-name": DRAFT.replace("name: small", "name: ~"),
    "v1-null-job-name": V1.replace('"small"', "null"),
    # integer literals longer than Python's limit for int(str)
    "yaml-huge-integer": V2.replace("cpu: 1,", f"cpu: {HUGE},"),
    "json-huge-integer": V1.replace('"cpuNumber": 1', f'"cpuNumber": {HUGE}'),
    "yaml-huge-integer-anywhere": V2 + f"description: {HUGE}\n",
    # a str (not bytes) holding a lone surrogate, e.g. from a JSON request body with "\\ud800"
    "str-lone-surrogate": V2 + "description: \ud800\n",
}


@pytest.mark.parametrize("text", SMALL_CASES.values(), ids=SMALL_CASES.keys())
def test_small_hostile_inputs_get_an_answer_not_an_exception(text: str) -> None:
    for data in (text, text.encode("utf-8", "surrogatepass")):
        result = check_all(data)
        if result.ok:
            assert_round_trip(result)


@pytest.mark.parametrize("base", [V2, DRAFT, V1], ids=["v2", "draft", "v1"])
def test_json_surrogate_escapes_in_an_accepted_job_write_back(base: str) -> None:
    doc = _load(base, "job.json" if base is V1 else "job.yaml")
    doc["description" if base is not V1 else "jobName"] = "x\ud800"
    result = check_all(json.dumps(doc))
    if result.ok:
        assert_round_trip(result)
