"""Init containers and pod DNS for the fake API server (tests/fake_kube_api.py), as Kubernetes
documents them. Pure functions of the fake's objects, called with its lock held.

Init containers ("Init Containers" in the Kubernetes docs):

- once the pod is bound, every init container waits (`PodInitializing`), as does the main
  container, the pod is `Pending` and its `Initialized` condition is False with reason
  `ContainersNotInitialized` (kubectl shows `Init:N/M`, N of M done);
- they run one at a time, in order, each to success before the next starts; the pod's
  containers start only after the last succeeded (`Initialized` turns True);
- an init container that fails fails the pod when its restartPolicy is Never (the backend's);
  otherwise the kubelet runs it again (restartCount grows, the failure is its `lastState`);
- a failed init container's termination message is the end of its output
  (`terminationMessagePolicy: FallbackToLogsOnError`).

Pod DNS ("DNS for Services and Pods"): a pod with `hostname` and `subdomain` selected by a
headless Service (clusterIP None) named like the subdomain, in the same namespace, is known
as `<hostname>.<subdomain>.<namespace>.svc.cluster.local` once it has an IP, and by the shorter
names the pod's DNS search path completes; only while Ready, unless the Service sets
`publishNotReadyAddresses`.
"""

from __future__ import annotations

from typing import Any

_MESSAGE_BYTES = 2048  # the most of a failed container's output kept as its message


def _initialized(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = pod["status"].get("initContainerStatuses") or []
    pending = [s["name"] for s in statuses if not _succeeded(s)]
    condition: dict[str, Any] = {"type": "Initialized", "status": "False" if pending else "True"}
    if pending:
        condition.update(
            reason="ContainersNotInitialized",
            message=f"containers with incomplete status: [{' '.join(pending)}]",
        )
    return condition


def _set_initialized(pod: dict[str, Any]) -> None:
    conditions = [c for c in pod["status"].get("conditions") or [] if c["type"] != "Initialized"]
    pod["status"]["conditions"] = [*conditions, _initialized(pod)]


def _succeeded(status: dict[str, Any]) -> bool:
    ended = (status.get("state") or {}).get("terminated")
    return bool(ended) and ended.get("exitCode") == 0


def start_initializing(pod: dict[str, Any]) -> None:
    """The pod was bound: its init containers, and so its main container, wait."""
    inits = pod["spec"].get("initContainers") or []
    if not inits:
        return
    waiting = {"waiting": {"reason": "PodInitializing"}}
    pod["status"]["initContainerStatuses"] = [
        {
            "name": c["name"],
            "image": c["image"],
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "state": dict(waiting),
        }
        for c in inits
    ]
    for status in pod["status"].get("containerStatuses") or []:
        status["state"] = dict(waiting)
    _set_initialized(pod)


def init_progress(pod: dict[str, Any]) -> str:
    """`Init:N/M` as kubectl shows a pod still initializing ("" once initialized)."""
    statuses = pod["status"].get("initContainerStatuses") or []
    done = sum(_succeeded(s) for s in statuses)
    return "" if done == len(statuses) else f"Init:{done}/{len(statuses)}"


def _status_of(pod: dict[str, Any], container: str) -> tuple[int, dict[str, Any]]:
    statuses = pod["status"].get("initContainerStatuses") or []
    for index, status in enumerate(statuses):
        if status["name"] == container:
            return index, status
    raise KeyError(f"pod {pod['metadata']['name']} has no init container {container!r}")


def start_init_container(pod: dict[str, Any], container: str, at: str) -> None:
    """Run `container`; every earlier init container must have succeeded."""
    index, status = _status_of(pod, container)
    statuses = pod["status"]["initContainerStatuses"]
    for earlier in statuses[:index]:
        if not _succeeded(earlier):
            raise RuntimeError(
                f"init container {container!r} cannot start before {earlier['name']!r} succeeded"
            )
    if pod["status"].get("phase") == "Failed":
        raise RuntimeError(f"pod {pod['metadata']['name']} failed: nothing starts in it")
    status["state"] = {"running": {"startedAt": at}}


def end_init_container(
    pod: dict[str, Any], container: str, code: int, output: str, at: str
) -> None:
    """`container` ended with `code`: the next may start, or the pod fails (restartPolicy
    Never), or it waits to run again."""
    _, status = _status_of(pod, container)
    running = (status.get("state") or {}).get("running")
    if running is None:
        raise RuntimeError(f"init container {container!r} is not running")
    ended: dict[str, Any] = {
        "exitCode": code,
        "reason": "Completed" if code == 0 else "Error",
        "startedAt": running["startedAt"],
        "finishedAt": at,
    }
    if code != 0 and output:
        ended["message"] = output.encode()[-_MESSAGE_BYTES:].decode(errors="replace")
    if code == 0:
        status.update(state={"terminated": ended}, ready=True)
    elif pod["spec"].get("restartPolicy", "Always") == "Never":
        status["state"] = {"terminated": ended}
        pod["status"]["phase"] = "Failed"
    else:
        status["restartCount"] += 1
        status["lastState"] = {"terminated": ended}
        status["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    _set_initialized(pod)


def pass_init_containers(pod: dict[str, Any]) -> None:
    """Before the main container starts: init containers not run by the test are told as
    having succeeded, in order; a failed one means the main container cannot start."""
    for status in pod["status"].get("initContainerStatuses") or []:
        if _succeeded(status):
            continue
        state = status.get("state") or {}
        if "terminated" in state:
            raise RuntimeError(f"init container {status['name']!r} failed: main cannot start")
        started = (state.get("running") or {}).get("startedAt") or pod["metadata"].get(
            "creationTimestamp", ""
        )
        ended = {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": started}
        status.update(state={"terminated": ended}, ready=True)
    if pod["status"].get("initContainerStatuses"):
        _set_initialized(pod)


def _selects(service: dict[str, Any], pod: dict[str, Any]) -> bool:
    selector = (service.get("spec") or {}).get("selector") or {}
    labels = pod["metadata"].get("labels") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def pod_dns_names(
    pods: list[dict[str, Any]], services: list[dict[str, Any]], namespace: str
) -> dict[str, str]:
    """Every name cluster DNS answers for these pods (see the module's rules) -> its IP."""
    names: dict[str, str] = {}
    headless = {
        s["metadata"]["name"]: s
        for s in services
        if (s.get("spec") or {}).get("clusterIP") == "None"
    }
    for pod in pods:
        spec, ip = pod["spec"], pod["status"].get("podIP")
        service = headless.get(spec.get("subdomain") or "")
        if not ip or not spec.get("hostname") or service is None or not _selects(service, pod):
            continue
        if pod["metadata"].get("deletionTimestamp"):
            continue
        if not _ready(pod) and not service["spec"].get("publishNotReadyAddresses"):
            continue
        short = f"{spec['hostname']}.{spec['subdomain']}"
        for name in (short, f"{short}.{namespace}", f"{short}.{namespace}.svc"):
            names[name] = ip
        names[f"{short}.{namespace}.svc.cluster.local"] = ip
    return names
