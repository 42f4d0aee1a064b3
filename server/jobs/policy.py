"""Completion and retry policy: when an attempt is decided, and whether another one follows.

Both follow OpenPAI's semantics (per-role minFailed / minSucceeded, retries by the exit code's
behaviour), plus a safety cap on attempts so that a local run always ends
(docs/architecture.md, The job machine's rules).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from backends.base import RoleLaunch
from server.protocol.model import JobSpec, TaskRole
from server.shapes.exit_info import Behaviour, ExitInfo

DISABLED = -1
DEFAULT_MAX_ATTEMPTS = 10  # the safety cap when the retry count itself sets no limit
DEFAULT_STOP_GRACE_SECONDS = 10.0
DEFAULT_CONFLICT_DELAY_SECONDS = 30.0  # pause before retrying a resource conflict

ALWAYS_RETRY = -2  # v1: run again whatever the outcome
RETRY_FAILURES = -1  # retry every failure, without limit


class Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- completion ------------------------------------------------------------------------------


class RolePolicy(_Frozen):
    """The effective completion rules and task retry count of one task role."""

    name: str
    instances: int
    min_failed: int = 1  # < 1: disabled
    min_succeeded: int = DISABLED  # < 1: disabled
    task_retry_count: int = 0  # used only when gang allocation is off

    def threshold(self, outcome: Outcome) -> int | None:
        """The count that ends the attempt for this outcome, or None when the rule is off."""
        value = self.min_failed if outcome is Outcome.FAILED else self.min_succeeded
        return value if value >= 1 else None

    def reached(self, outcome: Outcome, count: int) -> bool:
        threshold = self.threshold(outcome)
        return threshold is not None and count >= threshold

    def rule_message(self, outcome: Outcome, count: int) -> str:
        """E.g. 'FailedTaskCount 1 has reached MinFailedTaskCount 1 in role worker'."""
        word = "Failed" if outcome is Outcome.FAILED else "Succeeded"
        return (
            f"{word}TaskCount {count} has reached Min{word}TaskCount {self.threshold(outcome)} "
            f"in role {self.name}"
        )


def effective_completion(role: TaskRole) -> tuple[int, int]:
    """The role's (min_failed, min_succeeded) as the engine applies them; -1 means disabled.

    Each dialect's defaults are already in `role.completion` (protocol engine); what is left
    here is the controller's rule that any value below 1 disables the condition.
    """
    failed, succeeded = role.completion.min_failed, role.completion.min_succeeded
    return (failed if failed >= 1 else DISABLED, succeeded if succeeded >= 1 else DISABLED)


def role_policy(role: TaskRole) -> RolePolicy:
    min_failed, min_succeeded = effective_completion(role)
    return RolePolicy(
        name=role.name,
        instances=role.instances,
        min_failed=min_failed,
        min_succeeded=min_succeeded,
        task_retry_count=role.task_retry_count,
    )


def role_policy_from_launch(role: RoleLaunch, *, task_retry_count: int = 0) -> RolePolicy:
    """The same from a RoleLaunch, whose min_failed / min_succeeded carry effective values."""
    return RolePolicy(
        name=role.name,
        instances=role.instances,
        min_failed=role.min_failed if role.min_failed >= 1 else DISABLED,
        min_succeeded=role.min_succeeded if role.min_succeeded >= 1 else DISABLED,
        task_retry_count=task_retry_count,
    )


# --- retry -----------------------------------------------------------------------------------


class RetryDecision(_Frozen):
    retry: bool
    accountable: bool = False  # counts against the retry count (OpenPAI's "user" retries)
    delay_seconds: float = 0.0
    reason: str = ""  # empty when there is nothing worth saying (a plain success or a stop)


class RetryPolicy(_Frozen):
    """OpenPAI's retry policy (FrameworkController RetryPolicySpec) with a safety cap.

    `max_retry_count`: -2 retries always, even after a success (then `fancy` is off); -1
    retries every failure; N >= 0 retries unknown failures until N retries were counted. With
    `fancy` on, transient failures are retried without being counted and permanent ones are
    never retried. `max_attempts` bounds the total number of attempts, the first included, so
    -1, -2 and a failure that is always transient cannot loop forever.
    """

    max_retry_count: int = 0
    fancy: bool = True
    max_attempts: int = Field(default=DEFAULT_MAX_ATTEMPTS, ge=1)
    conflict_delay_seconds: float = DEFAULT_CONFLICT_DELAY_SECONDS

    @classmethod
    def for_job(cls, retry_count: int, *, max_attempts: int | None = None) -> RetryPolicy:
        """The job's policy: fancy unless the count is -2, as OpenPAI sets it."""
        return cls(
            max_retry_count=retry_count,
            fancy=retry_count != ALWAYS_RETRY,
            max_attempts=max_attempts or default_max_attempts(retry_count),
        )

    @classmethod
    def for_task(cls, task_retry_count: int, *, max_attempts: int | None = None) -> RetryPolicy:
        """An instance's own policy when gang allocation is off: always fancy."""
        count = max(task_retry_count, 0)
        return cls(
            max_retry_count=count,
            fancy=True,
            max_attempts=max_attempts or default_max_attempts(count),
        )

    def decide(self, ended: ExitInfo, *, attempts: int, accountable_retries: int) -> RetryDecision:
        """Whether to run again after an attempt that ended as `ended`.

        `attempts` is how many attempts have run so far (the one that just ended included);
        `accountable_retries` how many retries were counted against `max_retry_count`.
        """
        if ended.is_stop:
            return RetryDecision(retry=False)
        decision = self._wish(ended, accountable_retries)
        if decision.retry and attempts >= self.max_attempts:
            return RetryDecision(
                retry=False,
                reason=f"not run again: {attempts} attempt(s) made, the most allowed for this run "
                f"(max_attempts {self.max_attempts})",
            )
        return decision

    def _wish(self, ended: ExitInfo, accountable: int) -> RetryDecision:
        failed = not ended.succeeded
        kind = f"{ended.behaviour.lower().replace('_', ' ')} failure ({ended.phrase})"
        count = self.max_retry_count
        if self.fancy and failed:
            if ended.behaviour is Behaviour.TRANSIENT_CONFLICT:
                return RetryDecision(
                    retry=True,
                    delay_seconds=self.conflict_delay_seconds,
                    reason=f"{kind}: retried after {self.conflict_delay_seconds:g}s, not counted",
                )
            if ended.behaviour is Behaviour.TRANSIENT:
                return RetryDecision(retry=True, reason=f"{kind}: retried, not counted")
            if ended.behaviour is Behaviour.PERMANENT:
                return RetryDecision(retry=False, reason=f"{kind}: not retried")
        if count == ALWAYS_RETRY:
            return RetryDecision(
                retry=True,
                accountable=True,
                reason="retry count -2: run again whatever the outcome",
            )
        if not failed:
            return RetryDecision(retry=False)
        if count == RETRY_FAILURES:
            return RetryDecision(
                retry=True, accountable=True, reason=f"{kind}: retried (retry count -1, no limit)"
            )
        if accountable < count:
            return RetryDecision(
                retry=True,
                accountable=True,
                reason=f"{kind}: retry {accountable + 1} of {count}",
            )
        if count <= 0:
            return RetryDecision(retry=False, reason=f"{kind}: not retried (retry count 0)")
        return RetryDecision(retry=False, reason=f"{kind}: all {count} retries used")


def default_max_attempts(retry_count: int) -> int:
    """The safety cap: never below what an explicit retry count asks for."""
    return max(DEFAULT_MAX_ATTEMPTS, retry_count + 1)


# --- the whole job ---------------------------------------------------------------------------


class JobPolicy(_Frozen):
    """Everything the job machine needs to decide an attempt's outcome and what follows."""

    roles: tuple[RolePolicy, ...]
    retry: RetryPolicy = RetryPolicy()
    gang_allocation: bool = True
    stop_grace_seconds: float = DEFAULT_STOP_GRACE_SECONDS

    def role(self, name: str) -> RolePolicy:
        for role in self.roles:
            if role.name == name:
                return role
        raise KeyError(f"no task role {name!r} in this job")

    def task_retry(self, name: str) -> RetryPolicy | None:
        """An instance's own retry policy; None when instances are never retried on their own."""
        if self.gang_allocation:
            return None
        return RetryPolicy.for_task(
            self.role(name).task_retry_count, max_attempts=self.retry.max_attempts
        )

    @property
    def total_instances(self) -> int:
        return sum(r.instances for r in self.roles)


def gang_allocation(extras: Mapping[str, object]) -> bool:
    """OpenPAI allocates all instances together unless `extras.gangAllocation` is false."""
    return extras.get("gangAllocation") is not False


def job_policy(
    spec: JobSpec,
    *,
    max_attempts: int | None = None,
    stop_grace_seconds: float = DEFAULT_STOP_GRACE_SECONDS,
    conflict_delay_seconds: float = DEFAULT_CONFLICT_DELAY_SECONDS,
) -> JobPolicy:
    """The policy of a parsed job: its roles' completion rules, retry count and gang setting."""
    retry = RetryPolicy.for_job(spec.retry_count, max_attempts=max_attempts)
    return JobPolicy(
        roles=tuple(role_policy(r) for r in spec.task_roles),
        retry=retry.model_copy(update={"conflict_delay_seconds": conflict_delay_seconds}),
        gang_allocation=gang_allocation(spec.extras),
        stop_grace_seconds=stop_grace_seconds,
    )
