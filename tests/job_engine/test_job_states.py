"""Job and instance states: which changes are allowed, and that anything else is refused."""

from __future__ import annotations

import itertools

import pytest

from server.shapes.job_states import (
    INSTANCE_TRANSITIONS,
    JOB_TRANSITIONS,
    IllegalTransition,
    JobState,
    check_transition,
)

FINAL = {JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED}
LIVE = set(JobState) - FINAL


def test_the_seven_states_and_which_are_final() -> None:
    assert [s.value for s in JobState] == [
        "WAITING",
        "STARTING",
        "RUNNING",
        "STOPPING",
        "SUCCEEDED",
        "FAILED",
        "STOPPED",
    ]
    assert {s for s in JobState if s.is_final} == FINAL


@pytest.mark.parametrize("table", [JOB_TRANSITIONS, INSTANCE_TRANSITIONS])
def test_a_final_state_never_changes_and_every_live_state_can_end(table) -> None:
    assert set(table) == set(JobState)
    for state in FINAL:
        assert table[state] == frozenset()
    for state in LIVE:
        assert table[state] >= FINAL, state
        assert state not in table[state], "a state change must change the state"


def test_a_job_moves_forward_within_an_attempt_and_back_to_waiting_only_for_a_new_one() -> None:
    check_transition(JobState.WAITING, JobState.STARTING)
    check_transition(JobState.STARTING, JobState.RUNNING)
    check_transition(JobState.WAITING, JobState.RUNNING)  # seen running before seen placed
    check_transition(JobState.RUNNING, JobState.STOPPING)
    check_transition(JobState.STOPPING, JobState.WAITING)  # the stopped attempt is retried
    check_transition(JobState.RUNNING, JobState.WAITING)
    for old, new in [
        (JobState.RUNNING, JobState.STARTING),
        (JobState.STOPPING, JobState.RUNNING),
        (JobState.STOPPING, JobState.STARTING),
    ]:
        with pytest.raises(IllegalTransition):
            check_transition(old, new)
    assert JobState.RUNNING.can_become(JobState.SUCCEEDED)
    assert not JobState.SUCCEEDED.can_become(JobState.RUNNING)


def test_an_instance_being_stopped_can_only_end() -> None:
    assert INSTANCE_TRANSITIONS[JobState.STOPPING] == FINAL
    with pytest.raises(IllegalTransition):
        check_transition(JobState.STOPPING, JobState.WAITING, instance=True)
    check_transition(JobState.RUNNING, JobState.WAITING, instance=True)  # retried on its own


def test_every_refused_change_says_what_is_allowed() -> None:
    refused = [
        (old, new)
        for old, new in itertools.product(JobState, JobState)
        if new not in JOB_TRANSITIONS[old]
    ]
    assert (JobState.FAILED, JobState.RUNNING) in refused
    for old, new in refused:
        with pytest.raises(IllegalTransition) as error:
            check_transition(old, new)
        message = str(error.value)
        assert f"from {old} to {new}" in message
        if old.is_final:
            assert "it is final" in message
