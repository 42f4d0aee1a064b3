"""What a pod says about its instance, read from the pod object as the API returns it (JSON).

The backend watches pods and turns each new version of one into `PodFacts`: scheduled or not
(and the scheduler's message when it cannot be), running since when, ended with which exit
code (OOM-killed or not), or unable to start at all (an image that cannot be pulled, an init
container that could not fetch the prerequisites or ran out of memory, a pod evicted before
its command ran); an image pull the kubelet still retries; a pending deletion and its grace
period; and OpenPAI's completion code for what Kubernetes did to the pod (its
`DisruptionTarget` condition or its reason: evicted, preempted, node lost ...).
Everything here is a pure function of one pod, so it is tested on plain dictionaries.
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


def pod_facts(pod: dict[str, Any]) -> PodFacts:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    scheduled_condition = conditions.get("PodScheduled") or {}
    node = spec.get("nodeName") or ""
    scheduled = bool(node) or scheduled_condition.get("status") == "True"
    unschedulable = None
    if not scheduled and scheduled_condition.get("reason") == "Unschedulable":
        unschedulable = scheduled_condition.get("message") or "no node can run the pod"
    images = {c.get("name"): c.get("image", "") for c in spec.get("containers") or []}
    images.update({c.get("name"): c.get("image", "") for c in spec.get("initContainers") or []})

    start_error = None
    code = None
    pull_waiting = None
    for init in status.get("initContainerStatuses") or []:
        ended = (init.get("state") or {}).get("terminated") or {}
        if ended.get("reason") == "OOMKilled" and start_error is None:
            start_error = (
                f"the init container {init.get('name')!r} ran out of memory (OOMKilled) before "
                "the commands could start"
            )
            code = INIT_OOM
        if (
            init.get("name") == START_ORDER_CONTAINER
            and int(ended.get("exitCode", 0) or 0) == DEPENDENCY_FAILED
            and start_error is None
        ):  # what its role waits for did not hold in time: its own code and words
            said = (ended.get("message") or "").strip().splitlines()
            start_error = (
                said[-1].removeprefix("[paigraph start order] ")
                if said
                else ("what its role waits for did not hold in time")
            )
            code = DEPENDENCY_FAILED
        waiting = (init.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in PULL_RETRIED:
            pull_waiting = pull_waiting or _pull_text(waiting, images.get(init.get("name"), ""))
        start_error = start_error or _init_problem(init, images.get(init.get("name"), ""))
    main: dict[str, Any] = next(
        (c for c in status.get("containerStatuses") or [] if c.get("name") == MAIN_CONTAINER), {}
    )
    state = main.get("state") or {}
    started_at = None
    terminated = None
    if "running" in state:
        started_at = _time((state["running"] or {}).get("startedAt"))
    if "waiting" in state:
        waiting = state["waiting"] or {}
        if waiting.get("reason") in PULL_RETRIED:
            pull_waiting = pull_waiting or _pull_text(waiting, images.get(MAIN_CONTAINER, ""))
        problem = _waiting_problem(waiting, images.get(MAIN_CONTAINER, ""))
        if problem and start_error is None:
            start_error = problem
            if waiting.get("reason") in PULL_ERRORS:
                code = IMAGE_NOT_PULLED
    if "terminated" in state:
        ended = state["terminated"] or {}
        reason = ended.get("reason") or ""
        message = (ended.get("message") or "").strip()
        if reason in NEVER_RAN:
            start_error = start_error or f"{reason}: {message or 'the container could not run'}"
        else:
            terminated = Termination(
                exit_code=int(ended.get("exitCode", 0) or 0),
                reason=reason,
                message=message,
                started_at=_time(ended.get("startedAt")),
                finished_at=_time(ended.get("finishedAt")),
            )
            started_at = terminated.started_at or _time(status.get("startTime"))
    disruption = conditions.get("DisruptionTarget") or {}
    disrupted = None
    if disruption.get("status") == "True":
        why = disruption.get("reason") or "DisruptionTarget"
        disrupted = f"{why}: {disruption['message']}" if disruption.get("message") else why
        code = code or DISRUPTION_CODES.get(why)
    code = code or POD_REASON_CODES.get(status.get("reason") or "")
    if code is None and re.fullmatch(r"OutOf\S+", status.get("reason") or ""):
        code = -1002  # the kubelet refused a pod bound to a node without the room it asks
    lost = None
    if status.get("phase") == "Failed" and terminated is None and start_error is None:
        why = status.get("reason") or "the pod failed"
        lost = f"{why}: {status['message']}" if status.get("message") else why
    grace = meta.get("deletionGracePeriodSeconds")
    return PodFacts(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        phase=status.get("phase") or "Pending",
        node=node,
        pod_ip=status.get("podIP") or "",
        deleting=bool(meta.get("deletionTimestamp")),
        scheduled=scheduled,
        unschedulable=unschedulable,
        started_at=started_at,
        terminated=terminated,
        start_error=start_error,
        lost=lost,
        code=code,
        pull_waiting=None if start_error or terminated else pull_waiting,
        deletion_grace=int(grace) if grace is not None else None,
        disruption=disrupted,
        ready=main.get("ready") is True and "running" in state,
    )


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
    state = init.get("state") or {}
    if "waiting" in state:
        problem = _waiting_problem(state["waiting"] or {}, image)
        if problem:
            return f"the init container {init.get('name')!r} cannot start: {problem}"
    ended = state.get("terminated")
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
