"""Whether an attempt's outcome is decided once one of its instances ended.

The completion rules (a role's minFailed / minSucceeded, or every instance ended with none of
them firing) read the record and decide; the job machine (`machine.py`) calls them after each
end and records what they return. Kept apart so the machine's module holds its state changes
and these rules can be read, and changed, as the one place that decides an outcome.
"""

from __future__ import annotations

from server.jobs import exit_codes
from server.jobs.machine_events import _story
from server.jobs.policy import JobPolicy, Outcome
from server.shapes.job_record import Completion, InstanceView, JobRecord
from server.shapes.job_states import JobState


def completion_after(
    policy: JobPolicy, record: JobRecord, view: InstanceView, outcome: Outcome
) -> Completion | None:
    """The decision the rules reach now that `view` ended with `outcome`; None while none
    fires."""
    assert view.exit is not None
    role = policy.role(view.role)
    wanted = JobState.FAILED if outcome is Outcome.FAILED else JobState.SUCCEEDED
    count = sum(1 for v in record.instances if v.role == view.role and v.state is wanted)
    if role.reached(outcome, count):
        return Completion(
            message=f"{role.rule_message(outcome, count)} ({_story(view, view.exit)})",
            exit=view.exit,
            role=view.role,
            index=view.index,
        )
    if all(v.ended for v in record.instances):
        total = len(record.instances)
        failed = sum(1 for v in record.instances if v.state is JobState.FAILED)
        message = (
            f"CompletedTaskCount {total} has reached TotalTaskCount {total} "
            "and no minFailed / minSucceeded rule fired"
            + (f" ({failed} failed instance(s) were allowed)" if failed else "")
        )
        return Completion(message=message, exit=exit_codes.info(exit_codes.SUCCEEDED, message))
    return None
