"""The job engine: job and instance states, exit-code classification, completion and retry
policy, and the state machine that turns backend facts into a job's state.

The machine and its rules are pure logic (`machine.py`, `service_machine.py`, `policy.py`,
`exit_codes.py`, `launch.py`, `reconcile.py`), so `paigraph run` and the GraphQL service drive
the same machine. These modules do I/O: `runner.py` carries the machine's actions out on a
Backend, `journal.py` hands each change to be saved and announced, `recorder.py` saves and
announces it, and `service.py` runs the jobs of the API.
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
