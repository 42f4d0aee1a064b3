"""The job engine: job and instance states, exit codes, completion and retry, and the state
machine that turns backend facts into a job's state.

The machine and its rules are pure, so `paigraph run` and the GraphQL service drive the same
one; `runner.py`, `journal.py`, `recorder.py` and `service.py` do the I/O (docs/architecture.md).
"""

from server.jobs.exit_codes import Behaviour, ExitInfo, ExitSpec, Reaction, classify, spec_for
from server.jobs.machine import (
    Action,
    Finish,
    JobMachine,
    LaunchAttempt,
    MachineSnapshot,
    ReleaseAttempt,
    RetryInstance,
    StopAttempt,
    events_for_report,
)
from server.jobs.policy import (
    JobPolicy,
    Outcome,
    RetryDecision,
    RetryPolicy,
    RolePolicy,
    effective_completion,
    job_policy,
    role_policy,
    role_policy_from_launch,
)
from server.shapes.job_record import AttemptRecord, Completion, InstanceView, JobRecord
from server.shapes.job_states import IllegalTransition, JobState, Transition, check_transition

__all__ = [
    "Action",
    "AttemptRecord",
    "Behaviour",
    "Completion",
    "ExitInfo",
    "ExitSpec",
    "Finish",
    "IllegalTransition",
    "InstanceView",
    "JobMachine",
    "JobPolicy",
    "JobRecord",
    "JobState",
    "LaunchAttempt",
    "MachineSnapshot",
    "Outcome",
    "Reaction",
    "ReleaseAttempt",
    "RetryDecision",
    "RetryInstance",
    "RetryPolicy",
    "RolePolicy",
    "StopAttempt",
    "Transition",
    "check_transition",
    "classify",
    "effective_completion",
    "events_for_report",
    "job_policy",
    "role_policy",
    "role_policy_from_launch",
    "spec_for",
]
