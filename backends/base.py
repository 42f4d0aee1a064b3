"""The Backend interface: what the job engine asks of a place that runs containers.

A backend reports facts (an instance started, exited with code N, was OOM-killed, could not
start because ...); it never decides a job's state. Everything crossing this boundary is a plain
frozen pydantic value, so the simulator and the Kubernetes backend are interchangeable and the
server never sees a Docker or Kubernetes object.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def utcnow() -> datetime:
    return datetime.now(UTC)


# --- what every instance is promised -------------------------------------------------------

WORK_DIR = "/work"  # the commands' working directory; materials are at WORK_DIR/<name>/
DEFAULT_FS_URI = ""  # PAI_DEFAULT_FS_URI: empty, as OpenPAI on Kubernetes exported it


# --- what a launch asks for ----------------------------------------------------------------


class PortRequest(_Value):
    label: str
    count: int = 1
    begin_at: int = 0  # the first port wanted (v1 / draft); 0 lets the backend choose


class ResourceRequest(_Value):
    cpu: int = 1
    memory_mb: int = 512
    gpu: int = 0
    shm_mb: int = 64
    ports: list[PortRequest] = Field(default_factory=list)


class Fetch(StrEnum):
    """How a prerequisite gets into the container."""

    DOWNLOAD = "download"  # data: each URI downloaded into <workdir>/<name>/
    CLONE = "clone"  # script: a git repository (repo@commit) cloned into <workdir>/<name>/
    # (or each of a list into <workdir>/<name>/<repository name>/, see Material.per_repository)
    MOUNT = "mount"  # storage / output: a host directory or volume mounted at <workdir>/<name>/


class Material(_Value):
    """A data, script or storage prerequisite a role needs in place before its commands run."""

    name: str
    kind: Fetch
    uris: list[str] = Field(default_factory=list)
    read_only: bool = False
    # failurePolicy: ignore: when it cannot be fetched, the instance starts without it (the
    # backend says so on the instance's PLACED event) instead of failing to start
    optional: bool = False
    per_repository: bool = False  # clone: each repository at <workdir>/<name>/<repository name>/
    # download: a local directory given as the one URI is <workdir>/<name>/ itself (v1 codeDir)
    as_directory: bool = False


class StorageMount(_Value):
    """A storage an admin defined, mounted in every instance of a role as the admin said."""

    name: str
    source: str  # an absolute host directory, or a volume name
    volume: bool = False
    target: str  # absolute path in the container
    read_only: bool = False


class Hooks(_Value):
    """Commands around the user's commands (cmd plugin callbacks and deployment commands)."""

    on_start: list[str] = Field(default_factory=list)  # before the user commands, in order
    on_success: list[str] = Field(default_factory=list)  # after, when they exited 0
    on_failure: list[str] = Field(default_factory=list)  # after, when they failed


class ImageAuth(_Value):
    """Credentials for pulling a role's image from a private registry (a dockerimage's `auth`).

    Values may hold `<% $secrets.x %>`: a backend renders them from the request's secrets
    when it launches, so they are never stored.
    """

    registry: str = ""  # e.g. registry.example.org:5000; empty: the registry of the image name
    username: str = ""
    password: str = Field(default="", repr=False)
    # v1 authFile: a file whose first three lines are the registry, username and password,
    # read only when the image is pulled (a local path under the simulator's allowed roots)
    file: str = ""


class StartDependency(_Value):
    """The role's commands start once `instances` of `role` reached `when` (running, ready or
    succeeded); see backends.start_gate."""

    role: str
    when: str
    instances: int


class ReadinessCheck(_Value):
    """How an instance of the role shows it serves: a TCP connection to its port `port`
    (a label) or `command` run in it exiting 0, tried every `period_seconds`."""

    port: str | None = None
    command: list[str] = Field(default_factory=list)
    period_seconds: float = 1.0
    timeout_seconds: float = 1.0
    failure_threshold: int = 3


class RoleLaunch(_Value):
    name: str  # exactly as the user wrote it
    instances: int
    image: str
    image_auth: ImageAuth | None = None
    resources: ResourceRequest
    commands: list[str]  # rendered, ready to run
    hooks: Hooks = Hooks()
    materials: list[Material] = Field(default_factory=list)
    storages: list[StorageMount] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    min_failed: int = 1  # -1: disabled (only exported to the instances here)
    min_succeeded: int = -1
    depends_on: list[StartDependency] = Field(default_factory=list)
    readiness: ReadinessCheck | None = None
    dependency_timeout_seconds: float = 600.0


class SshAccess(_Value):
    """The ssh runtime plugin of a job: who may log in to its instances where the image has an
    sshd, and the key pair its instances use to reach each other (made for the attempt)."""

    authorized_keys: list[str] = Field(default_factory=list)  # the user's and the job's
    job_private_key: str = Field(default="", repr=False)  # OpenSSH format; "" without jobssh
    job_public_key: str = ""


class LaunchRequest(_Value):
    """One attempt of a resolved job, self-contained: nothing is looked up after this."""

    job_id: str
    job_name: str
    user: str = "default"
    virtual_cluster: str = "default"
    attempt: int = 1
    roles: list[RoleLaunch]
    env: dict[str, str] = Field(default_factory=dict)  # job-wide (v1 jobEnvs, PAI_DATA_DIR ...)
    secrets: dict[str, str] = Field(default_factory=dict, repr=False)
    ssh: SshAccess | None = None  # the ssh plugin: an sshd in every instance whose image has one

    def role(self, name: str) -> RoleLaunch:
        return next(r for r in self.roles if r.name == name)

    @property
    def total_instances(self) -> int:
        return sum(r.instances for r in self.roles)


class LaunchNote(_Value):
    """Something a backend does differently from the cluster the job was written for (it
    simulates an HDFS location, a node's path ...): kept as a warning on the job, at the place
    of the prerequisite it is about (`material`, its name), or of the whole job (None)."""

    material: str | None = None
    code: str = "simulated"
    message: str
    # where in the document, for a note about no one prerequisite ("taskRoles" for the GPUs
    # and limits of the roles)
    path: str | None = None


# --- what a backend reports ----------------------------------------------------------------


class InstanceKey(_Value):
    job_id: str
    attempt: int
    role: str
    index: int

    def __str__(self) -> str:
        return f"{self.job_id}#{self.attempt}/{self.role}-{self.index}"


class Placement(_Value):
    """Where an instance runs and how its peers reach it."""

    node: str
    host_ip: str
    ports: dict[str, list[int]] = Field(default_factory=dict)  # label -> ports, request order


class EventKind(StrEnum):
    WAITING = "waiting"  # the attempt does not fit yet; reason says what is missing
    PLACED = "placed"  # resources and ports are held; the container is being created
    STARTED = "started"  # the container runs the user's command
    EXITED = "exited"  # the container ended by itself: exit_code, oom_killed
    START_FAILED = "start_failed"  # it could not start: missing image, bad mount ...
    STOPPED = "stopped"  # it ended because a stop was asked for
    LOST = "lost"  # it vanished without an exit being observed


def oom_reason(limit_mb: int) -> str:
    """The end reason of an instance killed for using more than the memory it asked for."""
    return (
        f"killed because it used more memory than it asked for (out of memory: its limit of "
        f"{limit_mb} MB exceeded)"
    )


class InstanceEvent(_Value):
    """A change of an instance's state. `reason` of an OOM kill (EXITED with `oom_killed`)
    is a whole sentence the job shows as the instance's exit reason (see `oom_reason`)."""

    job_id: str
    attempt: int
    kind: EventKind
    role: str | None = None  # None for events about the whole attempt (WAITING)
    index: int | None = None
    # which run of the instance the event is about: 1 for the run the attempt's launch started,
    # then the number each `relaunch` was asked for (the job's task attempt). The job machine
    # applies an event only to the run it names, so a late or second telling of an earlier
    # run's end cannot end the run that replaced it. None: not known (an attempt's event, or a
    # record written before runs were told).
    run: int | None = None
    at: datetime = Field(default_factory=utcnow)
    reason: str | None = None
    exit_code: int | None = None
    oom_killed: bool = False
    placement: Placement | None = None
    # OpenPAI's completion code for what the platform did to the instance, when the backend
    # saw it (evicted -1000, node lost -1001, preempted -1003, gang timeout 251 ...); it decides
    # over the exit code, which is still kept as the container's own
    completion_code: int | None = None

    @property
    def key(self) -> InstanceKey | None:
        if self.role is None or self.index is None:
            return None
        return InstanceKey(
            job_id=self.job_id, attempt=self.attempt, role=self.role, index=self.index
        )


class InstanceStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    EXITED = "exited"


class InstanceReport(_Value):
    """One instance a backend found, for reconciling after a restart."""

    key: InstanceKey
    status: InstanceStatus
    placement: Placement | None = None
    exit_code: int | None = None
    oom_killed: bool = False
    started_at: datetime | None = None
    finished_at: datetime | None = None
    run: int | None = None  # the run this is about, as on InstanceEvent


class BackendHealth(_Value):
    """Whether the backend can reach what runs its containers; when not, since when and why.

    `reason` is written for the jobs that wait meanwhile, e.g. "Docker engine unreachable since
    12:03:10 UTC; waiting"."""

    healthy: bool = True
    reason: str | None = None
    since: datetime | None = None
    detail: str = ""  # the last error seen, for operators


class LogChunk(_Value):
    key: InstanceKey
    offset: int  # byte offset of `data` in the instance's whole log
    data: str


# --- errors ----------------------------------------------------------------------------------


class BackendError(Exception):
    """Something the user can act on; the message says what and where."""


class LaunchRefused(BackendError):
    """The attempt can never run here (asks more than any node has, an unservable scheme...)."""


class UnknownInstance(BackendError):
    pass


@runtime_checkable
class ChecksLaunches(Protocol):
    """A backend that can tell, before anything is stored, that a request can never run."""

    def refusal(self, request: LaunchRequest) -> str | None:
        """Why the request can never run here (what `launch` would raise LaunchRefused with),
        or None when it can. Cheap and without side effects: called for every submission."""


@runtime_checkable
class NotesLaunches(Protocol):
    """A backend that can say what of a request it will simulate rather than give as asked."""

    def launch_notes(self, request: LaunchRequest) -> list[LaunchNote]:
        """Cheap and without side effects: called for every submission and dry run."""


@runtime_checkable
class ReportsHealth(Protocol):
    """A backend that can say whether the engine or cluster it drives answers right now."""

    def health(self) -> BackendHealth:
        """Cheap and without side effects: called every fraction of a second. While it is not
        healthy, jobs show its reason, and everything it missed is applied once it is again."""


@runtime_checkable
class Backend(Protocol):
    """What the job engine needs from a place that runs task instances."""

    async def launch(self, request: LaunchRequest) -> None:
        """Queue an attempt, placed all at once when it fits; LaunchRefused if it never can."""

    async def stop(self, job_id: str, attempt: int, grace_seconds: float = 10.0) -> None:
        """Stop every instance of the attempt (SIGTERM, then SIGKILL after the grace period)."""

    def events(self) -> AsyncIterator[InstanceEvent]:
        """Instance state changes of every attempt, in the order they happened."""

    def logs(
        self,
        key: InstanceKey,
        *,
        offset: int = 0,
        tail: int | None = None,
        follow: bool = False,
    ) -> AsyncIterator[LogChunk]:
        """An instance's output, from a byte offset or its last `tail` lines; kept after it ends."""

    async def relaunch(self, key: InstanceKey, run: int | None = None) -> None:
        """Start one ended instance of a live attempt again (task retry, gang allocation off).

        Its peers keep running, so it comes back with the same role, index, environment and
        address; every event of the new run carries `run` (None: the one after the current),
        and a run already started is not started twice, even after a restart. UnknownInstance
        when there is no such instance; BackendError when it has not ended or is being stopped.
        """

    async def reconcile(self) -> list[InstanceReport]:
        """Every instance this backend knows of, so a restarted server can adopt them."""

    async def forget(self, job_id: str, attempt: int) -> None:
        """Release what an ended attempt still holds (containers, network); logs are kept."""

    async def close(self) -> None:
        """Stop watching; running instances keep running."""
