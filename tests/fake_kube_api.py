"""A fake Kubernetes API server for the fake-cluster tests (no cluster can run on this machine).

It speaks the REST API the official `kubernetes` client uses, on a loopback port: create, get,
list (label and field selectors), watch (`?watch=true` from a resource version, streamed line
by line), and delete of pods, services, configmaps and secrets; pod logs as the kubelet serves
them (tests/fake_kube_logs.py: timestamps, sinceTime, sinceSeconds, tailLines, limitBytes,
follow, rotation); exec in a running pod (tests/fake_kube_exec.py: the command runs on this
machine); events.
It validates every object it is given against the official schema of a pinned Kubernetes
version (`kubernetes-validate`) and refuses an invalid one with 422, as an API server would,
and deleting an object deletes its dependents (owner references), as the garbage collector
would.

What an API server refuses before storing an object is refused the same way here
(tests/fake_kube_admission.py): Pod Security admission by the namespace's `enforce` label
(`jobs` enforces baseline unless the test labels it otherwise), size limits, name rules, and
RBAC from the Role in deploy/kubernetes (its namespace served as `jobs`; `deployed_rules(True)`
adds the ClusterRole of its namespace-per-virtual-cluster variant), ResourceQuota admission
(tests/fake_kube_quota.py), and objects in a namespace that does not exist (only `jobs` does,
until a test labels another).

Until a test adds nodes (`add_node`), nothing schedules or runs pods: the test plays scheduler
and kubelet through the methods at the bottom (`schedule`, `run`, `exit`, `oom`,
`unschedulable`, ...). Once there are nodes, a scheduler binds pods as kube-scheduler would
(tests/fake_kube_nodes.py: capacity, schedulingGates, hostPort conflicts) and the test still
plays the kubelet. Every change is streamed to watchers as a MODIFIED event. A deletion of a
running pod ends its container with 143 (SIGTERM) before the pod goes, unless its node is lost:
then it stays Terminating until it is force-deleted (grace period 0), as with a kubelet gone.
The metrics API (`metrics.k8s.io/v1beta1` PodMetrics) answers 404, as on a cluster without
metrics-server, until a test gives figures for a pod (`pod_metrics`).
Lists are paginated (`limit`, `continue`), watches send BOOKMARKs, and a test can make the
server answer 429 or 5xx, or refuse pod creates with 403, as a real one does under load or
quota. Every request is recorded as (verb, resource), so tests can compare what the backend
did with the RBAC rules it is deployed with.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes_validate
import kubernetes_validate.utils
import yaml

from tests.fake_kube_admission import (
    ENFORCE,
    REQUEST_LIMIT,
    RoleRules,
    name_refusal,
    pod_security_refusal,
    size_refusal,
)
from tests.fake_kube_exec import ExecConnection, accept_key, choose_protocol
from tests.fake_kube_init import (
    end_init_container,
    pass_init_containers,
    pod_dns_names,
    start_init_container,
    start_initializing,
)
from tests.fake_kube_logs import PodLog, invalid_options
from tests.fake_kube_nodes import choose_node, node_object
from tests.fake_kube_quota import quota_refusal, quota_status
from tests.waiting import NotInTime, until_notified

KUBERNETES_VERSION = "1.33"  # the schema objects are validated against
TOKEN = "fake-token"
RESOURCES = {
    "pods": "Pod",
    "services": "Service",
    "configmaps": "ConfigMap",
    "secrets": "Secret",
    "networkpolicies": "NetworkPolicy",
    "nodes": "Node",
    "podgroups": "PodGroup",
    "resourcequotas": "ResourceQuota",
}
GROUPS = {"networkpolicies": "networking.k8s.io"}  # the others are the core group ""
# custom resources the fake serves (the API groups of Volcano and scheduler-plugins' PodGroup)
CUSTOM_GROUPS = ("scheduling.volcano.sh/v1beta1", "scheduling.x-k8s.io/v1alpha1")
_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>networking\.k8s\.io)/v1)/namespaces/(?P<ns>[^/]+)/"
    r"(?P<resource>pods|services|configmaps|secrets|events|networkpolicies|resourcequotas)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>log|exec))?$"
    r"|^/api/v1/(?P<cluster>nodes|pods|configmaps)(?:/(?P<node>[^/]+))?$"
    r"|^/apis/metrics\.k8s\.io/v1beta1/(?:namespaces/(?P<mns>[^/]+)/)?(?P<metrics>pods)$"
    r"|^/apis/(?P<cgroup>[^/]+/[^/]+)/namespaces/(?P<cns>[^/]+)/(?P<custom>podgroups)"
    r"(?:/(?P<cname>[^/]+))?$"
)
DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "kubernetes"
DEPLOYED_JOBS_NAMESPACE = "paigraph-jobs"  # served as `jobs` here
SERVICE_ACCOUNT = "system:serviceaccount:paigraph:paigraph"


PER_VIRTUAL_CLUSTER = DEPLOY / "namespace-per-virtual-cluster"


def deployed_rules(per_virtual_cluster: bool = False) -> RoleRules:
    """The Roles and ClusterRoles deploy/kubernetes grants the server; with
    `per_virtual_cluster`, also those of its namespace-per-virtual-cluster variant."""
    files = sorted(DEPLOY.glob("*.yaml"))
    if per_virtual_cluster:
        files += sorted(PER_VIRTUAL_CLUSTER.glob("*.yaml"))
    return RoleRules(files, {DEPLOYED_JOBS_NAMESPACE: "jobs"})


def api_version(resource: str) -> str:
    group = GROUPS.get(resource)
    return f"{group}/v1" if group else "v1"


# kubernetes-validate reads its JSON schemas from disk on every call; read each once.
kubernetes_validate.utils.schema_contents = functools.cache(
    kubernetes_validate.utils.schema_contents
)


def validate(obj: dict[str, Any]) -> None:
    """Raise kubernetes_validate.ValidationError unless `obj` fits the pinned version's schema
    (strict: no field the schema does not know)."""
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def now(later: float = 0) -> str:
    """The time as the API writes it, `later` seconds from now."""
    return datetime.fromtimestamp(time.time() + later, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeKubeAPI:
    """The server's state and the test's handles on it. Use as a context manager."""

    def __init__(self, *, validate: bool = True, rbac: RoleRules | None = None) -> None:
        self.validate = validate
        self.rbac = rbac if rbac is not None else deployed_rules()
        self.namespace_labels: dict[str, dict[str, str]] = {"jobs": {ENFORCE: "baseline"}}
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.history: list[tuple[int, str, str, dict[str, Any]]] = []  # rv, resource, type, obj
        self.logs: dict[str, PodLog] = {}  # pod name -> its main container's log
        self.open_log_streams = 0  # log requests being answered now
        # a kubelet played by a test may give bound pods their address (its sandbox's, as a
        # CNI plugin does): called with the pod, under the lock; None: made-up addresses
        self.allocate_ip: Callable[[dict[str, Any]], str] | None = None
        self.events: list[dict[str, Any]] = []
        self.calls: list[tuple[str, str]] = []
        self.execs: list[tuple[str, list[str], bool]] = []  # pod, command, tty of each exec
        self.version = 100
        self.lock = threading.Condition()
        self.stopping = False
        # faults the test injects (see `away`, `break_watches`, `expire_watches`)
        self.answering = True
        self.watch_epoch = 0  # a watch ends, cut off, when this moves on
        self.compacted = 0  # watches from a resource version before this get 410 Gone
        self.refusals: list[tuple[str, str, int, str]] = []  # verb, resource, code, message
        self.bookmark_seconds = 1.0  # an idle watch that asked for bookmarks gets one this often
        self.page_size: int | None = None  # when set, lists are cut to pages of this size
        self.lost_nodes: set[str] = set()  # nodes whose kubelet is gone
        self.scheduler_paused = False  # the scheduler binds nothing meanwhile (down, or busy)
        self.continued = 0  # list pages asked for with a continue token
        # PodMetrics by (namespace, pod): container name -> (cpu, memory) quantities; None:
        # the cluster serves no metrics API
        self.metrics: dict[tuple[str, str], dict[str, tuple[str, str]]] | None = None
        self.server = _Server(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeKubeAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.stopping = True
            self.lock.notify_all()
        self.server.shutdown()
        self.server.server_close()

    # --- faults ------------------------------------------------------------------------------

    def break_watches(self) -> None:
        """Cut every open watch stream mid-way, as a dropped connection does."""
        with self.lock:
            self.watch_epoch += 1
            self.lock.notify_all()

    def expire_watches(self) -> None:
        """Compact the history: open watches end with a 410 Gone ERROR event and a watch from
        any resource version seen so far is answered the same, as after etcd compaction."""
        with self.lock:
            self.version += 1
            self.compacted = self.version
            self.lock.notify_all()

    @contextmanager
    def away(self) -> Iterator[None]:
        """The API server goes away: open watches are cut and every request is dropped without
        an answer until the block ends. The pods go on meanwhile (the test may end them)."""
        with self.lock:
            self.answering = False
        self.break_watches()
        try:
            yield
        finally:
            with self.lock:
                self.answering = True

    def label_namespace(self, namespace: str, **labels: str) -> None:
        """Set the namespace's labels (e.g. `{ENFORCE: "restricted"}`), as `kubectl label`; a
        namespace not seen before is created (only `jobs` exists at first: objects in any other
        namespace are refused with 404, as the API server refuses them)."""
        with self.lock:
            self.namespace_labels.setdefault(namespace, {}).update(labels)

    def add_quota(self, namespace: str, name: str, hard: dict[str, str]) -> None:
        """A ResourceQuota the cluster's administrator made (as `kubectl create quota`)."""
        with self.lock:
            self.namespace_labels.setdefault(namespace, {})
            quota = {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": now(),
                },
                "spec": {"hard": dict(hard)},
            }
            self.objects[("resourcequotas", namespace, name)] = quota
            self._bump("resourcequotas", "ADDED", quota)

    def refuse(
        self, verb: str, resource: str, code: int, message: str = "", times: int = 1
    ) -> None:
        """Answer the next `times` requests of (verb, resource) with `code`: 429 (with a
        Retry-After of 1 s, as API Priority and Fairness does), 500/503, or 403 (with the
        message, e.g. a ResourceQuota's or PodSecurity admission's refusal)."""
        with self.lock:
            self.refusals += [(verb, resource, code, message)] * times

    def _refusal(self, verb: str, resource: str) -> tuple[int, str] | None:
        with self.lock:
            for n, (v, r, code, message) in enumerate(self.refusals):
                if (v, r) == (verb, resource):
                    del self.refusals[n]
                    return code, message
        return None

    def kubeconfig(self, path: Path, namespace: str = "jobs") -> Path:
        """A kubeconfig file pointing at this server, with a bearer token."""
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "tester", "user": {"token": TOKEN}}],
                    "contexts": [
                        {
                            "name": "fake",
                            "context": {
                                "cluster": "fake",
                                "user": "tester",
                                "namespace": namespace,
                            },
                        }
                    ],
                    "current-context": "fake",
                }
            )
        )
        return path

    # --- the store ---------------------------------------------------------------------------

    def _bump(self, resource: str, kind: str, obj: dict[str, Any]) -> None:
        """Record a change (the lock is held) and wake the watchers."""
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.history.append((self.version, resource, kind, copy.deepcopy(obj)))
        self.lock.notify_all()

    def create(self, resource: str, namespace: str, body: dict[str, Any]) -> tuple[int, dict]:
        kind = RESOURCES[resource]
        custom = resource == "podgroups"
        expected = api_version(resource)
        if body.get("kind") != kind or (not custom and body.get("apiVersion") != expected):
            return 400, _status(400, "BadRequest", f"expected a {expected} {kind}")
        if custom:
            if body.get("apiVersion") not in CUSTOM_GROUPS:
                return 404, _status(404, "NotFound", f"no API group {body.get('apiVersion')}")
            if not isinstance((body.get("spec") or {}).get("minMember"), int):
                return 422, _status(422, "Invalid", "PodGroup.spec.minMember: Required value")
        elif self.validate:
            try:
                validate(body)
            except kubernetes_validate.ValidationError as exc:
                return 422, _status(422, "Invalid", f"{kind} is invalid: {exc.message}")
        with self.lock:
            if namespace not in self.namespace_labels:
                return 404, _status(404, "NotFound", f'namespaces "{namespace}" not found')
        name_problem = name_refusal(resource, body)
        if name_problem:
            name = body.get("metadata", {}).get("name", "")
            return 422, _status(422, "Invalid", f'{kind} "{name}" is invalid: {name_problem}')
        if resource == "pods":
            with self.lock:
                labels = dict(self.namespace_labels.get(namespace, {}))
            forbidden = pod_security_refusal(body, labels)
            if forbidden:
                return 403, _status(403, "Forbidden", forbidden)
        too_big = size_refusal(resource, body)
        if too_big:
            code, message = too_big
            reason = "Invalid" if code == 422 else "RequestEntityTooLarge"
            return code, _status(code, reason, f"{kind} is invalid: {message}")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        name = meta.get("name", "")
        with self.lock:
            if (resource, namespace, name) in self.objects:
                return 409, _status(409, "AlreadyExists", f'{resource} "{name}" already exists')
            if resource == "pods":
                refused = quota_refusal(
                    body, self.list("resourcequotas", namespace), self.list("pods", namespace)
                )
                if refused:
                    return 403, _status(403, "Forbidden", refused)
            meta.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=now())
            if resource == "secrets":
                data = {
                    k: base64.b64encode(v.encode()).decode()
                    for k, v in obj.pop("stringData", {}).items()
                }
                obj["data"] = {**obj.get("data", {}), **data}
            if resource == "pods":
                obj["status"] = {"phase": "Pending", "conditions": []}
                obj["spec"].setdefault("terminationGracePeriodSeconds", 30)
                if obj["spec"].get("schedulingGates"):
                    # Pod Scheduling Readiness: a gated pod says why it is not scheduled
                    obj["status"]["conditions"] = [_gated_condition()]
                self.logs[name] = PodLog()
            self.objects[(resource, namespace, name)] = obj
            self._bump(resource, "ADDED", obj)
            created = copy.deepcopy(obj)
            self._schedule()
            return 201, created

    def patch(
        self, namespace: str, name: str, content_type: str, body: Any
    ) -> tuple[int, dict[str, Any]]:
        """Patch a pod. Of a pod's spec only the scheduling gates may change, and only by
        removing gates (Pod Scheduling Readiness); anything else in spec is immutable (422).
        JSON patch (RFC 6902), merge patch and strategic merge patch are understood for
        `spec.schedulingGates`, `metadata.labels` and `metadata.annotations`."""
        with self.lock:
            pod = self.objects.get(("pods", namespace, name))
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found')
            before = list(pod["spec"].get("schedulingGates") or [])
            meta, gates = _patched(pod, content_type, body)
            if gates is None:
                return 422, _status(
                    422,
                    "Invalid",
                    f'Pod "{name}" is invalid: spec: Forbidden: pod updates may '
                    "not change fields other than the scheduling gates",
                )
            if not {g["name"] for g in gates} <= {g["name"] for g in before}:
                return 422, _status(
                    422,
                    "Invalid",
                    f'Pod "{name}" is invalid: spec.schedulingGates: Forbidden: '
                    "only deletion is allowed, but found new scheduling gate",
                )
            pod["metadata"].update(meta)
            if gates:
                pod["spec"]["schedulingGates"] = gates
            else:
                pod["spec"].pop("schedulingGates", None)
                if before:
                    pod["status"]["conditions"] = [
                        c
                        for c in pod["status"]["conditions"]
                        if c.get("reason") != "SchedulingGated"
                    ]
            self._bump("pods", "MODIFIED", pod)
            patched = copy.deepcopy(pod)
            self._schedule()
            return 200, patched

    def patch_config_map(self, namespace: str, name: str, body: Any) -> tuple[int, dict[str, Any]]:
        """Merge a patch's `data` into a ConfigMap (start order: the verdicts it carries)."""
        with self.lock:
            obj = self.objects.get(("configmaps", namespace, name))
            if obj is None:
                return 404, _status(404, "NotFound", f'configmaps "{name}" not found')
            obj.setdefault("data", {}).update((body or {}).get("data") or {})
            self._bump("configmaps", "MODIFIED", obj)
            return 200, copy.deepcopy(obj)

    def delete(
        self, resource: str, namespace: str, name: str, grace: int | None = None
    ) -> tuple[int, dict]:
        """Delete an object (and its dependents). A pod bound to a lost node is only marked
        for deletion (deletionTimestamp = now + grace, as graceful deletion does) and stays
        Terminating, since no kubelet confirms its end, unless the grace period is 0 (a force
        delete removes it from the store at once)."""
        with self.lock:
            obj = self.objects.get((resource, namespace, name))
            if obj is None:
                return 404, _status(404, "NotFound", f'{resource} "{name}" not found')
            if resource == "pods" and obj["spec"].get("nodeName") in self.lost_nodes and grace != 0:
                if not obj["metadata"].get("deletionTimestamp"):
                    seconds = obj["spec"].get("terminationGracePeriodSeconds", 30)
                    seconds = seconds if grace is None else grace
                    obj["metadata"]["deletionTimestamp"] = now(seconds)
                    obj["metadata"]["deletionGracePeriodSeconds"] = seconds
                    self._bump(resource, "MODIFIED", obj)
                return 200, copy.deepcopy(obj)
            if resource == "pods" and obj["spec"].get("nodeName") not in self.lost_nodes:
                main = _main_status(obj)
                if main is not None and "running" in main["state"]:
                    started = main["state"]["running"]["startedAt"]
                    main["state"] = {
                        "terminated": {
                            "exitCode": 143,
                            "reason": "Error",
                            "startedAt": started,
                            "finishedAt": now(),
                        }
                    }
                    obj["status"]["phase"] = "Failed"
                    obj["metadata"]["deletionTimestamp"] = now()
                    self._log_ended(name)
                    self._bump(resource, "MODIFIED", obj)
            del self.objects[(resource, namespace, name)]
            self._bump(resource, "DELETED", obj)
            if resource == "pods":
                self._schedule()  # its room is free again
            uid = obj["metadata"]["uid"]
            dependents = [
                key
                for key, other in self.objects.items()
                if any(r.get("uid") == uid for r in other["metadata"].get("ownerReferences", []))
            ]
        for dependent in dependents:
            self.delete(*dependent)
        return 200, _status(200, "Success", "deleted")

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.get((resource, namespace, name))
            if obj is not None and resource == "resourcequotas":
                obj = {**obj, "status": quota_status(obj, self.list("pods", namespace))}
            return copy.deepcopy(obj) if obj else None

    def patch_quota(self, namespace: str, name: str, body: Any) -> tuple[int, dict[str, Any]]:
        """A merge (or strategic merge) patch of a ResourceQuota's `spec.hard`: keys given are
        set, keys given as null removed; nothing else of it may change here."""
        with self.lock:
            quota = self.objects.get(("resourcequotas", namespace, name))
            if quota is None:
                return 404, _status(404, "NotFound", f'resourcequotas "{name}" not found')
            if not isinstance(body, dict) or set(body) - {"spec", "apiVersion", "kind"}:
                return 422, _status(422, "Invalid", "only spec.hard of a quota may be patched")
            changes = (body.get("spec") or {}).get("hard") or {}
            hard = {**quota["spec"].get("hard", {}), **changes}
            quota["spec"]["hard"] = {k: v for k, v in hard.items() if v is not None}
            self._bump("resourcequotas", "MODIFIED", quota)
        return 200, self.get("resourcequotas", namespace, name) or {}

    def list(
        self, resource: str, namespace: str | None, selector: str = ""
    ) -> list[dict[str, Any]]:
        """Matching objects in one namespace (None: every namespace), ordered by name."""
        with self.lock:
            return sorted(
                (
                    copy.deepcopy(obj)
                    for (res, ns, _), obj in self.objects.items()
                    if res == resource and namespace in (None, ns) and _matches(obj, selector)
                ),
                key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]),
            )

    def page(
        self, resource: str, namespace: str | None, query: dict[str, str]
    ) -> tuple[int, dict[str, Any]]:
        """One page of a list, as the API server's chunked lists: at most `limit` items, and a
        `continue` token while more remain, which resumes after the last item given; a token
        older than the compacted history is refused with 410 Expired."""
        items = self.list(resource, namespace, query.get("labelSelector", ""))
        token = query.get("continue")
        with self.lock:
            version = str(self.version)
            compacted = self.compacted
        if token:
            try:
                state = json.loads(base64.b64decode(token))
                after, version = state["after"], state["rv"]
            except (ValueError, KeyError, TypeError):
                return 400, _status(400, "BadRequest", "invalid continue token")
            if int(version) < compacted:
                return 410, _status(410, "Expired", "the continue token is too old; list again")
            with self.lock:
                self.continued += 1
            items = [i for i in items if _position(i) > tuple(after)]
        limit = int(query.get("limit") or 0)
        if limit and self.page_size:  # a server may answer with fewer items than the limit
            limit = min(limit, self.page_size)
        meta: dict[str, Any] = {"resourceVersion": version}
        if limit and len(items) > limit:
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
            last = {"after": list(_position(items[-1])), "rv": version}
            meta["continue"] = base64.b64encode(json.dumps(last).encode()).decode()
        kind = RESOURCES[resource] + "List"
        listed = {"kind": kind, "apiVersion": api_version(resource), "metadata": meta}
        return 200, {**listed, "items": items}

    # --- playing scheduler and kubelet ---------------------------------------------------------

    def pods(self, namespace: str = "jobs") -> list[dict[str, Any]]:
        return self.list("pods", namespace)

    def pod_names(self, namespace: str = "jobs") -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.pods(namespace))

    def wait_for_pods(self, count: int, namespace: str = "jobs", timeout: float = 10) -> list[str]:
        def names() -> list[str]:
            return sorted(
                name for (res, ns, name) in self.objects if res == "pods" and ns == namespace
            )

        def enough() -> list[str]:
            found = names()
            return found if len(found) >= count else []

        try:
            return until_notified(self.lock, enough, f"{count} pod(s) in {namespace}", timeout)
        except NotInTime as late:
            with self.lock:
                raise NotInTime(f"{late} (there are {names()})") from None

    @contextmanager
    def _pod(self, name: str, namespace: str) -> Iterator[dict[str, Any]]:
        with self.lock:
            obj = self.objects[("pods", namespace, name)]
            yield obj
            self._bump("pods", "MODIFIED", obj)

    def schedule(
        self, name: str, node: str = "node-1", ip: str = "", namespace: str = "jobs"
    ) -> None:
        """The scheduler bound the pod and the kubelet gave it an address; its container waits."""
        with self._pod(name, namespace) as pod:
            pod["spec"]["nodeName"] = node
            status = pod["status"]
            status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
            status["podIP"] = ip or self._pod_ip(pod)
            status["hostIP"] = "192.168.0.10"
            status["containerStatuses"] = [
                {
                    "name": "main",
                    "image": pod["spec"]["containers"][0]["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "ContainerCreating"}},
                }
            ]
            start_initializing(pod)

    def _pod_ip(self, pod: dict[str, Any]) -> str:
        """The address the pod's network gives it when bound (the lock is held)."""
        if self.allocate_ip is not None:
            return self.allocate_ip(pod)
        return f"10.1.{len(self.objects) % 250}.{(self.version % 250) + 1}"

    def unschedulable(self, name: str, message: str, namespace: str = "jobs") -> None:
        with self._pod(name, namespace) as pod:
            pod["status"]["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                }
            ]

    def run(self, name: str, namespace: str = "jobs") -> None:
        """The main container starts. Init containers the test did not play (init_start,
        init_exit) are told as having succeeded first; one that failed forbids it."""
        with self._pod(name, namespace) as pod:
            pass_init_containers(pod)
            pod["status"]["phase"] = "Running"
            _main_status(pod)["state"] = {"running": {"startedAt": now()}}

    def exit(
        self, name: str, code: int, reason: str | None = None, namespace: str = "jobs"
    ) -> None:
        """The main container ended with `code` (running first if it never ran)."""
        with self._pod(name, namespace) as pod:
            main = _main_status(pod)
            started = (main["state"].get("running") or {}).get("startedAt", now())
            main["state"] = {
                "terminated": {
                    "exitCode": code,
                    "reason": reason or ("Completed" if code == 0 else "Error"),
                    "startedAt": started,
                    "finishedAt": now(),
                }
            }
            pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
            self._log_ended(name)

    def oom(self, name: str, namespace: str = "jobs") -> None:
        self.exit(name, 137, "OOMKilled", namespace)

    def waiting(self, name: str, reason: str, message: str, namespace: str = "jobs") -> None:
        """The main container cannot start (ErrImagePull, CreateContainerConfigError ...)."""
        with self._pod(name, namespace) as pod:
            _main_status(pod)["state"] = {"waiting": {"reason": reason, "message": message}}

    def init_failed(
        self,
        name: str,
        code: int,
        output: str,
        namespace: str = "jobs",
        container: str = "prepare",
    ) -> None:
        with self._pod(name, namespace) as pod:
            pod["status"]["phase"] = "Failed"
            pod["status"]["initContainerStatuses"] = [
                {
                    "name": container,
                    "image": pod["spec"]["initContainers"][0]["image"],
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {"exitCode": code, "reason": "Error", "message": output}
                    },
                }
            ]

    def init_start(self, name: str, container: str, namespace: str = "jobs") -> None:
        """The kubelet starts the pod's init container `container` (each earlier one must have
        succeeded: tests/fake_kube_init.py)."""
        with self._pod(name, namespace) as pod:
            start_init_container(pod, container, now())

    def init_exit(
        self, name: str, container: str, code: int, output: str = "", namespace: str = "jobs"
    ) -> None:
        """The init container `container` ended with `code`, having printed `output`."""
        with self._pod(name, namespace) as pod:
            end_init_container(pod, container, code, output, now())

    def dns_names(self, namespace: str = "jobs") -> dict[str, str]:
        """The names cluster DNS answers for pods in `namespace`, and their addresses."""
        with self.lock:
            pods = [o for (r, ns, _), o in self.objects.items() if r == "pods" and ns == namespace]
            services = [
                o for (r, ns, _), o in self.objects.items() if r == "services" and ns == namespace
            ]
            return pod_dns_names(pods, services, namespace)

    def set_pod_ip(self, name: str, ip: str, namespace: str = "jobs") -> None:
        """The kubelet gave the pod's sandbox this address (it reports it as podIP)."""
        with self._pod(name, namespace) as pod:
            pod["status"]["podIP"] = ip
            pod["status"]["podIPs"] = [{"ip": ip}]

    def write_log(self, name: str, text: str) -> None:
        """The container printed `text` (its lines share one timestamp)."""
        with self.lock:
            self.logs[name].write(text.encode())
            self.lock.notify_all()

    def rotate_log(self, name: str) -> None:
        """The kubelet rotates the pod's log file (tests/fake_kube_logs: what that does to
        readers)."""
        with self.lock:
            self.logs[name].rotate()
            self.lock.notify_all()

    def drop_log_streams(self, name: str) -> None:
        """Cut the pod's open log streams mid-way, as a dropped connection does."""
        with self.lock:
            self.logs[name].cuts += 1
            self.lock.notify_all()

    def add_event(self, pod: str, message: str, namespace: str = "jobs") -> None:
        with self.lock:
            self.events.append(
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "type": "Warning",
                    "reason": "FailedScheduling",
                    "message": message,
                    "metadata": {"name": f"{pod}.{len(self.events)}", "namespace": namespace},
                    "involvedObject": {"kind": "Pod", "name": pod, "namespace": namespace},
                }
            )

    # --- nodes, the scheduler, and the kubelet's endings ----------------------------------------

    def pod_metrics(
        self, name: str, cpu: str, memory: str, namespace: str = "jobs", container: str = "main"
    ) -> None:
        """The metrics API serves, and says the pod's container uses `cpu` and `memory`
        (quantities: "250m", "100Mi") now."""
        with self.lock:
            if self.metrics is None:
                self.metrics = {}
            self.metrics.setdefault((namespace, name), {})[container] = (cpu, memory)

    def _pod_metrics_list(self, namespace: str | None, selector: str) -> tuple[int, dict[str, Any]]:
        """The PodMetrics of one namespace, or of every one (None)."""
        with self.lock:
            if self.metrics is None:
                return 404, _status(
                    404, "NotFound", "the server could not find the requested resource"
                )
            items = []
            for (ns, name), containers in self.metrics.items():
                pod = self.objects.get(("pods", ns, name))
                if namespace not in (None, ns) or pod is None or not _matches(pod, selector):
                    continue
                items.append(
                    {
                        "metadata": {
                            "name": name,
                            "namespace": ns,
                            "labels": pod["metadata"].get("labels", {}),
                        },
                        "timestamp": now(),
                        "window": "15s",
                        "containers": [
                            {"name": c, "usage": {"cpu": cpu, "memory": memory}}
                            for c, (cpu, memory) in containers.items()
                        ],
                    }
                )
        listing = {"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1"}
        return 200, {**listing, "metadata": {}, "items": items}

    def add_node(self, name: str, **capacity: Any) -> None:
        """Register a Ready node (see fake_kube_nodes.node_object); from the first node on,
        the fake schedules pods itself."""
        with self.lock:
            node = node_object(name, **capacity)
            node["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=now())
            self.objects[("nodes", "", name)] = node
            self._bump("nodes", "ADDED", node)
            self._schedule()

    def pause_scheduler(self, paused: bool = True) -> None:
        """Stop (or resume) binding pods, as when kube-scheduler is down or far behind."""
        with self.lock:
            self.scheduler_paused = paused
            self._schedule()

    def _nodes(self) -> list[dict[str, Any]]:
        return [o for (res, _, _), o in self.objects.items() if res == "nodes"]

    def _schedule(self) -> None:
        """Bind every pod that can be bound, oldest first, as kube-scheduler would (the lock is
        held). Gated, bound and terminating pods are left alone; a pod that fits nowhere gets
        `PodScheduled=False` with reason `Unschedulable` and the scheduler's message."""
        nodes = self._nodes()
        if not nodes or self.scheduler_paused:
            return
        pods = [o for (res, _, _), o in self.objects.items() if res == "pods"]
        for pod in sorted(pods, key=lambda p: int(p["metadata"]["resourceVersion"])):
            spec, meta = pod["spec"], pod["metadata"]
            if spec.get("nodeName") or spec.get("schedulingGates") or meta.get("deletionTimestamp"):
                continue
            if spec.get("schedulerName", "default-scheduler") != "default-scheduler":
                continue  # another scheduler's pod (Volcano's, ...): not ours to bind
            node, why = choose_node(pod, nodes, pods)
            if node is None:
                condition = {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": why,
                }
                if pod["status"]["conditions"] != [condition]:
                    pod["status"]["conditions"] = [condition]
                    self._bump("pods", "MODIFIED", pod)
                continue
            self._bind(pod, node)

    def _bind(self, pod: dict[str, Any], node: str, ip: str = "") -> None:
        pod["spec"]["nodeName"] = node
        status = pod["status"]
        status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
        status["podIP"] = ip or self._pod_ip(pod)
        status["hostIP"] = "192.168.0.10"
        status["containerStatuses"] = [
            {
                "name": "main",
                "image": pod["spec"]["containers"][0]["image"],
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}},
            }
        ]
        start_initializing(pod)
        self._bump("pods", "MODIFIED", pod)

    def bound(self, namespace: str = "jobs") -> dict[str, str]:
        """Pod name -> node of every bound pod."""
        return {
            p["metadata"]["name"]: p["spec"]["nodeName"]
            for p in self.pods(namespace)
            if p["spec"].get("nodeName")
        }

    def lose_node(self, name: str) -> list[str]:
        """The node stops answering: its kubelet is gone. As the node lifecycle controller does,
        the node turns `Ready=Unknown` with the `node.kubernetes.io/unreachable` NoExecute
        taint, and once the pods' toleration of it ends (300 s by default, now here) the taint
        manager deletes them gracefully, with a `DisruptionTarget` condition of reason
        `DeletionByTaintManager`. No kubelet confirms their end, so they stay Terminating with
        their containers' last known state. The names of those pods."""
        with self.lock:
            node = self.objects[("nodes", "", name)]
            self.lost_nodes.add(name)
            node["status"]["conditions"] = [
                {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}
            ]
            node["spec"]["taints"] = [
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
            ]
            self._bump("nodes", "MODIFIED", node)
            victims = [
                (ns, o["metadata"]["name"])
                for (res, ns, _), o in self.objects.items()
                if res == "pods" and o["spec"].get("nodeName") == name
            ]
            for namespace, pod_name in victims:
                pod = self.objects[("pods", namespace, pod_name)]
                pod["status"]["conditions"] = [
                    *[c for c in pod["status"]["conditions"] if c["type"] != "Ready"],
                    {"type": "Ready", "status": "False", "reason": "NodeLost"},
                    _disruption(
                        "DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint"
                    ),
                ]
                self._bump("pods", "MODIFIED", pod)
        for namespace, pod_name in victims:
            self.delete("pods", namespace, pod_name)
        return [pod_name for _, pod_name in victims]

    def evict(self, name: str, message: str, namespace: str = "jobs") -> None:
        """Node-pressure eviction as the kubelet reports it: the pod fails with reason
        `Evicted`, a `DisruptionTarget` condition of reason `TerminationByKubelet` (Kubernetes
        1.26+), and its main container, killed, terminated with 137."""
        with self._pod(name, namespace) as pod:
            pod["status"].update(phase="Failed", reason="Evicted", message=message)
            pod["status"]["conditions"] = [
                *pod["status"]["conditions"],
                _disruption("TerminationByKubelet", message),
            ]
            main = _main_status(pod)
            if main is not None:
                started = (main["state"].get("running") or {}).get("startedAt")
                main["state"] = {
                    "terminated": {
                        "exitCode": 137,
                        "reason": "Error",
                        "startedAt": started or now(),
                        "finishedAt": now(),
                    }
                }

    def preempt(self, name: str, namespace: str = "jobs") -> None:
        """The scheduler preempts the pod for one of higher priority: a `DisruptionTarget`
        condition of reason `PreemptionByScheduler`, then a graceful delete (SIGTERM: 143)."""
        with self._pod(name, namespace) as pod:
            pod["status"]["conditions"] = [
                *pod["status"]["conditions"],
                _disruption("PreemptionByScheduler", "preempted by a pod of higher priority"),
            ]
        self.delete("pods", namespace, name)

    def init_oom(self, name: str, namespace: str = "jobs") -> None:
        """The init container was OOM-killed: the pod fails before its main container ran."""
        with self._pod(name, namespace) as pod:
            pod["status"]["phase"] = "Failed"
            pod["status"]["initContainerStatuses"] = [
                {
                    "name": pod["spec"]["initContainers"][0]["name"],
                    "image": pod["spec"]["initContainers"][0]["image"],
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                }
            ]

    def _log_ended(self, name: str) -> None:
        """The main container terminated: its log is complete (the lock is held)."""
        if name in self.logs:
            self.logs[name].ended()
            self.lock.notify_all()

    def verbs(self) -> set[tuple[str, str]]:
        with self.lock:
            return set(self.calls)


# --- HTTP ----------------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # the client opens a connection per request, many at once

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (a stopped watch, a closed pool) is no error here."""


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 300 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _gated_condition() -> dict[str, Any]:
    return {
        "type": "PodScheduled",
        "status": "False",
        "reason": "SchedulingGated",
        "message": "Scheduling is blocked due to non-empty scheduling gates",
    }


def _disruption(reason: str, message: str) -> dict[str, Any]:
    """The pod condition Kubernetes (1.26+) adds before a disruption deletes or fails a pod."""
    return {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now(),
    }


def _position(obj: dict[str, Any]) -> tuple[str, str]:
    return (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


def _patched(
    pod: dict[str, Any], content_type: str, body: Any
) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """The metadata changes and the scheduling gates a patch leaves, or None for the gates
    when it touches any other part of the spec (or of the pod)."""
    gates = copy.deepcopy(pod["spec"].get("schedulingGates") or [])
    meta: dict[str, Any] = {}
    if "json-patch" in content_type:
        for op in body:
            path = op.get("path", "")
            if op.get("op") == "test":
                continue
            if path == "/spec/schedulingGates":
                gates = [] if op["op"] == "remove" else list(op.get("value") or [])
            elif re.fullmatch(r"/spec/schedulingGates/\d+", path) and op["op"] == "remove":
                del gates[int(path.rsplit("/", 1)[1])]
            elif path.startswith("/metadata/labels") or path.startswith("/metadata/annotations"):
                field = path.split("/")[2]
                meta.setdefault(field, dict(pod["metadata"].get(field) or {}))
                key = path.split("/", 3)[3].replace("~1", "/").replace("~0", "~")
                if op["op"] == "remove":
                    meta[field].pop(key, None)
                else:
                    meta[field][key] = op["value"]
            else:
                return meta, None
        return meta, gates
    for part, value in (body or {}).items():
        if part == "spec":
            if set(value) - {"schedulingGates"}:
                return meta, None
            gates = list(value.get("schedulingGates") or [])
        elif part == "metadata":
            for field in ("labels", "annotations"):
                if field in value:
                    merged = {**(pod["metadata"].get(field) or {}), **value[field]}
                    meta[field] = {k: v for k, v in merged.items() if v is not None}
        elif part not in ("apiVersion", "kind"):
            return meta, None
    return meta, gates


def _main_status(pod: dict[str, Any]) -> dict[str, Any] | None:
    for status in pod["status"].get("containerStatuses") or []:
        if status["name"] == "main":
            return status
    return None


def _matches(obj: dict[str, Any], selector: str) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, selector.split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key) != value.lstrip("="):
                return False
        elif term not in labels:
            return False
    return True


def _handler(api: FakeKubeAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # streams are chunked, as the client expects

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def handle_one_request(self) -> None:
            if not api.answering:
                self.close_connection = True  # hang up before reading: no answer at all
                return
            super().handle_one_request()

        def _send(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self) -> tuple[re.Match[str] | None, dict[str, str]]:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            return _PATH.match(parts.path), query

        def _authorised(self) -> bool:
            if self.headers.get("Authorization") == f"Bearer {TOKEN}":
                return True
            self._send(401, _status(401, "Unauthorized", "Unauthorized"))
            return False

        def _record(self, verb: str, resource: str) -> bool:
            """Note the call; False (answered 403) when RBAC does not allow it."""
            with api.lock:
                api.calls.append((verb, resource))
            match, _ = self._route()
            namespace, group = "", GROUPS.get(resource.split("/")[0], "")
            if match is not None:
                namespace = self._target(match)[1] or ""
                if match["custom"]:
                    group = match["cgroup"].split("/")[0]
                if match["metrics"]:
                    group = "metrics.k8s.io"
            if api.rbac.allows(verb, group, resource, namespace):
                return True
            refusal = RoleRules.refusal(SERVICE_ACCOUNT, verb, group, resource, namespace)
            self._send(403, _status(403, "Forbidden", refusal))
            return False

        def _target(self, match: re.Match[str]) -> tuple[str, str | None, str | None]:
            """(resource, namespace or None for cluster scope, name) of a matched path."""
            if match["metrics"]:
                return "pods", match["mns"], None
            if match["cluster"]:
                return match["cluster"], None, match["node"]
            if match["custom"]:
                return match["custom"], match["cns"], match["cname"]
            return match["resource"], match["ns"], match["name"]

        def _refused(self, verb: str, resource: str) -> bool:
            """A refusal the test asked for: 429 with Retry-After, as API Priority and
            Fairness answers an overloaded server; 5xx; or 403 with its message."""
            refusal = api._refusal(verb, resource)
            if refusal is None:
                return False
            code, message = refusal
            reason = {429: "TooManyRequests", 403: "Forbidden"}.get(code, "InternalError")
            body = _status(code, reason, message or f"{reason}: try again later")
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            if code == 429:
                self.send_header("Retry-After", "1")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return True

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length", 0))
            return json.loads(self.rfile.read(length) or b"{}") if length else {}

        def do_POST(self) -> None:
            match, _ = self._route()
            if not self._authorised():
                return
            if match is None:
                self._send(404, _status(404, "NotFound", "not found"))
                return
            resource, namespace, name = self._target(match)
            if name or resource in ("events", "nodes") or namespace is None:
                self._send(404, _status(404, "NotFound", "not found"))
                return
            length = int(self.headers.get("Content-Length", 0))
            raw = self.rfile.read(length) if length else b""
            if not self._record("create", resource):
                return
            if length > REQUEST_LIMIT:
                message = f"Request entity too large: limit is {REQUEST_LIMIT}"
                self._send(413, _status(413, "RequestEntityTooLarge", message))
                return
            body = json.loads(raw or b"{}")
            if self._refused("create", resource):
                return
            self._send(*api.create(resource, namespace, body))

        def do_PATCH(self) -> None:
            match, _ = self._route()
            if not self._authorised():
                return
            if match is not None and match["name"] and match["resource"] == "configmaps":
                body = self._body()
                if self._record("patch", "configmaps") and not self._refused("patch", "configmaps"):
                    self._send(*api.patch_config_map(match["ns"], match["name"], body))
                return
            if match is None or not match["name"] or match["resource"] not in RESOURCES:
                self._send(404, _status(404, "NotFound", "not found"))
                return
            body = self._body()
            if match["resource"] == "resourcequotas":
                if self._record("patch", "resourcequotas"):
                    self._send(*api.patch_quota(match["ns"], match["name"], body))
                return
            if match["resource"] != "pods":
                self._send(404, _status(404, "NotFound", "not found"))
                return
            if not self._record("patch", "pods"):
                return
            if self._refused("patch", "pods"):
                return
            content_type = self.headers.get("Content-Type", "")
            self._send(*api.patch(match["ns"], match["name"], content_type, body))

        def do_DELETE(self) -> None:
            match, _ = self._route()
            if not self._authorised():
                return
            if match is None:
                self._send(404, _status(404, "NotFound", "not found"))
                return
            resource, namespace, name = self._target(match)
            if not name or namespace is None:
                self._send(404, _status(404, "NotFound", "not found"))
                return
            body = self._body()
            if not self._record("delete", resource):
                return
            grace = body.get("gracePeriodSeconds") if isinstance(body, dict) else None
            self._send(*api.delete(resource, namespace, name, grace))

        def do_GET(self) -> None:
            match, query = self._route()
            if not self._authorised():
                return
            if match is None:
                self._send(404, _status(404, "NotFound", f"no route {self.path}"))
                return
            if match["metrics"]:
                if self._record("list", "pods"):
                    self._send(*api._pod_metrics_list(match["mns"], query.get("labelSelector", "")))
                return
            resource, namespace, name = self._target(match)
            if match["sub"] == "log":
                if self._record("get", "pods/log"):
                    self._log(namespace, name, query)
            elif match["sub"] == "exec":
                # API servers from 1.31 ask for both on a websocket exec
                if self._record("get", "pods/exec") and self._record("create", "pods/exec"):
                    self._exec(namespace, name)
            elif resource == "events":
                if not self._record("list", "events"):
                    return
                wanted = query.get("fieldSelector", "").removeprefix("involvedObject.name=")
                with api.lock:
                    items = [
                        e for e in api.events if not wanted or e["involvedObject"]["name"] == wanted
                    ]
                self._send(
                    200, {"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": items}
                )
            elif name:
                if not self._record("get", resource):
                    return
                obj = api.get(resource, namespace or "", name)
                if obj is None:
                    self._send(404, _status(404, "NotFound", f'{resource} "{name}" not found'))
                else:
                    self._send(200, obj)
            elif query.get("watch") in ("true", "1"):
                if self._record("watch", resource):
                    self._watch(resource, namespace, query)
            else:
                if not self._record("list", resource):
                    return
                if self._refused("list", resource):
                    return
                scope = "" if resource == "nodes" else namespace
                self._send(*api.page(resource, scope, query))

        def _stream_start(self, content_type: str = "application/json") -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True

        def _chunk(self, data: bytes) -> None:
            if data:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

        def _stream_end(self) -> None:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _exec(self, namespace: str, name: str) -> None:
            """The exec websocket of a pod's running main container (tests/fake_kube_exec)."""
            query = parse_qs(urlsplit(self.path).query)
            command = query.get("command", [])
            tty = query.get("tty", ["false"])[-1] == "true"
            pod = api.get("pods", namespace, name)
            if pod is None:
                self._send(404, _status(404, "NotFound", f'pods "{name}" not found'))
                return
            status = _main_status(pod) or {}
            if "running" not in status.get("state", {}):
                message = f"container main is not running in pod {name}"
                self._send(400, _status(400, "BadRequest", message))
                return
            protocol = choose_protocol(self.headers.get("Sec-WebSocket-Protocol", ""))
            if self.headers.get("Upgrade", "").lower() != "websocket" or protocol is None:
                self._send(400, _status(400, "BadRequest", "exec needs a websocket upgrade"))
                return
            with api.lock:
                api.execs.append((name, command, tty))
            self.send_response(101, "Switching Protocols")
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", accept_key(self.headers["Sec-WebSocket-Key"]))
            self.send_header("Sec-WebSocket-Protocol", protocol)
            self.end_headers()
            self.wfile.flush()
            ExecConnection(self.connection, protocol, command, tty).serve()
            self.close_connection = True

        def _watch(self, resource: str, namespace: str | None, query: dict[str, str]) -> None:
            """Changes after a resource version, line by line. With `allowWatchBookmarks`, an
            idle watch gets a BOOKMARK now and then: an object of the kind with nothing but
            the current resourceVersion, to resume from (as the API server sends them)."""
            since = int(query.get("resourceVersion") or api.version)
            selector = query.get("labelSelector", "")
            bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
            last_sent = time.monotonic()
            deadline = time.monotonic() + float(query.get("timeoutSeconds") or 300)
            self._stream_start()
            position = 0
            with api.lock:
                epoch = api.watch_epoch
            try:
                while True:
                    with api.lock:
                        if api.watch_epoch != epoch:
                            self.connection.shutdown(socket.SHUT_RDWR)  # cut, no end chunk
                            return
                        if since < api.compacted:
                            gone = _status(410, "Expired", "too old resource version")
                            event = {"type": "ERROR", "object": gone}
                            self._chunk(json.dumps(event).encode() + b"\n")
                            break
                        fresh = [h for h in api.history[position:]]
                        position = len(api.history)
                        if not fresh:
                            if api.stopping or time.monotonic() > deadline:
                                break
                            if bookmarks and time.monotonic() - last_sent > api.bookmark_seconds:
                                mark = {
                                    "type": "BOOKMARK",
                                    "object": {
                                        "kind": RESOURCES[resource],
                                        "apiVersion": "v1",
                                        "metadata": {"resourceVersion": str(api.version)},
                                    },
                                }
                                self._chunk(json.dumps(mark).encode() + b"\n")
                                last_sent = time.monotonic()
                            api.lock.wait(0.5)
                            continue
                    for version, res, kind, obj in fresh:
                        if (
                            version <= since
                            or res != resource
                            or namespace not in (None, obj["metadata"].get("namespace", ""))
                        ):
                            continue
                        if not _matches(obj, selector):
                            continue
                        self._chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                        last_sent = time.monotonic()
                self._stream_end()
            except (BrokenPipeError, ConnectionResetError, OSError):
                return

        def _log(self, namespace: str, name: str, query: dict[str, str]) -> None:
            """The main container's log, as tests/fake_kube_logs describes."""
            invalid = invalid_options(query)
            if invalid:
                message = f'PodLogOptions "{name}" is invalid: {invalid}'
                self._send(422, _status(422, "Invalid", message))
                return
            pod = api.get("pods", namespace, name)
            if pod is None:
                self._send(404, _status(404, "NotFound", f'pods "{name}" not found'))
                return
            main = _main_status(pod)
            if main is None or "waiting" in main["state"]:
                self._send(
                    400,
                    _status(
                        400, "BadRequest", f'container "main" in pod "{name}" is waiting to start'
                    ),
                )
                return
            with api.lock:
                pod_log = api.logs[name]
                position = pod_log.start(query)
                rotations, cuts = len(pod_log.boundaries), pod_log.cuts
            self._stream_start("text/plain")
            with api.lock:
                api.open_log_streams += 1
                api.lock.notify_all()
            try:
                self._answer_log(pod_log, namespace, name, position, (rotations, cuts), query)
            finally:
                with api.lock:
                    api.open_log_streams -= 1
                    api.lock.notify_all()

        def _answer_log(
            self,
            pod_log: PodLog,
            namespace: str,
            name: str,
            position: int,
            epochs: tuple[int, int],
            query: dict[str, str],
        ) -> None:
            """Stream the lines from `position` until the request is answered."""
            rotations, cuts = epochs
            follow = query.get("follow") in ("true", "1")
            stamps = query.get("timestamps") in ("true", "1")
            budget = int(query["limitBytes"]) if "limitBytes" in query else None
            try:
                while True:
                    with api.lock:
                        if pod_log.cuts != cuts:
                            self.connection.shutdown(socket.SHUT_RDWR)  # cut, no end chunk
                            return
                        current = api.objects.get(("pods", namespace, name))
                        ended = current is None or "terminated" in (
                            _main_status(current) or {}
                        ).get("state", {})
                        file_end = pod_log.file_end(rotations)
                        end = len(pod_log.lines) if file_end is None else file_end
                        data = pod_log.render(position, end, stamps)
                        position = end
                        done = not follow or ended or file_end is not None or api.stopping
                        if not data and not done:
                            api.lock.wait(0.5)
                            continue
                    if budget is not None:
                        data = data[:budget]
                        budget -= len(data)
                    self._chunk(data)
                    if done or budget == 0:
                        break
                self._stream_end()
            except (BrokenPipeError, ConnectionResetError, OSError):
                return

    return Handler
