"""Role start order in the protocol: what a role waits for, read, refused at its path, kept."""

from __future__ import annotations

from typing import Any

from backends.base import StartDependency
from backends.start_gate import DEPENDENCY_FAILED, PeerState, ReadinessCount, Verdict, judge
from server.jobs import exit_codes
from server.protocol import ParseResult, parse_job
from server.protocol.model import Dependency, DependencyPhase, Readiness
from server.protocol.writer import to_v2_yaml
from tests.jobs import as_json, as_yaml, draft, v1


def ps_worker(order: dict[str, Any], *, ps_decides: bool = False) -> dict[str, Any]:
    """A ps/worker job in protocol v2 with `order` as extras.paigraph.taskRoles."""
    resources = {"cpu": 1, "memoryMB": 128, "gpu": 0}
    ps: dict[str, Any] = {
        "instances": 2,
        "dockerImage": "img",
        "resourcePerInstance": {**resources, "ports": {"grpc": 1}},
        "commands": ["serve"],
    }
    if not ps_decides:
        ps["completion"] = {"minSucceededInstances": -1}
    return {
        "protocolVersion": 2,
        "name": "order",
        "type": "job",
        "prerequisites": [{"name": "img", "type": "dockerimage", "uri": "busybox"}],
        "taskRoles": {
            "ps": ps,
            "worker": {
                "instances": 3,
                "dockerImage": "img",
                "resourcePerInstance": resources,
                "commands": ["train"],
            },
        },
        "extras": {"paigraph": {"taskRoles": order}},
    }


def errors(result: ParseResult) -> dict[str, tuple[str, str]]:
    return {e.path: (e.code, e.message) for e in result.errors}


def warnings(result: ParseResult) -> dict[str, str]:
    return {w.path: w.message for w in result.warnings}


READY = {
    "ps": {"readiness": {"port": "grpc", "periodSeconds": 0.5}},
    "worker": {"dependsOn": [{"role": "ps", "when": "ready"}], "dependencyTimeoutSeconds": 30},
}
BASE = "extras.paigraph.taskRoles"


def test_a_role_that_waits_for_another_is_read() -> None:
    result = parse_job(as_yaml(ps_worker(READY)))
    assert result.ok, result.errors
    assert result.spec is not None
    ps, worker = result.spec.role("ps"), result.spec.role("worker")
    assert ps is not None and worker is not None
    assert ps.readiness == Readiness(port="grpc", period_seconds=0.5)
    assert ps.depends_on == []
    assert worker.depends_on == [Dependency(role="ps", when=DependencyPhase.READY)]
    assert worker.dependency_timeout_seconds == 30
    assert worker.readiness is None
    # the start order is not part of the job's own extras any more than the rest of ours is
    assert "paigraph" not in result.spec.extras


def test_every_kind_of_wait_is_accepted_without_a_warning() -> None:
    """Both backends hold a role back for running, ready (port or command) and succeeded."""
    assert parse_job(as_yaml(ps_worker(READY))).warnings == []
    order = {
        "ps": {"readiness": {"command": ["true"]}},
        "worker": {"dependsOn": [{"role": "ps", "when": "running"}]},
    }
    result = parse_job(as_yaml(ps_worker(order)))
    assert result.ok, result.errors
    assert result.warnings == []


def test_resolve_writes_the_start_order_back_and_reads_it_again() -> None:
    order = {
        "ps": {"readiness": {"command": ["sh", "-c", "test -e /tmp/up"], "failureThreshold": 5}},
        "worker": {"dependsOn": [{"role": "ps", "when": "running", "instances": 1}]},
    }
    first = parse_job(as_yaml(ps_worker(order)))
    assert first.spec is not None, first.errors
    written = to_v2_yaml(first.spec)
    again = parse_job(written)
    assert again.spec is not None, again.errors
    assert again.spec.task_roles == first.spec.task_roles
    ps = again.spec.role("ps")
    assert ps is not None and ps.readiness is not None
    assert ps.readiness.command == ["sh", "-c", "test -e /tmp/up"]
    assert ps.readiness.failure_threshold == 5


def test_a_cycle_is_refused_naming_it() -> None:
    order = {
        "ps": {"readiness": {"port": "grpc"}, "dependsOn": [{"role": "worker", "when": "running"}]},
        "worker": {"dependsOn": [{"role": "ps", "when": "ready"}]},
    }
    found = errors(parse_job(as_yaml(ps_worker(order))))
    code, message = found[f"{BASE}.ps.dependsOn"]
    assert code == "cycle"
    assert "ps -> worker -> ps" in message


def test_a_role_waiting_for_itself_is_a_cycle() -> None:
    order = {"worker": {"dependsOn": [{"role": "worker", "when": "running", "instances": 1}]}}
    code, message = errors(parse_job(as_yaml(ps_worker(order))))[f"{BASE}.worker.dependsOn"]
    assert (code, "worker -> worker" in message) == ("cycle", True)


def test_unknown_roles_are_refused_at_their_paths() -> None:
    order = {
        "chief": {"dependsOn": [{"role": "ps", "when": "running"}]},
        "worker": {"dependsOn": [{"role": "pss", "when": "running"}]},
    }
    found = errors(parse_job(as_yaml(ps_worker(order))))
    assert found[f"{BASE}.chief"][0] == "unknown-role"
    code, message = found[f"{BASE}.worker.dependsOn[0].role"]
    assert code == "unknown-role" and "'pss'" in message and "ps, worker" in message


def test_ready_needs_a_readiness_check() -> None:
    order = {"worker": {"dependsOn": [{"role": "ps", "when": "ready"}]}}
    code, message = errors(parse_job(as_yaml(ps_worker(order))))[f"{BASE}.worker.dependsOn[0].when"]
    assert code == "no-readiness"
    assert f"{BASE}.ps.readiness" in message


def test_succeeded_on_a_role_that_decides_the_job_is_refused_with_the_hint() -> None:
    order = {"worker": {"dependsOn": [{"role": "ps", "when": "succeeded"}]}}
    found = errors(parse_job(as_yaml(ps_worker(order, ps_decides=True))))
    code, message = found[f"{BASE}.worker.dependsOn[0].when"]
    assert code == "deciding-role"
    assert "taskRoles.ps.completion.minSucceededInstances: -1" in message
    # with the hint followed, it is accepted
    assert parse_job(as_yaml(ps_worker(order))).ok


def test_bad_values_are_refused_at_their_paths() -> None:
    order = {
        "ps": {"readiness": {"port": "metrics"}},
        "worker": {
            "dependsOn": [
                {"role": "ps", "when": "started"},
                {"role": "ps", "when": "running", "instances": 3},
            ],
            "dependencyTimeoutSeconds": 0,
            "waitFor": "ps",
        },
    }
    found = errors(parse_job(as_yaml(ps_worker(order))))
    assert found[f"{BASE}.ps.readiness.port"][0] == "unknown-port"
    assert found[f"{BASE}.worker.dependsOn[0].when"][0] == "enum"
    code, message = found[f"{BASE}.worker.dependsOn[1].instances"]
    assert code == "range" and "between 1 and 2" in message
    assert found[f"{BASE}.worker.dependencyTimeoutSeconds"][0] == "range"
    assert found[f"{BASE}.worker.waitFor"][0] == "unknown-field"


def test_readiness_says_exactly_one_way() -> None:
    order = {"ps": {"readiness": {"port": "grpc", "command": ["true"]}}}
    assert errors(parse_job(as_yaml(ps_worker(order))))[f"{BASE}.ps.readiness"][0] == "one-of"
    order = {"ps": {"readiness": {"periodSeconds": 2}}}
    assert errors(parse_job(as_yaml(ps_worker(order))))[f"{BASE}.ps.readiness"][0] == "one-of"


def test_a_role_waited_for_twice_is_refused() -> None:
    twice = [{"role": "ps", "when": "running"}, {"role": "ps", "when": "running"}]
    order = {"worker": {"dependsOn": twice}}
    found = errors(parse_job(as_yaml(ps_worker(order))))
    assert found[f"{BASE}.worker.dependsOn[1].role"][0] == "duplicate"


def test_the_draft_dialect_cannot_say_it_and_warns_at_its_path() -> None:
    doc = draft()
    doc["tasks"][1]["dependsOn"] = [{"role": doc["tasks"][0]["role"], "when": "running"}]
    result = parse_job(as_yaml(doc))
    assert result.ok, result.errors
    assert "protocol v2 documents only" in warnings(result)["tasks[1].dependsOn"]
    assert result.spec is not None
    assert all(role.depends_on == [] for role in result.spec.task_roles)


def test_the_v1_dialect_cannot_say_it_and_warns_at_its_path() -> None:
    doc = v1()
    role = doc["taskRoles"][0]["name"]
    doc["extras"] = {"paigraph": {"taskRoles": {role: {"readiness": {"port": "x"}}}}}
    result = parse_job(as_json(doc))
    assert result.ok, result.errors
    path = f"extras.paigraph.taskRoles.{role}.readiness"
    assert "protocol v2 documents only" in warnings(result)[path]


def test_the_backends_code_for_a_failed_wait_is_the_one_the_exit_table_explains() -> None:
    assert DEPENDENCY_FAILED == exit_codes.START_DEPENDENCY_FAILED
    assert "dependencyTimeoutSeconds" in exit_codes.spec_for(DEPENDENCY_FAILED).description


def test_a_ready_instance_stays_ready_until_failure_threshold_checks_in_a_row_fail() -> None:
    """failureThreshold counts as a Kubernetes readinessProbe does, on both backends."""
    count = ReadinessCount(failure_threshold=3)
    assert [count.record(passed) for passed in (False, False, False, False)] == [False] * 4
    assert count.record(True) is True  # the first pass makes it ready
    assert [count.record(passed) for passed in (False, False, True)] == [True, True, True]
    assert [count.record(passed) for passed in (False, False, False)] == [True, True, False]
    assert count.record(True) is True


def test_an_instance_that_is_not_ready_or_ended_does_not_count_as_ready() -> None:
    dep = StartDependency(role="ps", when="ready", instances=2)
    ready, ended = PeerState(running=True, ready=True), PeerState(running=True, ended=True)
    assert judge(dep, [ready, PeerState(running=True)]) is Verdict.WAITS
    assert judge(dep, [ready, ready]) is Verdict.HOLDS
    assert judge(dep, [ready, ended]) is Verdict.NEVER
