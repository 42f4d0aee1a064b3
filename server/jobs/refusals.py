"""Every reason a backend can never run a job, each at the field that causes it.

A backend's `refusal` names the first reason it finds. A person fixing a job wants all of them
at once, each where it is written, so the request is asked about piece by piece: the job on its
own (its virtual cluster), each role's resources, then each role's data, scripts and storages
one at a time. Only when no piece is refused alone (the roles fit one by one but not together)
is the whole job named.
"""

from __future__ import annotations

from collections.abc import Callable

from backends.base import LaunchRequest, ResourceRequest, RoleLaunch
from server.protocol import Dialect, Issue, JobSpec

Refusal = Callable[[LaunchRequest], str | None]

# the least a role can ask for: what is judged then is the rest of it
_LEAST = ResourceRequest(cpu=1, memory_mb=1, gpu=0, shm_mb=1, ports=[])
DEFAULT_VIRTUAL_CLUSTER = "default"
_RESOURCE_WORDS = (("gpu", "gpu"), ("cpu", "cpu"), ("memory", "memoryMB"), ("port", "ports"))


def virtual_cluster_path(spec: JobSpec) -> str:
    """Where the job's virtual cluster is written, in its own dialect."""
    return ".".join(_Paths(spec).virtual_cluster)


def refusal_issues(refusal: Refusal, request: LaunchRequest, spec: JobSpec) -> list[Issue]:
    """Why `refusal` says the request can never run, one issue per cause; none if it can."""
    whole = refusal(request)
    if not whole:
        return []
    paths = _Paths(spec)
    issues = []
    least = [_bare(role, resources=_LEAST, instances=1) for role in request.roles]
    job_level = refusal(request.model_copy(update={"roles": least}))
    if job_level:
        issues.append(_issue(paths.virtual_cluster, job_level))
        # the rest is judged where every job may run, when the job's own place is the fault
        request = request.model_copy(update={"virtual_cluster": DEFAULT_VIRTUAL_CLUSTER})
        if refusal(request.model_copy(update={"roles": least})):
            return issues
    for role in request.roles:
        for piece, path in _pieces(role, paths):
            reason = refusal(request.model_copy(update={"roles": [piece]}))
            if reason:
                issues.append(_issue(path or paths.resources(role.name, reason), reason))
    return issues or [_issue(paths.roles, whole)]


def _bare(role: RoleLaunch, **update: object) -> RoleLaunch:
    return role.model_copy(update={"materials": [], "storages": [], **update})


def _pieces(role: RoleLaunch, paths: _Paths) -> list[tuple[RoleLaunch, list[str] | None]]:
    """The role cut in the parts judged one by one, each with where its cause is written
    (None: the role's resources, where the reason says which)."""
    least: dict[str, object] = {"resources": _LEAST, "instances": 1}
    pieces: list[tuple[RoleLaunch, list[str] | None]] = [(_bare(role), None)]
    for material in role.materials:
        piece = _bare(role, **least, materials=[material])
        pieces.append((piece, paths.prerequisite(role.name, material.name)))
    for storage in role.storages:
        pieces.append((_bare(role, **least, storages=[storage]), paths.role(role.name)))
    return pieces


def _issue(path: list[str], reason: str) -> Issue:
    return Issue.at(path, "refused", f"this cluster cannot run the job: {reason}")


class _Paths:
    """Where a cause is written, in the dialect the job was written in (a v1 role's fields
    and folders are its own: the role's entry is named there)."""

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        self.dialect = spec.dialect
        self.roles = ["tasks"] if spec.dialect is Dialect.DRAFT else ["taskRoles"]
        v2 = spec.dialect is Dialect.V2
        self.virtual_cluster = ["defaults", "virtualCluster"] if v2 else ["virtualCluster"]

    def role(self, name: str) -> list[str]:
        if self.dialect is Dialect.V2:
            return ["taskRoles", name]
        index = next((i for i, r in enumerate(self.spec.task_roles) if r.name == name), 0)
        return [*self.roles, str(index)]

    def resources(self, name: str, reason: str) -> list[str]:
        if self.dialect is Dialect.V1:
            return self.role(name)
        per_instance = ["resourcePerInstance"]
        if self.dialect is Dialect.DRAFT:
            per_instance = ["resource", "resourcePerInstance"]
        if "in total" in reason:  # the role's instances together exceed a quota
            return [*self.role(name), *per_instance[:-1], "instances"]
        lowered = reason.lower()
        named = [key for word, key in _RESOURCE_WORDS if word in lowered]
        if len(named) == 1:
            return [*self.role(name), *per_instance, named[0]]
        return [*self.role(name), *per_instance]

    def prerequisite(self, role_name: str, prerequisite: str) -> list[str]:
        """The role's field naming the prerequisite: where another one can be chosen."""
        role = next((r for r in self.spec.task_roles if r.name == role_name), None)
        if role is None or self.dialect is Dialect.V1:
            return self.role(role_name)
        fields = ("data", "script", "output") if self.dialect is Dialect.V2 else ("data", "script")
        for field in fields:
            if getattr(role, field) == prerequisite:
                return [*self.role(role_name), field]
        if self.dialect is Dialect.V2 and prerequisite in role.prerequisites:
            index = role.prerequisites.index(prerequisite)
            return [*self.role(role_name), "prerequisites", str(index)]
        return self.role(role_name)
