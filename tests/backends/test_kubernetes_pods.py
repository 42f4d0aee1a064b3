"""What the Kubernetes backend reads from a pod, on pods recorded as the API server and the
kubelet report them (tests/data/pods/): whether and why it is not scheduled, why it cannot
start, how its command ended, and what Kubernetes did to it (evicted, preempted, node lost)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from backends.kubernetes_pods import (
    Disruption,
    MainRun,
    PodFacts,
    Scheduling,
    StartProblem,
    Termination,
    disruption_of,
    lost,
    main_run,
    pod_facts,
    scheduling,
    start_problem,
)
from tests.fake_kube_api import validate

PODS = Path(__file__).parents[1] / "data" / "pods"
STARTED = datetime(2026, 11, 20, 9, 14, 10, tzinfo=UTC)
FINISHED = datetime(2026, 11, 20, 10, 2, 55, tzinfo=UTC)
EVICTED_MEMORY = (
    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 73540Ki. "
    "Container main was using 7712048Ki, request is 4Gi, has larger consumption of memory. "
)
EVICTED_DISK = (
    "The node was low on resource: ephemeral-storage. Threshold quantity: 4281826423, "
    "available: 3992428Ki. "
)


def load(name: str) -> dict[str, Any]:
    pod: dict[str, Any] = json.loads((PODS / f"{name}.json").read_text())
    return pod


def facts(worker: int, **changes: Any) -> PodFacts:
    """A bound, pending pod of the recordings with nothing to say, then `changes`."""
    base = PodFacts(
        name=f"alice-mnist-3-worker-{worker}",
        uid=f"0b7d9c1e-4d61-4f57-9a0c-1f3e2b5a7c{worker + 1:02x}",
        phase="Pending",
        node="gpu-node-2",
        pod_ip="10.244.2.17",
        deleting=False,
        scheduled=True,
        unschedulable=None,
        started_at=None,
        terminated=None,
        start_error=None,
        lost=None,
    )
    return replace(base, **changes)


def ended(code: int, reason: str, message: str = "") -> Termination:
    return Termination(code, reason, message, STARTED, FINISHED)


EXPECTED: dict[str, PodFacts] = {
    # scheduling
    "unschedulable": facts(
        0,
        node="",
        pod_ip="",
        scheduled=False,
        unschedulable=(
            "0/3 nodes are available: 1 node(s) had untolerated taint "
            "{node-role.kubernetes.io/control-plane: }, 2 Insufficient nvidia.com/gpu. "
            "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
            "2 No preemption victims found for incoming pod."
        ),
    ),
    # held back by a gate is not the scheduler failing to find a node
    "scheduling-gated": facts(1, node="", pod_ip="", scheduled=False),
    "just-created": facts(2, node="", pod_ip="", scheduled=False),
    "initializing": facts(3),
    # start errors
    "image-pull-backoff": facts(
        4,
        pull_waiting=(
            "image 'pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime' cannot be pulled "
            "(ImagePullBackOff): Back-off pulling image "
            '"pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime"'
        ),
    ),
    "invalid-image-name": facts(
        5,
        start_error=(
            "image 'pytorch/pytorch:2.3.1 cuda' cannot be pulled (InvalidImageName): Failed to "
            'apply default image tag "pytorch/pytorch:2.3.1 cuda": couldn\'t parse image name '
            '"pytorch/pytorch:2.3.1 cuda": invalid reference format'
        ),
        code=254,
    ),
    "create-container-config-error": facts(
        6, start_error='CreateContainerConfigError: secret "alice-registry" not found'
    ),
    "start-error": facts(
        7,
        phase="Failed",
        start_error=(
            "StartError: failed to create containerd task: failed to create shim task: OCI "
            "runtime create failed: runc create failed: unable to start container process: "
            'exec: "/bin/sh": stat /bin/sh: no such file or directory: unknown'
        ),
    ),
    "init-err-image-pull": facts(
        8,
        pull_waiting=(
            "image 'registry.example.com/paigraph/prepare:1.4' cannot be pulled (ErrImagePull): "
            'failed to pull and unpack image "registry.example.com/paigraph/prepare:1.4": '
            'failed to resolve reference "registry.example.com/paigraph/prepare:1.4": '
            "dial tcp: lookup registry.example.com: no such host"
        ),
    ),
    "init-oom-killed": facts(
        9,
        phase="Failed",
        start_error=(
            "the init container 'prepare' ran out of memory (OOMKilled) before the commands "
            "could start"
        ),
        code=-1300,
    ),
    "init-prepare-failed": facts(
        10,
        phase="Failed",
        start_error=(
            "prerequisites could not be put in place: the init container 'prepare' exited with "
            "code 22: fetching https://data.example.com/mnist.tar.gz\n"
            "curl: (22) The requested URL returned error: 404"
        ),
    ),
    "start-order-dependency-failed": facts(
        11, phase="Failed", start_error="role 'ps' was not ready within 600 seconds", code=241
    ),
    # running and ended
    "running-ready": facts(12, phase="Running", started_at=STARTED, ready=True),
    "running-not-ready": facts(13, phase="Running", started_at=STARTED),
    # the restart's start counts; the run before it (lastState) is history
    "restarted-after-error": facts(
        14,
        phase="Running",
        started_at=datetime(2026, 11, 20, 9, 31, 44, tzinfo=UTC),
        ready=True,
    ),
    "succeeded": facts(15, phase="Succeeded", started_at=STARTED, terminated=ended(0, "Completed")),
    "failed-exit-code": facts(
        16,
        phase="Failed",
        started_at=STARTED,
        terminated=ended(
            3,
            "Error",
            'Traceback (most recent call last):\n  File "train.py", line 12, in <module>\n'
            "FileNotFoundError: /data/mnist",
        ),
    ),
    "oom-killed": facts(17, phase="Failed", started_at=STARTED, terminated=ended(137, "OOMKilled")),
    "deadline-exceeded": facts(
        18, phase="Failed", started_at=STARTED, terminated=ended(137, "Error"), code=-1004
    ),
    # what Kubernetes did
    "evicted-node-pressure": facts(
        19,
        phase="Failed",
        started_at=STARTED,
        terminated=ended(
            137,
            "ContainerStatusUnknown",
            "The container could not be located when the pod was terminated",
        ),
        code=-1000,
        disruption=f"TerminationByKubelet: {EVICTED_MEMORY}",
    ),
    "evicted-before-start": facts(
        20,
        phase="Failed",
        lost=f"Evicted: {EVICTED_DISK}",
        code=-1000,
        disruption=f"TerminationByKubelet: {EVICTED_DISK}",
    ),
    "preempted-terminating": facts(
        21,
        phase="Running",
        started_at=STARTED,
        ready=True,
        deleting=True,
        deletion_grace=30,
        code=-1003,
        disruption=(
            "PreemptionByScheduler: default-scheduler: preempting to accommodate a higher "
            "priority pod"
        ),
    ),
    # the kubelet is gone: the pod keeps its last known state while it is deleted
    "node-unreachable-deleted": facts(
        22,
        phase="Running",
        started_at=STARTED,
        ready=True,
        deleting=True,
        deletion_grace=30,
        code=-1001,
        disruption="DeletionByTaintManager: Taint manager: deleting due to NoExecute taint",
    ),
    "node-gone-pod-gc": facts(
        23,
        phase="Failed",
        started_at=STARTED,
        ready=True,
        deleting=True,
        deletion_grace=30,
        lost="the pod failed",
        code=-1001,
        disruption="DeletionByPodGC: PodGC: node no longer exists",
    ),
    "rejected-out-of-gpu": facts(
        24,
        phase="Failed",
        pod_ip="",
        lost=(
            "OutOfnvidia.com/gpu: Pod was rejected: Node didn't have enough resource: "
            "nvidia.com/gpu, requested: 1, used: 1, capacity: 1"
        ),
        code=-1002,
    ),
    "unexpected-admission-error": facts(
        25,
        phase="Failed",
        pod_ip="",
        lost=(
            "UnexpectedAdmissionError: Allocate failed due to requested number of devices "
            "unavailable for nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected"
        ),
        code=-1006,
    ),
    "deleted-by-user-terminating": facts(
        26, phase="Running", started_at=STARTED, ready=True, deleting=True, deletion_grace=30
    ),
}


def test_every_recorded_pod_has_its_expectation() -> None:
    assert sorted(p.stem for p in PODS.glob("*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_pod_is_a_valid_pod(name: str) -> None:
    """The recordings hold no field the pinned Kubernetes version does not know."""
    validate(load(name))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_pod_facts(name: str) -> None:
    assert pod_facts(load(name)) == EXPECTED[name]


# Each question on its own: every recorded pod, with the answer each question gives for it.


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_scheduling(name: str) -> None:
    want = EXPECTED[name]
    assert scheduling(load(name)) == Scheduling(want.scheduled, want.unschedulable)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_start_problem(name: str) -> None:
    want = EXPECTED[name]
    code = want.code if want.start_error else None
    assert start_problem(load(name)) == StartProblem(want.start_error, code, want.pull_waiting)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_main_run(name: str) -> None:
    want = EXPECTED[name]
    assert main_run(load(name)) == MainRun(want.started_at, want.terminated, want.ready)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_disruption(name: str) -> None:
    want = EXPECTED[name]
    code = None if want.start_error else want.code
    assert disruption_of(load(name)) == Disruption(want.disruption, code)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_lost(name: str) -> None:
    want = EXPECTED[name]
    ended = want.terminated is not None or want.start_error is not None
    assert lost(load(name), ended=ended) == want.lost


def test_a_lost_pod_is_not_lost_once_its_command_ended() -> None:
    """The kubelet may fail a pod whose command already ended (deadline, eviction): the
    command's end is what happened, not a loss."""
    pod = load("evicted-before-start")
    assert lost(pod, ended=False) == f"Evicted: {EVICTED_DISK}"
    assert lost(pod, ended=True) is None


def test_an_init_container_failure_comes_before_the_main_container_s() -> None:
    """The kubelet runs init containers first: the first one's failure is why nothing started,
    even if the main container's image cannot be pulled either."""
    pod = load("init-oom-killed")
    pod["status"]["containerStatuses"][0]["state"] = {
        "waiting": {"reason": "InvalidImageName", "message": "invalid reference format"}
    }
    problem = start_problem(pod)
    assert problem.code == -1300
    assert problem.error is not None and "'prepare' ran out of memory" in problem.error


def test_an_image_pull_still_retried_is_no_start_problem_yet() -> None:
    """ErrImagePull and ImagePullBackOff may clear (a registry back up): they are waited out,
    while an image name that cannot be parsed never will."""
    assert start_problem(load("image-pull-backoff")).error is None
    assert start_problem(load("init-err-image-pull")).error is None
    assert start_problem(load("invalid-image-name")).pull_waiting is None


def test_a_disruption_target_decides_the_code_before_the_pod_s_reason() -> None:
    """Kubernetes 1.26+ names the disruption; a pod that says Evicted while the condition says
    its node went away was lost with its node."""
    pod = load("evicted-before-start")
    pod["status"]["conditions"][0]["reason"] = "DeletionByTaintManager"
    assert disruption_of(pod).code == -1001
    del pod["status"]["conditions"][0]
    assert disruption_of(pod) == Disruption(None, -1000)
