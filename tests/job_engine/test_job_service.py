"""The job service end to end: real containers, a real database (SQLite, and PostgreSQL when
PAIGRAPH_TEST_PG is set), the real event bus; a restart in the middle of a job."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import docker
import pytest

from backends.base import Backend, LaunchRequest
from backends.docker import DockerBackend
from server.events import JobNotice, bus_for
from server.jobs import JobMachine, JobState, job_policy
from server.jobs.service import JobService
from server.marketplace.store_lookup import viewer_for
from server.protocol import Issue
from server.shapes.values import INSTANCE_STATE, JOB_STATE, Event, Instance, Job, User
from server.store import Store, open_store
from simulator.containers import OWNER
from simulator.settings import VirtualClusterSpec
from tests.service_support import job_config, ps_worker, spec_of
from tests.simulated import leftovers, nothing_left, settings
from tests.waiting import until_async

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


def service_on(db_url: str, state_dir: Path, owner: str) -> AbstractAsyncContextManager[JobService]:
    """A service as a server process has it: its own store, bus and a Docker backend on
    `state_dir` for `owner`."""
    return service_with(db_url, DockerBackend(settings(state_dir), owner=owner))


@asynccontextmanager
async def service_with(db_url: str, backend: Backend) -> AsyncIterator[JobService]:
    """A service with its own store and bus on `backend`. Leaving the block closes it without
    stopping anything, as a crash would leave the jobs."""
    store = open_store(db_url)
    bus = bus_for(db_url)
    service = JobService(store, backend, bus)
    try:
        await service.start()
        yield service
    finally:
        await service.close()
        await bus.close()
        store.close()


def user(store: Store, name: str, *vcs: str, admin: bool = False) -> User:
    found = store.user_named(name) or store.create_user(name, admin=admin)[0]
    for vc in vcs:
        store.add_membership(found.id, vc)
    return found


async def job_of(store: Store, job_id: str) -> Job:
    job = await asyncio.to_thread(store.get_job, job_id)
    assert job is not None
    return job


async def instances_of(store: Store, job_id: str) -> dict[str, Instance]:
    found = await asyncio.to_thread(store.instances_for_jobs, [job_id])
    return {f"{i.role}-{i.index}": i for i in found[job_id]}


def history(store: Store, job: Job) -> list[Event]:
    events = store.events_after(job.id, 0, limit=1000)
    assert [e.sequence for e in events] == list(range(1, job.last_sequence + 1)), "a gap"
    return events


async def follow(
    store: Store, notices: AsyncIterator[JobNotice], job_id: str, timeout: float = 120
) -> tuple[Job, list[JobNotice]]:
    """Read the job's notices until its final one; each must announce what is already stored."""
    seen: list[JobNotice] = []
    with anyio.fail_after(timeout):
        async for notice in notices:
            if notice.job_id != job_id:
                continue
            job = await job_of(store, job_id)
            assert job.last_sequence >= notice.sequence, "published before it was written"
            seen.append(notice)
            if job.state.is_final and notice.sequence == job.last_sequence:
                return job, seen
    raise AssertionError("the notices ended before the job did")


async def submitted(service: JobService, who: User, text: str, **kw: Any) -> Job:
    outcome = await service.submit(who, text, {}, **kw)
    assert outcome.errors == [] and outcome.job is not None
    assert outcome.job.state is JobState.WAITING
    return outcome.job


async def running(service: JobService, job_id: str, count: int) -> None:
    async def all_running() -> bool:
        found = await instances_of(service.store, job_id)
        return sum(i.state is JobState.RUNNING for i in found.values()) == count

    await until_async(all_running, f"{count} instances of {job_id} running", 90)


async def test_a_ps_worker_job_succeeds_and_its_history_is_stored(
    db_url: str, tmp_path: Path, owner: str
) -> None:
    async with service_on(db_url, tmp_path / "state", owner) as service:
        ann = user(service.store, "ann", "default")
        async with service.bus.subscribe() as notices:
            job = await submitted(service, ann, ps_worker())
            job, seen = await follow(service.store, notices, job.id)
        assert job.state is JobState.SUCCEEDED, job.state_reason
        assert "MinSucceededTaskCount 2 in role worker" in job.state_reason
        assert seen[-1].state == "SUCCEEDED"
        found = await instances_of(service.store, job.id)
        assert {name: (i.state, i.exit_code) for name, i in found.items() if name != "ps-0"} == {
            "worker-0": (JobState.SUCCEEDED, 0),
            "worker-1": (JobState.SUCCEEDED, 0),
        }
        assert found["ps-0"].state is JobState.STOPPED  # served until the workers were done
        assert all(i.node and i.host_ip and i.started_at for i in found.values())
        events = history(service.store, job)
        assert (events[0].type, events[0].state) == (JOB_STATE, JobState.WAITING)
        assert (events[-1].type, events[-1].state) == (JOB_STATE, JobState.SUCCEEDED)
        worker_ends = [e for e in events if e.role == "worker" and e.state is JobState.SUCCEEDED]
        assert sorted(e.index for e in worker_ends) == [0, 1]
        log = "".join([c.data async for c in service.logs(job.id, "worker", 1)])
        assert "worker 1 done" in log
        await nothing_left(owner)


async def test_a_failing_role_ends_the_job_as_its_completion_policy_says(
    db_url: str, tmp_path: Path, owner: str
) -> None:
    def workers(name: str, then: str, **completion: int) -> str:
        role: dict[str, Any] = {
            "instances": 2,
            "commands": ['if [ "$PAI_TASK_INDEX" = 1 ]; then echo failing; exit 3; fi', then],
        }
        if completion:
            role["completion"] = completion
        return job_config({"worker": role}, name=name)

    async with service_on(db_url, tmp_path / "state", owner) as service:
        ann = user(service.store, "ann", "default")
        strict = await submitted(service, ann, workers("strict", "sleep 600"))
        tolerant = await submitted(
            service, ann, workers("tolerant", "sleep 2", minFailedInstances=2)
        )

        async def ended(job_id: str) -> Job | None:
            job = await job_of(service.store, job_id)
            return job if job.state.is_final else None

        strict_job = await until_async(lambda: ended(strict.id), "the strict job ending", 90)
        tolerant_job = await until_async(lambda: ended(tolerant.id), "the tolerant job ending", 90)
        assert strict_job.state is JobState.FAILED
        assert "MinFailedTaskCount 1 in role worker" in strict_job.state_reason
        failed = await instances_of(service.store, strict.id)
        assert (failed["worker-1"].state, failed["worker-1"].exit_code) == (JobState.FAILED, 3)
        assert failed["worker-0"].state is JobState.STOPPED  # no need to wait for it
        assert tolerant_job.state is JobState.SUCCEEDED, tolerant_job.state_reason
        allowed = await instances_of(service.store, tolerant.id)
        assert [(i.state, i.exit_code) for i in allowed.values()] == [
            (JobState.SUCCEEDED, 0),
            (JobState.FAILED, 3),
        ]
        history(service.store, strict_job)
        history(service.store, tolerant_job)
        await nothing_left(owner)


async def test_stopping_a_job_and_who_may(db_url: str, tmp_path: Path, owner: str) -> None:
    sleeper = job_config({"sleeper": {"instances": 2, "commands": ["sleep 600"]}}, name="sleeper")
    async with service_on(db_url, tmp_path / "state", owner) as service:
        store = service.store
        ann = user(store, "ann", "default")
        bob = user(store, "bob", "default")
        root = user(store, "root", admin=True)
        job = await submitted(service, ann, sleeper)
        await running(service, job.id, 2)

        again = await service.submit(ann, sleeper, {})
        assert again.job is None
        assert [(p.path_parts(), p.code) for p in again.errors] == [(["name"], "name-in-use")]
        other = await service.stop(bob, job.id)
        assert [(p.path_parts(), p.code) for p in other.errors] == [(["id"], "forbidden")]
        assert (await job_of(store, job.id)).state is JobState.RUNNING

        stopped = await service.stop(ann, job.id)
        assert stopped.errors == [] and stopped.job is not None
        assert stopped.job.state in (JobState.STOPPING, JobState.STOPPED)  # on record already
        final = await until_async(lambda: _final(store, job.id), "the stopped job ending", 60)
        assert final.state is JobState.STOPPED
        assert "stop requested by ann" in final.state_reason
        assert all(
            i.state is JobState.STOPPED for i in (await instances_of(store, job.id)).values()
        )
        history(store, final)
        late = await service.stop(ann, job.id)
        assert [(p.code, late.job is not None) for p in late.errors] == [("final", True)]
        unknown = await service.stop(root, "no-such-job")
        assert [(p.path_parts(), p.code) for p in unknown.errors] == [(["id"], "not-found")]

        # the name is free once the job ended; an admin may stop anyone's job
        second = await submitted(service, ann, sleeper)
        await running(service, second.id, 2)
        assert (await service.stop(root, second.id)).errors == []
        second_job = await until_async(
            lambda: _final(store, second.id), "the second job ending", 60
        )
        assert second_job.state is JobState.STOPPED
        await nothing_left(owner)


async def _final(store: Store, job_id: str) -> Job | None:
    job = await job_of(store, job_id)
    return job if job.state.is_final else None


async def test_virtual_clusters_are_for_their_members_and_admins(
    db_url: str, tmp_path: Path, owner: str
) -> None:
    quick = job_config({"main": {"commands": ["true"]}}, name="quick")
    vcs = [
        VirtualClusterSpec(name="default", share=50),
        VirtualClusterSpec(name="research", share=50),
    ]
    backend = DockerBackend(settings(tmp_path / "state", virtual_clusters=vcs), owner=owner)
    async with service_with(db_url, backend) as service:
        store = service.store
        carl = user(store, "carl")
        dora = user(store, "dora", "gpu")
        root = user(store, "root", admin=True)
        for who in (carl, dora):
            outcome = await service.submit(who, quick, {}, virtual_cluster="research")
            assert outcome.job is None
            assert [(p.path_parts(), p.code) for p in outcome.errors] == [
                (["virtualCluster"], "forbidden")
            ]
            assert "may not submit to virtual cluster 'research'" in outcome.errors[0].message
            assert "(their virtual clusters: default" in outcome.errors[0].message
        assert store.list_jobs().jobs == []
        # `default` is everyone's, as in OpenPAI
        opened = await submitted(service, carl, quick)
        assert opened.virtual_cluster == "default"
        opened_job = await until_async(lambda: _final(store, opened.id), "the job ending", 90)
        assert opened_job.state is JobState.SUCCEEDED

        # this cluster has no vc "gpu": member, admin or neither, the job is refused at once
        # with the message the dry run gives, and nothing is stored
        for who in (carl, dora, root):
            outcome = await service.submit(who, quick, {}, virtual_cluster="gpu")
            assert outcome.job is None
            said = [(p.path_parts(), p.code, p.message) for p in outcome.errors]
            unknown = "unknown virtual cluster 'gpu'; known: default, research"
            assert said == [(["virtualCluster"], "unknown-virtual-cluster", unknown)]
            dry = service.submissions.resolve(
                quick, virtual_cluster="gpu", viewer=viewer_for(store, who)
            )
            assert [(p.path_parts(), p.message) for p in dry.errors] == [
                (["defaults", "virtualCluster"], unknown)
            ]
        assert [j.id for j in store.list_jobs().jobs] == [opened.id]
        await nothing_left(owner)


async def test_a_job_that_cannot_run_as_written_is_an_error(
    db_url: str, tmp_path: Path, owner: str
) -> None:
    doc = json.loads(job_config({"main": {"commands": ["true"]}}))
    doc["taskRoles"]["main"]["dockerImage"] = "marketplace://name/tf@1"
    async with service_on(db_url, tmp_path / "state", owner) as service:
        ann = user(service.store, "ann", "default")
        outcome = await service.submit(ann, json.dumps(doc), {})
        assert outcome.job is None
        assert [(p.path_parts(), p.code) for p in outcome.errors] == [
            (["taskRoles", "main", "dockerImage"], "not-found")
        ]
        invalid = await service.submit(ann, "protocolVersion: 2\nname: x\ntype: job\n", {})
        assert invalid.errors == [Issue("taskRoles", "required", "`taskRoles` is required")]
        assert service.store.list_jobs().jobs == []


async def test_a_job_goes_on_after_the_service_stopped_without_stopping_it(
    db_url: str, tmp_path: Path, owner: str
) -> None:
    state = tmp_path / "state"
    text = ps_worker("restarted", worker=["sleep 4", "echo worker $PAI_TASK_INDEX done"])
    async with service_on(db_url, state, owner) as first:
        ann = user(first.store, "ann", "default")
        job = await submitted(first, ann, text)
        await running(first, job.id, 3)
    # the service is gone (as after a crash); its containers are not
    exited = {"label": f"{OWNER}={owner}", "status": "exited"}

    async def workers_ended() -> bool:
        found = await asyncio.to_thread(docker.from_env().containers.list, all=True, filters=exited)
        return len(found) == 2

    await until_async(workers_ended, "both workers' containers exited", 60)
    # a restart that died as soon as its backend had taken the containers back: the workers'
    # exits are now on the backend's record only, their containers are gone
    crashed = DockerBackend(settings(state), owner=owner)
    await crashed.start()
    await crashed.close()
    assert len((await asyncio.to_thread(leftovers, owner))[0]) == 1  # the ps, still serving

    async with service_on(db_url, state, owner) as second:
        async with second.bus.subscribe(job.id) as notices:
            current = await job_of(second.store, job.id)
            if not current.state.is_final:
                current, _ = await follow(second.store, notices, job.id)
        assert current.state is JobState.SUCCEEDED, current.state_reason
        found = await instances_of(second.store, job.id)
        assert [(n, i.state, i.exit_code) for n, i in found.items() if n != "ps-0"] == [
            ("worker-0", JobState.SUCCEEDED, 0),
            ("worker-1", JobState.SUCCEEDED, 0),
        ]
        assert found["ps-0"].state is JobState.STOPPED
        events = history(second.store, current)
        ends = [(e.role, e.index) for e in events if e.type == INSTANCE_STATE and e.state.is_final]
        assert sorted(ends) == [("ps", 0), ("worker", 0), ("worker", 1)]  # each ended once
        log = "".join([c.data async for c in second.logs(job.id, "worker", 0)])
        assert "worker 0 done" in log
        await nothing_left(owner)


async def test_jobs_cut_short_before_they_reached_the_backend_run_after_a_restart(
    db_url: str, tmp_path: Path, owner: str
) -> None:
    store = open_store(db_url)
    try:
        ann = user(store, "ann", "default")
        # stored, then the server stopped before the job's runner began
        unstarted = spec_of(job_config({"main": {"commands": ["true"]}}, name="unstarted"))
        # ids of this test's own: Docker names containers after the job, and the other
        # database's run of this test may be starting the same job on the same engine
        fresh = JobMachine(job_policy(unstarted), f"unstarted-{owner}")
        store.create_job(unstarted, fresh.snapshot(), owner_id=ann.id)
        # its first attempt saved, then the server stopped before asking the backend
        unlaunched = spec_of(job_config({"main": {"commands": ["true"]}}, name="unlaunched"))
        machine = JobMachine(job_policy(unlaunched), f"unlaunched-{owner}")
        store.create_job(unlaunched, machine.snapshot(), owner_id=ann.id)
        saved = len(machine.transitions)
        machine.start()
        store.save_machine(machine.job_id, machine.snapshot(), machine.transitions[saved:])
    finally:
        store.close()
    async with service_on(db_url, tmp_path / "state", owner) as service:
        for job_id in (fresh.job_id, machine.job_id):
            job = await until_async(partial(_final, service.store, job_id), f"{job_id} ending", 90)
            assert (job.state, job.attempt, job.retries) == (JobState.SUCCEEDED, 1, 0), (
                job.state_reason
            )
            history(service.store, job)
        await nothing_left(owner)


class Counting(DockerBackend):
    """The real backend, noting every request it is asked to judge and every one it launches."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.judged: list[LaunchRequest] = []
        self.launched: list[tuple[LaunchRequest, int]] = []  # with how many were judged by then

    def refusal(self, request: LaunchRequest) -> str | None:
        self.judged.append(request)
        return super().refusal(request)

    async def launch(self, request: LaunchRequest) -> None:
        self.launched.append((request, len(self.judged)))
        await super().launch(request)


async def test_the_first_attempt_launches_the_request_checked_at_submission(
    db_url: str, tmp_path: Path, owner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Built once, the backend asked once before the launch, under the stored job's id: also
    when the first id drawn was taken (the request is built again for the next one)."""
    backend = Counting(settings(tmp_path / "state"), owner=owner)
    async with service_with(db_url, backend) as service:
        ann = user(service.store, "ann", "default")
        first = await submitted(service, ann, job_config({"main": {"commands": ["true"]}}))
        await until_async(lambda: _final(service.store, first.id), "the first job ending", 60)
        ((request, judged),) = backend.launched
        assert judged == 1 and backend.judged[0] is request and request.job_id == first.id
        assert request.attempt == 1 and request.user == "ann"

        ids = iter([first.id, "second-0a1b2c3d"])
        monkeypatch.setattr("server.jobs.submission.new_job_id", lambda name: next(ids))
        backend.judged.clear()
        backend.launched.clear()
        text = job_config({"main": {"commands": ["true"]}}, name="second")
        second = await submitted(service, ann, text)
        assert second.id == "second-0a1b2c3d"
        await until_async(lambda: _final(service.store, second.id), "the second job ending", 60)
        ((request, judged),) = backend.launched
        assert judged == 1 and request.job_id == second.id and request.attempt == 1
        assert backend.judged[0].job_id == first.id  # judged under the id that was taken
        await nothing_left(owner)
