"""Turn a resolved JobSpec into the LaunchRequest a backend runs.

This is where the protocol's names meet the backend's plain values: the docker image is looked
up, data / script / output prerequisites become materials, `cmd` plugin callbacks and deployment
commands become hooks, and the completion rules become the effective numbers OpenPAI exports.
"""

from __future__ import annotations

from typing import Any

from backends.base import (
    WORK_DIR,
    Fetch,
    Hooks,
    ImageAuth,
    LaunchRequest,
    Material,
    PortRequest,
    ReadinessCheck,
    ResourceRequest,
    RoleLaunch,
    SshAccess,
    StartDependency,
    StorageMount,
)
from server.jobs.not_runnable import NotRunnable
from server.jobs.policy import effective_completion
from server.jobs.ssh_keys import job_key_pair
from server.jobs.v1_locations import DEFAULT_FS_VARIABLE, expand, v1_locations
from server.protocol.model import (
    CallbackEvent,
    Dialect,
    JobSpec,
    Prerequisite,
    PrerequisiteType,
    Readiness,
    TaskRole,
)
from server.protocol.rules import is_reference
from server.protocol.runtime_plugins import ssh_plugin

__all__ = ["NotRunnable", "default_fs_of", "launch_request"]

RUNTIME_PLUGIN = "com.microsoft.pai.runtimeplugin"


def default_fs_of(backend: object) -> str:
    """The backend's default file system (PAI_DEFAULT_FS_URI), "" when it has none."""
    value = getattr(backend, "default_fs_uri", "")
    return value if isinstance(value, str) else ""


def launch_request(
    spec: JobSpec,
    *,
    job_id: str,
    attempt: int = 1,
    user: str = "default",
    default_fs: str = "",
) -> LaunchRequest:
    """The attempt `attempt` of `spec` (already rendered) as a backend sees it.

    `default_fs` is the backend's default file system (`hdfs://host:port` on the simulator, ""
    where there is none): it is PAI_DEFAULT_FS_URI in every instance, and what
    `$PAI_DEFAULT_FS_URI` in a prerequisite's URI and in v1's dataDir, outputDir and codeDir
    stands for."""
    roles = [_role(spec, role, default_fs) for role in spec.task_roles]
    env = dict(spec.env)
    if default_fs:
        env[DEFAULT_FS_VARIABLE] = default_fs
    if spec.dialect is Dialect.V1:
        locations = v1_locations(spec, user, default_fs)
        env.update(locations.env)
        if locations.code is not None:
            roles = [
                r.model_copy(update={"materials": [*r.materials, locations.code]}) for r in roles
            ]
        if locations.auth_file is not None:
            auth = ImageAuth(file=locations.auth_file)
            roles = [r.model_copy(update={"image_auth": auth}) for r in roles]
    return LaunchRequest(
        job_id=job_id,
        job_name=spec.name,
        user=user,
        virtual_cluster=spec.virtual_cluster,
        attempt=attempt,
        roles=roles,
        env=env,
        secrets={k: str(v) for k, v in spec.secrets.items()},
        ssh=_ssh_access(spec, job_id, attempt),
    )


def _ssh_access(spec: JobSpec, job_id: str, attempt: int) -> SshAccess | None:
    """The ssh plugin's keys: the user's, and with `jobssh` a key pair made for this attempt."""
    plugin = ssh_plugin(spec)
    if plugin is None:
        return None
    if plugin.problem is not None:
        raise NotRunnable(plugin.path, plugin.problem)
    if not plugin.jobssh:
        return SshAccess(authorized_keys=plugin.user_keys)
    private, public = job_key_pair(f"paigraph-job-{job_id}-{attempt}")
    return SshAccess(
        authorized_keys=[*plugin.user_keys, public],
        job_private_key=private,
        job_public_key=public,
    )


def _role(spec: JobSpec, role: TaskRole, default_fs: str) -> RoleLaunch:
    min_failed, min_succeeded = effective_completion(role)
    resources = role.resources
    return RoleLaunch(
        name=role.name,
        instances=role.instances,
        image=_image(spec, role),
        image_auth=_image_auth(spec, role),
        resources=ResourceRequest(
            cpu=resources.cpu,
            memory_mb=resources.memory_mb,
            gpu=resources.gpu,
            shm_mb=resources.shm_mb,
            ports=[
                PortRequest(label=p.label, count=p.count, begin_at=p.begin_at)
                for p in resources.ports
            ],
        ),
        commands=spec.commands_for(role),
        hooks=_hooks(spec, role),
        materials=_materials(spec, role, default_fs),
        storages=[
            StorageMount(
                name=s.name,
                source=s.source,
                volume=s.volume,
                target=s.mount_path,
                read_only=s.read_only,
            )
            for s in role.storages
        ],
        env=dict(role.env),
        min_failed=min_failed,
        min_succeeded=min_succeeded,
        depends_on=[
            StartDependency(
                role=d.role,
                when=d.when.value,
                instances=d.instances if d.instances is not None else _instances_of(spec, d.role),
            )
            for d in role.depends_on
        ],
        readiness=None if role.readiness is None else _readiness(role.readiness),
        dependency_timeout_seconds=role.dependency_timeout_seconds,
    )


def _image(spec: JobSpec, role: TaskRole) -> str:
    path = f"taskRoles.{role.name}.dockerImage"
    if is_reference(role.docker_image):
        raise NotRunnable(
            path, f"{role.docker_image} is a marketplace reference; resolve it through the service"
        )
    found = spec.prerequisite(role.docker_image, PrerequisiteType.DOCKERIMAGE)
    if found is None or not found.uri:
        raise NotRunnable(path, f"dockerimage prerequisite {role.docker_image!r} has no uri")
    return found.uri[0]


def _image_auth(spec: JobSpec, role: TaskRole) -> ImageAuth | None:
    """The registry credentials of the role's dockerimage prerequisite, when it has `auth`."""
    found = spec.prerequisite(role.docker_image, PrerequisiteType.DOCKERIMAGE)
    auth = found.auth if found is not None else None
    if auth is None or not (auth.username or auth.password):
        return None
    return ImageAuth(
        registry=auth.registryuri or "", username=auth.username or "", password=auth.password or ""
    )


_MATERIAL_KINDS: dict[PrerequisiteType, Fetch] = {
    PrerequisiteType.DATA: Fetch.DOWNLOAD,
    PrerequisiteType.SCRIPT: Fetch.CLONE,
    PrerequisiteType.OUTPUT: Fetch.MOUNT,
    PrerequisiteType.STORAGE: Fetch.MOUNT,
}


_LISTED_KINDS = (PrerequisiteType.DATA, PrerequisiteType.SCRIPT)


def _materials(spec: JobSpec, role: TaskRole, default_fs: str) -> list[Material]:
    """The role's data, script and output / storage, put in place under the work dir (an
    output that names an admin-defined storage is one of the role's storages instead).
    `$PAI_DEFAULT_FS_URI` in their URIs is the backend's default file system.

    v1's dataDir / outputDir / codeDir are paths on the cluster's file system that the job
    reads through PAI_DATA_DIR and friends; they are exported, never fetched.
    """
    if spec.dialect is Dialect.V1:
        return []
    materials: list[Material] = []
    mounted = {s.mount_path for s in role.storages}
    for name, types in _wanted_materials(spec, role):
        if any(m.name == name for m in materials):
            continue
        if types[0] is PrerequisiteType.OUTPUT and f"{WORK_DIR}/{name}" in mounted:
            continue  # an output that names an admin-defined storage is mounted as one
        material = _material(spec, name, types, default_fs)
        if material is not None:
            materials.append(material)
    return materials


def _wanted_materials(
    spec: JobSpec, role: TaskRole
) -> list[tuple[str, tuple[PrerequisiteType, ...]]]:
    """The prerequisites the role names as data, script or output, with the types each may
    have, followed by the data and scripts it lists among its prerequisites."""
    named: list[tuple[str | None, tuple[PrerequisiteType, ...]]] = [
        (role.data, (PrerequisiteType.DATA,)),
        (role.script, (PrerequisiteType.SCRIPT,)),
        (role.output, (PrerequisiteType.OUTPUT, PrerequisiteType.STORAGE)),
    ]
    wanted = [(name, types) for name, types in named if name is not None]
    # Data and scripts the role lists among its prerequisites (seed 004's form, and how a
    # marketplace item with template variables is used) are fetched too, unless a plugin
    # handles them: a plugin prerequisite's callbacks do their own fetching.
    for listed_name in role.prerequisites:
        listed = spec.prerequisite(listed_name)
        if listed is not None and listed.plugin is None and listed.type in _LISTED_KINDS:
            wanted.append((listed_name, (listed.type,)))
    return wanted


def _material(
    spec: JobSpec, name: str, types: tuple[PrerequisiteType, ...], default_fs: str
) -> Material | None:
    """The material for prerequisite `name` of the first of `types` it is declared as; None
    when it is not declared or has nothing to fetch (used only through its callbacks)."""
    found = next((p for t in types if (p := spec.prerequisite(name, t))), None)
    if found is None:
        return None
    kind = _MATERIAL_KINDS[found.type]
    variables = {DEFAULT_FS_VARIABLE: default_fs}
    uris = [expand(u, variables) for u in found.uri if u.strip()]
    if kind is not Fetch.MOUNT and not uris:
        return None
    return Material(
        name=found.name,
        kind=kind,
        uris=uris,
        optional=kind is not Fetch.MOUNT and found.failure_policy == "ignore",
        per_repository=kind is Fetch.CLONE and found.uri_list,
    )


def _hooks(spec: JobSpec, role: TaskRole) -> Hooks:
    """cmd plugin callbacks: role prerequisites first, then extras; post hooks in reverse."""
    plugins: list[tuple[list[str], list[str], list[str]]] = []
    for name in role.prerequisites:
        found = spec.prerequisite(name)
        if found is not None and _is_cmd(found.plugin):
            plugins.append(_prerequisite_commands(found))
    for entry in _extras_plugins(spec):
        if entry.get("plugin") != "cmd":
            continue
        roles = entry.get("taskroles") or entry.get("taskRoles")
        if isinstance(roles, list) and role.name not in roles:
            continue
        parameters = entry.get("parameters") or {}
        if isinstance(parameters, dict):
            plugins.append(_parameter_commands(parameters))
    return Hooks(
        on_start=[c for start, _, _ in plugins for c in start],
        on_success=[c for _, success, _ in reversed(plugins) for c in success],
        on_failure=[c for _, _, failure in reversed(plugins) for c in failure],
    )


def _is_cmd(plugin: str | None) -> bool:
    return plugin in ("cmd", f"{RUNTIME_PLUGIN}.cmd")


def _prerequisite_commands(p: Prerequisite) -> tuple[list[str], list[str], list[str]]:
    start: list[str] = []
    success: list[str] = []
    failure: list[str] = []
    for callback in p.callbacks:
        target = {
            CallbackEvent.TASK_STARTS: start,
            CallbackEvent.TASK_SUCCEEDS: success,
            CallbackEvent.TASK_FAILS: failure,
        }[callback.event]
        target.extend(callback.commands)
    pre, post, _ = _parameter_commands(p.plugin_parameters)
    return [*start, *pre], [*success, *post], failure


def _parameter_commands(parameters: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
    def strings(key: str) -> list[str]:
        value = parameters.get(key)
        return [str(v) for v in value] if isinstance(value, list) else []

    start, success, failure = strings("preCommands"), strings("postCommands"), []
    callbacks = parameters.get("callbacks")
    for callback in callbacks if isinstance(callbacks, list) else []:
        if not isinstance(callback, dict):
            continue
        commands = [str(c) for c in callback.get("commands") or []]
        event = callback.get("event")
        if event == CallbackEvent.TASK_STARTS:
            start += commands
        elif event == CallbackEvent.TASK_SUCCEEDS:
            success += commands
        elif event == CallbackEvent.TASK_FAILS:
            failure += commands
    return start, success, failure


def _extras_plugins(spec: JobSpec) -> list[dict[str, Any]]:
    entries = spec.extras.get(RUNTIME_PLUGIN)
    if not isinstance(entries, list):
        return []
    return [e for e in entries if isinstance(e, dict)]


def _instances_of(spec: JobSpec, name: str) -> int:
    """How many instances role `name` has (a dependency on all of them waits for that many)."""
    role = spec.role(name)
    return role.instances if role is not None else 1


def _readiness(readiness: Readiness) -> ReadinessCheck:
    return ReadinessCheck(
        port=readiness.port,
        command=list(readiness.command),
        period_seconds=readiness.period_seconds,
        timeout_seconds=readiness.timeout_seconds,
        failure_threshold=readiness.failure_threshold,
    )
