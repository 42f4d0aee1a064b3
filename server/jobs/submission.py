"""Submitting a job: resolve it as its user sees the marketplace, check that it may run in its
virtual cluster and that the backend could run it, store it (WAITING), then hand it to the
service to start; and the dry run, which stops after the checks.

Kept apart from `service.py` so the path of a new job is read in one place, and the service is
left with what happens to jobs once they exist (running, events, health, restarts).
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from backends.base import Backend, ChecksLaunches, LaunchRequest
from server.jobs.launch import NotRunnable, default_fs_of, launch_request
from server.jobs.policy import job_policy
from server.jobs.recorder import JobRecorder
from server.jobs.refusals import refusal_issues, virtual_cluster_path
from server.jobs.service_machine import ServiceMachine
from server.jobs.simulated import simulation_warnings
from server.marketplace.lookup import Viewer
from server.marketplace.references import ANONYMOUS, ReferenceResolver
from server.marketplace.service import MarketplaceService
from server.protocol import Issue, JobSpec, resolve_job
from server.protocol.issues import WithIssues
from server.shapes.store_errors import JobExists, NameInUse
from server.shapes.values import Event, Job, JobWarning, User
from server.store import Store

_ID_TRIES = 5

# runs a stored job: its spec, its machine (WAITING), its user's name, its first request
Start = Callable[[JobSpec, ServiceMachine, str, LaunchRequest], None]


@dataclass(frozen=True)
class ResolveOutcome(WithIssues):
    spec: JobSpec | None  # references resolved, rendered; its secrets are kept in memory only
    issues: list[Issue]
    item_ids: frozenset[str] = frozenset()  # the marketplace items the job uses


@dataclass(frozen=True)
class SubmitOutcome(WithIssues):
    job: Job | None  # as stored: WAITING right after the submission
    issues: list[Issue]  # its warnings are kept with the job too
    item_ids: frozenset[str] = frozenset()  # the marketplace items the job uses


class Submissions:
    """Resolves and submits jobs for a JobService: what it stores it announces through
    `recorder` and hands to `start`."""

    def __init__(
        self,
        store: Store,
        backend: Backend,
        references: ReferenceResolver,
        recorder: JobRecorder,
        start: Start,
    ) -> None:
        self.store = store
        self.backend = backend
        self.references = references
        self.recorder = recorder
        self.start = start

    def viewer_of(self, user: User) -> Viewer:
        """Who `user` is to the marketplace: their groups are their virtual clusters."""
        groups = frozenset(self.store.user_vcs(user.id))
        return Viewer(name=user.name, admin=user.admin, groups=groups)

    def resolve(
        self,
        config: str,
        parameters: dict[str, Any] | None = None,
        viewer: Viewer | None = None,
        virtual_cluster: str | None = None,
        *,
        check_runnable: bool = True,
    ) -> ResolveOutcome:
        """The dry run: protocol errors and warnings, or the spec with its references resolved
        (as `viewer` sees the marketplace; anonymous by default) and rendered. A valid job that
        cannot run as it is (NotRunnable) is an error too, with code `not-runnable`, and so is
        one the backend can never run (`refused`), judged in `virtual_cluster` when given;
        `check_runnable=False` leaves both to the caller (`submit` checks them on the request
        it launches). Blocks (downloads, store reads): async callers run it in a thread."""
        item_ids: frozenset[str] = frozenset()

        def replace_references(spec: JobSpec) -> tuple[JobSpec | None, list[Issue]]:
            nonlocal item_ids
            resolved = self.references.resolve(spec, viewer or ANONYMOUS)
            item_ids = resolved.item_ids
            return resolved.spec, resolved.issues

        result = resolve_job(config, parameters or {}, references=replace_references)
        spec, issues = result.spec, result.issues
        if spec is not None and virtual_cluster and virtual_cluster != spec.virtual_cluster:
            spec = spec.model_copy(update={"virtual_cluster": virtual_cluster})
        if spec is not None and check_runnable:
            user = viewer.name if viewer is not None else "default"
            problems, simulated = self._unrunnable(spec, user=user)
            issues += simulated
            unknown = self._unknown_vc(spec.virtual_cluster, virtual_cluster_path(spec))
            if unknown is not None:  # said as submission says it, in place of the backend's
                problems = [unknown, *(p for p in problems if p.path != unknown.path)]
            if problems:
                issues.extend(problems)
                spec = None
        return ResolveOutcome(spec=spec, issues=issues, item_ids=item_ids)

    def _unrunnable(self, spec: JobSpec, *, user: str) -> tuple[list[Issue], list[Issue]]:
        """Why the job cannot run as it is, or every reason it can never run on this backend,
        judged on a request of a job that is not stored; and what the backend would simulate."""
        built = self._first_request(spec, job_id="dry-run", user=user)
        if isinstance(built, Issue):
            return [built], []
        return self._refusals(built, spec), simulation_warnings(spec, built, self.backend)

    def _first_request(self, spec: JobSpec, *, job_id: str, user: str) -> LaunchRequest | Issue:
        """The job's first attempt as the backend is to launch it, or why the job cannot run as
        it is (`not-runnable`); as `user` would run it (a v1 codeDir may name `$PAI_USER_NAME`).
        At submission the request built here is the one the first attempt launches."""
        try:
            return launch_request(
                spec, job_id=job_id, user=user, default_fs=default_fs_of(self.backend)
            )
        except NotRunnable as exc:
            return Issue(exc.path, "not-runnable", exc.message)

    def _refusals(self, request: LaunchRequest, spec: JobSpec) -> list[Issue]:
        """Every reason the backend can never run the request (`refused`: bigger than any
        node, data it cannot fetch...), each at its field, if it says so."""
        if isinstance(self.backend, ChecksLaunches):
            return refusal_issues(self.backend.refusal, request, spec)
        return []

    async def submit(
        self,
        user: User,
        config: str,
        parameters: dict[str, Any] | None = None,
        virtual_cluster: str | None = None,
        *,
        made_from: Iterable[str] = (),
        used: Iterable[str] = (),
    ) -> SubmitOutcome:
        """Store the job (WAITING), count its marketplace submits and start running it.

        References are resolved as `user` sees the marketplace. Errors carry their path and
        code: the protocol's and references', `not-runnable`, `forbidden` (virtual cluster),
        `name-in-use` (an unfinished job of that name), `refused` (the backend never could);
        a LaunchRefused later ends it FAILED. Counted submits: `count_job_submit`.
        """
        checked = await asyncio.to_thread(self._check, user, config, parameters, virtual_cluster)
        if not isinstance(checked, _Checked):
            return SubmitOutcome(job=None, issues=checked)
        spec, request = checked.spec, checked.request
        policy = job_policy(spec)
        warnings = [JobWarning(w.segments, w.code, w.message) for w in checked.warnings]
        counted = _Count(user, frozenset({*used, *checked.item_ids}), tuple(made_from), config)
        for tries in range(1, _ID_TRIES + 1):
            machine = ServiceMachine(policy, request.job_id)
            try:
                job, events, count_failed = await asyncio.to_thread(
                    self._store, spec, machine, user, warnings, counted
                )
            except NameInUse as exc:
                return SubmitOutcome(job=None, issues=[Issue("name", "name-in-use", str(exc))])
            except JobExists:
                if tries < _ID_TRIES:  # the id is in the request: build it for the next id
                    request = await asyncio.to_thread(
                        partial(
                            launch_request,
                            spec,
                            job_id=new_job_id(spec.name),
                            user=user.name,
                            default_fs=default_fs_of(self.backend),
                        )
                    )
                continue
            break
        else:
            raise RuntimeError(f"no free job id for {spec.name!r} after {_ID_TRIES} tries")
        await self.recorder.announce(job.id, events, machine.state)
        self.start(spec, machine, user.name, request)
        if count_failed is not None:  # the job runs; the caller still hears the count failed
            raise count_failed
        return SubmitOutcome(job=job, issues=checked.warnings, item_ids=checked.item_ids)

    def _check(
        self,
        user: User,
        config: str,
        parameters: dict[str, Any] | None,
        virtual_cluster: str | None,
    ) -> _Checked | list[Issue]:
        """Everything before storing, in one thread: who the user is (their virtual clusters,
        read once for the marketplace and for the virtual cluster check), resolving, the first
        attempt's request, the virtual cluster, the backend's refusals and what it simulates.
        The job ready to store, or why it cannot be (with the warnings found before)."""
        memberships = self.store.user_vcs(user.id)
        viewer = Viewer(name=user.name, admin=user.admin, groups=frozenset(memberships))
        outcome = self.resolve(config, parameters, viewer, virtual_cluster, check_runnable=False)
        spec = outcome.spec
        if spec is None:
            return outcome.issues
        built = self._first_request(spec, job_id=new_job_id(spec.name), user=user.name)
        if isinstance(built, Issue):
            return [*outcome.warnings, built]
        vc = spec.virtual_cluster
        problem = self._unknown_vc(vc, "virtualCluster") or vc_forbidden(user, vc, memberships)
        problems = [problem] if problem is not None else self._refusals(built, spec)
        if problems:
            return [*outcome.warnings, *problems]
        simulated = simulation_warnings(spec, built, self.backend)
        return _Checked(spec, built, [*outcome.warnings, *simulated], outcome.item_ids)

    def _store(
        self,
        spec: JobSpec,
        machine: ServiceMachine,
        user: User,
        warnings: list[JobWarning],
        counted: _Count,
    ) -> tuple[Job, list[Event], Exception | None]:
        """Store the job, then count its marketplace submits in the same thread; a count that
        fails is handed back, since the job is stored and must run all the same."""
        job, events = self.store.create_job(
            spec,
            machine.snapshot(),
            owner_id=user.id,
            virtual_cluster=spec.virtual_cluster,
            warnings=warnings,
        )
        try:
            MarketplaceService(self.store).count_job_submit(
                counted.viewer, counted.used, counted.made_from, counted.config
            )
        except Exception as exc:
            return job, events, exc
        return job, events, None

    def _unknown_vc(self, vc: str, path: str) -> Issue | None:
        """A virtual cluster this cluster does not have, said the same way by the dry run and
        by submission, when the backend names its virtual clusters."""
        known = getattr(getattr(self.backend, "cluster", None), "vc_names", None)
        if not isinstance(known, tuple) or vc in known:
            return None
        return Issue(
            path,
            "unknown-virtual-cluster",
            f"unknown virtual cluster {vc!r}; known: {', '.join(known) or 'none'}",
        )


OPEN_VIRTUAL_CLUSTER = "default"


@dataclass(frozen=True)
class _Checked:
    """A job that passed every check before it is stored."""

    spec: JobSpec
    request: LaunchRequest  # its first attempt's, under the id it is to be stored with
    warnings: list[Issue]
    item_ids: frozenset[str]  # the marketplace items its references took in


@dataclass(frozen=True)
class _Count:
    """What a stored job counts as marketplace submits (`count_job_submit`'s arguments)."""

    viewer: User
    used: frozenset[str]
    made_from: tuple[str, ...]
    config: str


def vc_forbidden(user: User, vc: str, memberships: Sequence[str]) -> Issue | None:
    """Admins (the local admin too) may use any virtual cluster; everyone may use
    `default` (as in OpenPAI, where it is every user's); others need a membership."""
    if user.admin or vc == OPEN_VIRTUAL_CLUSTER or vc in memberships:
        return None
    mine = ", ".join([OPEN_VIRTUAL_CLUSTER, *memberships])
    return Issue(
        "virtualCluster",
        "forbidden",
        f"user {user.name} may not submit to virtual cluster {vc!r} "
        f"(their virtual clusters: {mine})",
    )


def new_job_id(name: str) -> str:
    """The job's name made safe for labels and paths, and a random suffix."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", name)[:40].strip("-.") or "job"
    return f"{stem}-{secrets.token_hex(4)}"
