"""What a pod says about its instance, read from the pod object as the API returns it (JSON).

Pure functions of one pod, one per question (scheduling, start problem, the main container's
run, disruption, lost), so each is tested on recorded pod objects; what each outcome becomes:
docs/kubernetes.md, Faults and their exit codes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from backends.kubernetes_names import MAIN_CONTAINER
from backends.kubernetes_start_order import START_ORDER_CONTAINER
from backends.start_gate import DEPENDENCY_FAILED

# the kubelet keeps trying these (with a back-off): they are waited out until a deadline
PULL_RETRIED = frozenset({"ErrImagePull", "ImagePullBackOff", "RegistryUnavailable"})
# these never change by themselves
PULL_ERRORS = frozenset({"InvalidImageName", "ErrImageNeverPull"})
IMAGE_NOT_PULLED = 254  # OpenPAI's ContainerImageNotExists
INIT_OOM = -1300  # OpenPAI's InitContainerDockerOOMKilled
NODE_LOST = -1001  # OpenPAI's PodNodeLost

# OpenPAI's completion code (FrameworkController's exit spec) for why Kubernetes ended a pod:
# the reason of its `DisruptionTarget` condition (Kubernetes 1.26+), else the pod's own reason.
DISRUPTION_CODES = {
    "TerminationByKubelet": -1000,  # node-pressure eviction (or graceful node shutdown)
    "EvictionByEvictionAPI": -1000,  # an API-initiated eviction: a drain
    "PreemptionByScheduler": -1003,  # room made for a pod of higher priority
    "DeletionByTaintManager": NODE_LOST,  # its node became unreachable (NoExecute taint)
    "DeletionByPodGC": NODE_LOST,  # bound to a node that no longer exists
}
POD_REASON_CODES = {
    "Evicted": -1000,
    "NodeLost": NODE_LOST,
    "Preempting": -1003,
    "DeadlineExceeded": -1004,
    "UnexpectedAdmissionError": -1006,
}
START_ERRORS = frozenset(
    {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}
)
NEVER_RAN = frozenset({"ContainerCannotRun", "StartError"})


@dataclass(frozen=True)
class Termination:
    """How the main container ended."""

    exit_code: int
    reason: str  # Completed, Error, OOMKilled ...
    message: str
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def oom_killed(self) -> bool:
        return self.reason == "OOMKilled"


@dataclass(frozen=True)
class PodFacts:
    name: str
    uid: str
    phase: str
    node: str
    pod_ip: str
    deleting: bool  # a deletion was asked for; the pod goes once its containers stopped
    scheduled: bool
    unschedulable: str | None  # the scheduler's message while it finds no node
    started_at: datetime | None  # when the main container started running
    terminated: Termination | None
    start_error: str | None  # the instance can never start: why
    lost: str | None  # the pod failed without its command ending (evicted, node lost ...)
    code: int | None = None  # OpenPAI's completion code for what Kubernetes did, if it did
    pull_waiting: str | None = None  # an image pull the kubelet retries: why it failed so far
    deletion_grace: int | None = None  # the grace period of the pending deletion, seconds
    disruption: str | None = None  # the DisruptionTarget condition, "reason: message"
    # its main container runs and passes its readinessProbe (the role's readiness check)
    ready: bool = False


@dataclass(frozen=True)
class Scheduling:
    """Whether the pod has a node, and the scheduler's message while it finds none."""

    scheduled: bool
    unschedulable: str | None = None


@dataclass(frozen=True)
class StartProblem:
    """Why the instance can never start (with OpenPAI's code when it has one), and an image
    pull the kubelet still retries."""

    error: str | None = None
    code: int | None = None
    pull_waiting: str | None = None


@dataclass(frozen=True)
class MainRun:
    """What the main container did: running since when, ended how, ready or not."""

    started_at: datetime | None = None
    terminated: Termination | None = None
    ready: bool = False


@dataclass(frozen=True)
class Disruption:
    """What Kubernetes did to the pod: its `DisruptionTarget` condition as "reason: message"
    and OpenPAI's completion code for it (or for the pod's own reason)."""

    text: str | None = None
    code: int | None = None


def pod_facts(pod: dict[str, Any]) -> PodFacts:
    """Everything the backend reads from one version of a pod, each question answered by its
    own function below."""
    meta = _field(pod, "metadata")
    status = _field(pod, "status")
    placed = scheduling(pod)
    start = start_problem(pod)
    run = main_run(pod)
    disruption = disruption_of(pod)
    return PodFacts(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        phase=status.get("phase") or "Pending",
        node=_field(pod, "spec").get("nodeName") or "",
        pod_ip=status.get("podIP") or "",
        deleting=bool(meta.get("deletionTimestamp")),
        scheduled=placed.scheduled,
        unschedulable=placed.unschedulable,
        started_at=run.started_at,
        terminated=run.terminated,
        start_error=start.error,
        lost=lost(pod, ended=run.terminated is not None or start.error is not None),
        code=start.code or disruption.code,
        pull_waiting=None if run.terminated else start.pull_waiting,
        deletion_grace=_deletion_grace(meta),
        disruption=disruption.text,
        ready=run.ready,
    )


def scheduling(pod: dict[str, Any]) -> Scheduling:
    """A pod is scheduled once bound to a node; until then the scheduler may say why not."""
    condition = _conditions(pod).get("PodScheduled") or {}
    if _field(pod, "spec").get("nodeName") or condition.get("status") == "True":
        return Scheduling(scheduled=True)
    if condition.get("reason") != "Unschedulable":
        return Scheduling(scheduled=False)  # not tried yet, or held back by a scheduling gate
    return Scheduling(False, condition.get("message") or "no node can run the pod")


def start_problem(pod: dict[str, Any]) -> StartProblem:
    """The first reason the instance can never start, in the order the kubelet gets to them:
    the init containers one by one, then the main container waiting or failing to run."""
    images = _images(pod)
    inits = _field(pod, "status").get("initContainerStatuses") or []
    main = _main_status(pod)
    main_state = _field(main, "state")
    problems = [
        *(_init_failure(init, images.get(init.get("name"), "")) for init in inits),
        _main_waiting_failure(_field(main_state, "waiting"), images.get(MAIN_CONTAINER, "")),
        _never_ran(main_state),
    ]
    error, code = next((p for p in problems if p is not None), (None, None))
    if error is not None:
        return StartProblem(error, code)
    return StartProblem(pull_waiting=_retried_pull([*inits, main], images))


def main_run(pod: dict[str, Any]) -> MainRun:
    """The main container's current run; an earlier one (`lastState`) is history. A container
    that never ran is a start problem, not a termination."""
    main = _main_status(pod)
    state = _field(main, "state")
    ready = main.get("ready") is True and "running" in state
    terminated = _termination(state)
    if terminated is None:
        return MainRun(_time(_field(state, "running").get("startedAt")), None, ready)
    start_time = _time(_field(pod, "status").get("startTime"))
    return MainRun(terminated.started_at or start_time, terminated, ready)


def disruption_of(pod: dict[str, Any]) -> Disruption:
    """Kubernetes 1.26+ says why it disrupts a pod in its `DisruptionTarget` condition; the
    pod's own reason (Evicted, OutOfcpu ...) gives the code when that says nothing known."""
    condition = _conditions(pod).get("DisruptionTarget") or {}
    reason = _field(pod, "status").get("reason") or ""
    code = POD_REASON_CODES.get(reason)
    if code is None and re.fullmatch(r"OutOf\S+", reason):
        code = -1002  # the kubelet refused a pod bound to a node without the room it asks
    if condition.get("status") != "True":
        return Disruption(code=code)
    why = condition.get("reason") or "DisruptionTarget"
    text = f"{why}: {condition['message']}" if condition.get("message") else why
    return Disruption(text, DISRUPTION_CODES.get(why) or code)


def lost(pod: dict[str, Any], *, ended: bool) -> str | None:
    """A pod that failed although its command neither ended nor failed to start was lost
    (evicted before it ran, its node gone ...): the pod's reason and message say how."""
    status = _field(pod, "status")
    if status.get("phase") != "Failed" or ended:
        return None
    why = status.get("reason") or "the pod failed"
    return f"{why}: {status['message']}" if status.get("message") else why


def _deletion_grace(meta: dict[str, Any]) -> int | None:
    """The grace period of the pending deletion, seconds (set with its deletionTimestamp)."""
    grace = meta.get("deletionGracePeriodSeconds")
    return int(grace) if grace is not None else None


def _conditions(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    conditions = _field(pod, "status").get("conditions") or []
    return {c.get("type"): c for c in conditions}


def _images(pod: dict[str, Any]) -> dict[str, str]:
    spec = _field(pod, "spec")
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    return {c.get("name"): c.get("image", "") for c in containers}


def _main_status(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = _field(pod, "status").get("containerStatuses") or []
    return next((c for c in statuses if c.get("name") == MAIN_CONTAINER), {})


def _init_failure(init: dict[str, Any], image: str) -> tuple[str, int | None] | None:
    """Why this init container keeps the commands from ever starting, with its code."""
    ended = _field(_field(init, "state"), "terminated")
    if ended.get("reason") == "OOMKilled":
        return (
            f"the init container {init.get('name')!r} ran out of memory (OOMKilled) before "
            "the commands could start",
            INIT_OOM,
        )
    if (
        init.get("name") == START_ORDER_CONTAINER
        and int(ended.get("exitCode", 0) or 0) == DEPENDENCY_FAILED
    ):  # what its role waits for did not hold in time: its own code and words
        said = (ended.get("message") or "").strip().splitlines()
        if not said:
            return "what its role waits for did not hold in time", DEPENDENCY_FAILED
        return said[-1].removeprefix("[paigraph start order] "), DEPENDENCY_FAILED
    problem = _init_problem(init, image)
    return (problem, None) if problem else None


def _main_waiting_failure(waiting: dict[str, Any], image: str) -> tuple[str, int | None] | None:
    problem = _waiting_problem(waiting, image)
    if problem is None:
        return None
    return problem, IMAGE_NOT_PULLED if waiting.get("reason") in PULL_ERRORS else None


def _never_ran(state: dict[str, Any]) -> tuple[str, int | None] | None:
    """The runtime could not run the main container's command at all."""
    ended = _field(state, "terminated")
    reason = ended.get("reason") or ""
    if reason not in NEVER_RAN:
        return None
    message = (ended.get("message") or "").strip()
    return f"{reason}: {message or 'the container could not run'}", None


def _termination(state: dict[str, Any]) -> Termination | None:
    """How the main container's command ended, if it ran and ended."""
    if "terminated" not in state:
        return None
    ended = _field(state, "terminated")
    reason = ended.get("reason") or ""
    if reason in NEVER_RAN:
        return None
    return Termination(
        exit_code=int(ended.get("exitCode", 0) or 0),
        reason=reason,
        message=(ended.get("message") or "").strip(),
        started_at=_time(ended.get("startedAt")),
        finished_at=_time(ended.get("finishedAt")),
    )


def _retried_pull(statuses: list[dict[str, Any]], images: dict[str, str]) -> str | None:
    """The first container, in start order, whose image pull the kubelet keeps retrying."""
    for container in statuses:
        waiting = _field(_field(container, "state"), "waiting")
        if waiting.get("reason") in PULL_RETRIED:
            return _pull_text(waiting, images.get(container.get("name", ""), ""))
    return None


def _field(obj: dict[str, Any], key: str) -> dict[str, Any]:
    """A part of an API object, which the API may leave out or write as null."""
    part: dict[str, Any] = obj.get(key) or {}
    return part


def _pull_text(waiting: dict[str, Any], image: str) -> str:
    message = (waiting.get("message") or "").strip() or "no details given"
    return f"image {image!r} cannot be pulled ({waiting.get('reason')}): {message}"


def _waiting_problem(waiting: dict[str, Any], image: str) -> str | None:
    reason = waiting.get("reason") or ""
    message = (waiting.get("message") or "").strip()
    if reason in PULL_ERRORS:
        return f"image {image!r} cannot be pulled ({reason}): {message or 'no details given'}"
    if reason in START_ERRORS:
        return f"{reason}: {message or 'no details given'}"
    return None


def _init_problem(init: dict[str, Any], image: str) -> str | None:
    state = _field(init, "state")
    problem = _waiting_problem(_field(state, "waiting"), image)
    if problem:
        return f"the init container {init.get('name')!r} cannot start: {problem}"
    ended = _field(state, "terminated")
    if ended and int(ended.get("exitCode", 0) or 0) != 0:
        message = (ended.get("message") or "").strip() or ended.get("reason") or "no output"
        return (
            f"prerequisites could not be put in place: the init container {init.get('name')!r}"
            f" exited with code {ended.get('exitCode')}: {message}"
        )
    return None


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None
