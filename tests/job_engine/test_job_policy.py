"""Completion and retry policy, from real parsed job configs of each dialect."""

from __future__ import annotations

import pytest

from backends.base import Hooks, ResourceRequest, RoleLaunch
from server.jobs import exit_codes
from server.jobs.exit_codes import classify
from server.jobs.policy import (
    DEFAULT_MAX_ATTEMPTS,
    Outcome,
    RetryPolicy,
    RolePolicy,
    effective_completion,
    job_policy,
    role_policy_from_launch,
)
from server.protocol import JobSpec, parse_job
from tests.jobs import as_json, as_yaml, draft, v1, v2


def parsed(text: str) -> JobSpec:
    result = parse_job(text)
    assert result.ok, result.errors
    assert result.spec is not None
    return result.spec


def test_v2_defaults_end_the_job_when_every_instance_of_a_role_succeeded() -> None:
    spec = parsed(as_yaml(v2()))
    policy = job_policy(spec)
    ps, worker = policy.role("ps"), policy.role("worker")
    # ps: no completion block -> fails on the first failure, succeeds when its 1 instance did
    assert (ps.min_failed, ps.min_succeeded) == (1, 1)
    # worker: minSucceededInstances 1 as written
    assert (worker.min_failed, worker.min_succeeded) == (1, 1)
    assert policy.gang_allocation and policy.task_retry("worker") is None
    assert policy.retry.max_retry_count == 0 and policy.retry.fancy


def test_minus_one_and_null_in_v2() -> None:
    doc = v2()
    doc["taskRoles"]["ps"]["completion"] = {"minFailedInstances": -1, "minSucceededInstances": -1}
    doc["taskRoles"]["worker"]["completion"] = {"minFailedInstances": None}
    spec = parsed(as_yaml(doc))
    assert effective_completion(spec.role("ps")) == (-1, -1)
    # null is the default: 1 failure; every one of the 2 instances succeeding
    assert effective_completion(spec.role("worker")) == (1, 2)
    ps = job_policy(spec).role("ps")
    assert ps.threshold(Outcome.FAILED) is None and ps.threshold(Outcome.SUCCEEDED) is None
    assert not ps.reached(Outcome.FAILED, 100)


def test_v1_and_draft_leave_min_succeeded_off_and_null_disables_min_failed() -> None:
    doc = v1()
    doc["taskRoles"][0]["minFailedTaskCount"] = None
    doc["taskRoles"][1]["minSucceededTaskCount"] = 1
    doc["retryCount"] = -2
    policy = job_policy(parsed(as_json(doc)))
    assert (policy.role("ps_server").min_failed, policy.role("ps_server").min_succeeded) == (-1, -1)
    assert (policy.role("worker").min_failed, policy.role("worker").min_succeeded) == (1, 1)
    assert policy.retry.max_retry_count == -2 and not policy.retry.fancy

    draft_policy = job_policy(parsed(as_yaml(draft())))
    assert [(r.name, r.min_failed, r.min_succeeded) for r in draft_policy.roles] == [
        ("worker", 1, -1),
        ("ps", 1, -1),
    ]


def test_gang_allocation_off_gives_each_instance_its_own_retry_count() -> None:
    doc = v2(jobRetryCount=3, extras={"gangAllocation": False})
    doc["taskRoles"]["worker"]["taskRetryCount"] = 2
    policy = job_policy(parsed(as_yaml(doc)))
    assert not policy.gang_allocation
    worker = policy.task_retry("worker")
    assert worker is not None and worker.max_retry_count == 2 and worker.fancy
    assert policy.retry.max_retry_count == 3


def test_rule_messages_name_the_counts_and_the_role() -> None:
    role = RolePolicy(name="worker", instances=4, min_failed=2, min_succeeded=3)
    assert role.reached(Outcome.FAILED, 2) and not role.reached(Outcome.FAILED, 1)
    assert role.rule_message(Outcome.FAILED, 2) == (
        "FailedTaskCount 2 has reached MinFailedTaskCount 2 in role worker"
    )
    assert role.rule_message(Outcome.SUCCEEDED, 3) == (
        "SucceededTaskCount 3 has reached MinSucceededTaskCount 3 in role worker"
    )


def test_a_role_launch_carries_effective_values_and_anything_below_one_is_off() -> None:
    launch = RoleLaunch(
        name="w",
        instances=3,
        image="img",
        resources=ResourceRequest(),
        commands=["true"],
        hooks=Hooks(),
        min_failed=0,
        min_succeeded=3,
    )
    role = role_policy_from_launch(launch, task_retry_count=1)
    assert (role.min_failed, role.min_succeeded, role.task_retry_count) == (-1, 3, 1)


# --- retry decisions -------------------------------------------------------------------------

TRANSIENT = classify(137)
PERMANENT = classify(137, oom_killed=True)
UNKNOWN = classify(1)
SUCCESS = classify(0)
CONFLICT = exit_codes.info(251)


def test_transient_failures_are_retried_without_being_counted() -> None:
    decision = RetryPolicy.for_job(0).decide(TRANSIENT, attempts=1, accountable_retries=0)
    assert decision.retry and not decision.accountable and decision.delay_seconds == 0
    assert "not counted" in decision.reason


def test_a_resource_conflict_waits_before_the_retry() -> None:
    policy = RetryPolicy.for_job(0).model_copy(update={"conflict_delay_seconds": 5.0})
    decision = policy.decide(CONFLICT, attempts=1, accountable_retries=0)
    assert decision.retry and not decision.accountable and decision.delay_seconds == 5.0


def test_permanent_failures_are_never_retried_unless_the_count_is_minus_two() -> None:
    for count in (0, 5, -1):
        decision = RetryPolicy.for_job(count).decide(PERMANENT, attempts=1, accountable_retries=0)
        assert not decision.retry and "not retried" in decision.reason
    assert RetryPolicy.for_job(-2).decide(PERMANENT, attempts=1, accountable_retries=0).retry


def test_unknown_failures_are_retried_up_to_the_count() -> None:
    policy = RetryPolicy.for_job(2)
    first = policy.decide(UNKNOWN, attempts=1, accountable_retries=0)
    second = policy.decide(UNKNOWN, attempts=2, accountable_retries=1)
    third = policy.decide(UNKNOWN, attempts=3, accountable_retries=2)
    assert first.retry and first.accountable and "retry 1 of 2" in first.reason
    assert second.retry and "retry 2 of 2" in second.reason
    assert not third.retry and "all 2 retries used" in third.reason


def test_success_is_final_except_with_minus_two() -> None:
    for count in (0, 3, -1):
        assert (
            not RetryPolicy.for_job(count).decide(SUCCESS, attempts=1, accountable_retries=0).retry
        )
    again = RetryPolicy.for_job(-2).decide(SUCCESS, attempts=1, accountable_retries=0)
    assert again.retry and again.accountable


@pytest.mark.parametrize("count", [-1, -2])
def test_unlimited_counts_stop_at_the_safety_cap(count: int) -> None:
    policy = RetryPolicy.for_job(count)
    assert policy.max_attempts == DEFAULT_MAX_ATTEMPTS
    assert policy.decide(UNKNOWN, attempts=DEFAULT_MAX_ATTEMPTS - 1, accountable_retries=50).retry
    capped = policy.decide(UNKNOWN, attempts=DEFAULT_MAX_ATTEMPTS, accountable_retries=50)
    assert not capped.retry and f"max_attempts {DEFAULT_MAX_ATTEMPTS}" in capped.reason


def test_the_cap_never_cuts_an_explicit_retry_count_short() -> None:
    policy = RetryPolicy.for_job(40)
    assert policy.max_attempts == 41
    assert policy.decide(UNKNOWN, attempts=40, accountable_retries=39).retry


def test_a_stop_is_never_retried() -> None:
    stopped = exit_codes.info(exit_codes.STOP_REQUESTED)
    assert not RetryPolicy.for_job(-2).decide(stopped, attempts=1, accountable_retries=0).retry
