"""The simulator backend on a real Docker engine: real containers, networks and ports."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import threading
import uuid
from collections import defaultdict
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import docker
import httpx
import pytest

from backends import docker_records as records
from backends.base import (
    BackendError,
    EventKind,
    Fetch,
    Hooks,
    ImageAuth,
    InstanceKey,
    InstanceStatus,
    LaunchRefused,
    Material,
    UnknownInstance,
)
from simulator.containers import OWNER
from tests.simulated import (
    IMAGE,
    Collector,
    backend,
    job,
    leftovers,
    log_text,
    nothing_left,
    role,
)
from tests.waiting import until_async

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

# The ps serves a CGI endpoint on its http port: every POST body is recorded and answered;
# it exits once it has heard from both workers and from the host.
PS_SERVER = [
    "mkdir -p /tmp/www/cgi-bin",
    "printf '%s\\n' '#!/bin/sh' 'echo Content-Type: text/plain' 'echo'"
    " 'body=$(head -c \"$CONTENT_LENGTH\")' 'echo \"$body\" >> /tmp/heard'"
    " 'echo \"ack $body from $PAI_CURRENT_TASK_ROLE_NAME\"' > /tmp/www/cgi-bin/talk",
    "chmod +x /tmp/www/cgi-bin/talk && touch /tmp/heard",
    "httpd -p $PAI_CONTAINER_HOST_PORT -h /tmp/www",
    "while [ $(wc -l < /tmp/heard) -lt 3 ]; do sleep 0.2; done",
    "sort /tmp/heard",
]
WORKER = [
    "ps_address=${PAI_TASK_ROLE_ps_HOST_LIST%%,*}",
    "for i in $(seq 1 100); do"
    ' wget -q -O /tmp/answer --post-data "worker $PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"'
    " http://$ps_address/cgi-bin/talk && break; sleep 0.2; done",
    "cat /tmp/answer",
    'grep -q "ack worker $PAI_TASK_INDEX from ps" /tmp/answer',
]


async def test_ps_and_workers_talk_over_their_allocated_ports(tmp_path: Path) -> None:
    request = job(role("ps", PS_SERVER), role("worker", WORKER, instances=2))
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        await sim.launch(request)
        ps_key = InstanceKey(job_id=request.job_id, attempt=1, role="ps", index=0)
        await events.until(lambda: ps_key in events.started(request))
        http_port = events.started(request)[ps_key].placement.ports["http"][0]

        def talk() -> httpx.Response | None:
            try:
                return httpx.post(
                    f"http://127.0.0.1:{http_port}/cgi-bin/talk", content="host", timeout=2
                )
            except httpx.TransportError:
                return None

        # the host reaches the ps at 127.0.0.1:<its allocated port>
        answer = (await until_async(talk, "the ps answering the host", 30)).text
        ended = await events.all_ended(request)
        assert answer.strip() == "ack host from ps"
        assert {k.role: e.exit_code for k, e in ended.items()} == {"ps": 0, "worker": 0}
        assert all(e.kind is EventKind.EXITED for e in ended.values())
        ps_log = await log_text(sim, ps_key)
        assert "host\nworker 0\nworker 1" in ps_log
        worker_log = await log_text(
            sim, InstanceKey(job_id=request.job_id, attempt=1, role="worker", index=1)
        )
        assert "ack worker 1 from ps" in worker_log
        addresses = {
            e.key: e.placement.host_ip for e in events.of(request) if e.kind is EventKind.PLACED
        }
        assert len(set(addresses.values())) == 3  # every instance has its own address
        await sim.forget(request.job_id, 1)
        events.close()
        assert leftovers(sim.owner) == ([], [])


async def test_the_container_sees_its_environment_and_the_sourceable_file(tmp_path: Path) -> None:
    commands = [
        "env | grep ^PAI_ | sort > /tmp/process.env",
        "(env -i sh -c '. /usr/local/pai/runtime_env.sh; env' | grep ^PAI_ | sort) > /tmp/file.env",
        "diff /tmp/process.env /tmp/file.env && echo SAME",
        "echo ports=$PAI_CONTAINER_HOST_PORT_LIST",
        "echo hosts=$PAI_TASK_ROLE_trainer_HOST_LIST",
        "echo grpc=$PAI_CONTAINER_HOST_grpc_PORT_LIST",
        "echo instances=$PAI_TASK_ROLE_INSTANCES",
        "echo resource=$PAI_RESOURCE_trainer",
        "echo workdir=$(pwd)",
    ]
    request = job(
        role("trainer", commands, instances=2, ports=[("grpc", 3)], cpu=2, memory_mb=256),
        role("Eval_Role", ["true"]),
    )
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        await sim.launch(request)
        ended = await events.all_ended(request)
        assert {e.exit_code for e in ended.values()} == {0}
        placed = {e.key: e.placement for e in events.of(request) if e.kind is EventKind.PLACED}
        key = InstanceKey(job_id=request.job_id, attempt=1, role="trainer", index=1)
        text = await log_text(sim, key)
        mine = placed[key]
        grpc = ",".join(map(str, mine.ports["grpc"]))
        assert "SAME" in text
        assert f"grpc={grpc}\n" in text
        assert len(mine.ports["grpc"]) == 3
        assert (
            f"ports=grpc:{grpc};ssh:{mine.ports['ssh'][0]};http:{mine.ports['http'][0]};\n" in text
        )
        hosts = ",".join(
            f"{placed[k].host_ip}:{placed[k].ports['http'][0]}"
            for k in sorted((k for k in placed if k.role == "trainer"), key=lambda k: k.index)
        )
        assert f"hosts={hosts}\n" in text
        assert "instances=trainer:0,trainer:1,Eval_Role:0\n" in text
        assert "resource=0,2,256,16\n" in text
        assert "workdir=/work\n" in text
        await sim.forget(request.job_id, 1)
        events.close()


async def test_twenty_concurrent_jobs_never_share_ports_or_overcommit_nodes(tmp_path: Path) -> None:
    # 2 nodes x 4 cpu: each job takes 3 cpu (1 + 2 instances), so at most 2 run at a time
    overrides = {"node_count": 2, "node": {"cpu": 4, "memory_mb": 4096}}
    requests = [
        job(role("a", ["sleep 0.5"]), role("b", ["sleep 0.5"], instances=2, ports=[("p", 2)]))
        for _ in range(20)
    ]
    async with backend(tmp_path, **overrides) as sim:
        events = Collector(sim)
        await asyncio.gather(*(sim.launch(r) for r in requests))
        for request in requests:
            ended = await events.all_ended(request, timeout=240)
            assert {e.exit_code for e in ended.values()} == {0}, ended
        # replay the event log: cpu per node and ports held by live instances
        used: dict[str, int] = defaultdict(int)
        held: dict[int, InstanceKey] = {}
        live: dict[InstanceKey, tuple[str, list[int]]] = {}
        for event in events.events:
            if event.kind is EventKind.PLACED:
                ports = [p for group in event.placement.ports.values() for p in group]
                for port in ports:
                    assert port not in held, f"port {port} given to {event.key} and {held[port]}"
                    held[port] = event.key
                used[event.placement.node] += 1
                assert used[event.placement.node] <= 4
                live[event.key] = (event.placement.node, ports)
            elif event.kind in (EventKind.EXITED, EventKind.STOPPED) and event.key in live:
                node, ports = live.pop(event.key)
                used[node] -= 1
                for port in ports:
                    del held[port]
        waits = [e for e in events.events if e.kind is EventKind.WAITING]
        assert waits and "cpu" in waits[0].reason
        for request in requests:
            await sim.forget(request.job_id, 1)
        events.close()
        assert leftovers(sim.owner) == ([], [])


async def test_failures_are_reported_with_their_cause(tmp_path: Path) -> None:
    oom = job(role("hog", ["dd if=/dev/zero of=/dev/null bs=200M count=1"], memory_mb=32))
    failing = job(role("sad", ["echo about to fail", "exit 3"]))
    missing = job(role("ghost", ["true"], image="paigraph/does-not-exist:1"))
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        for request in (oom, failing, missing):
            await sim.launch(request)
        [oom_end] = (await events.all_ended(oom)).values()
        [fail_end] = (await events.all_ended(failing)).values()
        [missing_end] = (await events.all_ended(missing)).values()
        assert oom_end.kind is EventKind.EXITED and oom_end.oom_killed, oom_end.reason
        assert oom_end.exit_code == 137, oom_end.reason
        assert "its limit of 32 MB exceeded" in oom_end.reason
        assert (fail_end.kind, fail_end.exit_code) == (EventKind.EXITED, 3), fail_end.reason
        assert "about to fail" in await log_text(sim, fail_end.key)
        assert missing_end.kind is EventKind.START_FAILED, missing_end.reason
        assert "paigraph/does-not-exist:1" in missing_end.reason
        assert "not on this machine" in missing_end.reason
        for request in (oom, failing, missing):
            await sim.forget(request.job_id, 1)
        events.close()


async def test_a_job_that_can_never_fit_is_refused_at_launch(tmp_path: Path) -> None:
    async with backend(tmp_path) as sim:
        with pytest.raises(LaunchRefused, match="largest node has 32 cpu"):
            await sim.launch(job(role("big", ["true"], cpu=33)))
        with pytest.raises(LaunchRefused, match="scheme 's3'"):
            await sim.launch(
                job(
                    role(
                        "reader",
                        ["true"],
                        materials=[
                            Material(name="logs", kind=Fetch.DOWNLOAD, uris=["s3://bucket/logs"])
                        ],
                    )
                )
            )


@pytest.mark.alone  # it times the stop
async def test_stop_in_the_middle_ends_every_instance_and_leaves_nothing(tmp_path: Path) -> None:
    request = job(role("sleeper", ["sleep 1000"], instances=3))
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        await sim.launch(request)
        await events.until(lambda: len(events.started(request)) == 3)
        loop = asyncio.get_running_loop()
        began = loop.time()
        await sim.stop(request.job_id, 1, grace_seconds=5)
        ended = await events.all_ended(request, timeout=30)
        assert loop.time() - began < 5  # SIGTERM reached the user command; no SIGKILL needed
        assert {e.kind for e in ended.values()} == {EventKind.STOPPED}
        assert {e.exit_code for e in ended.values()} == {143}
        await sim.forget(request.job_id, 1)
        events.close()
        assert leftovers(sim.owner) == ([], [])


@pytest.mark.alone  # its `sleep 3` must outlive a restart, which the other worker's load slows
async def test_a_restarted_backend_adopts_running_instances_and_removes_orphans(
    tmp_path: Path, owner: str
) -> None:
    request = job(role("slow", ["sleep 3", "echo done"], instances=2), role("fast", ["exit 4"]))
    async with backend(tmp_path, owner=owner) as first:
        events = Collector(first)
        await first.launch(request)
        await events.until(lambda: len(events.ended(request)) == 1)  # "fast" ended
        await events.until(lambda: len(events.started(request)) == 3)
        events.close()
    # a container of this owner that no attempt on record owns: left by a crash mid-launch
    subprocess.run(
        ["docker", "run", "-d", "--label", f"{OWNER}={owner}", "--label", "io.paigraph.managed=1",
         "--label", "io.paigraph.job=nobody", "--label", "io.paigraph.attempt=1",
         "--label", "io.paigraph.role=x", "--label", "io.paigraph.index=0",
         "paigraph/busybox:test", "sleep", "1000"],
        check=True, capture_output=True,
    )  # fmt: skip
    async with backend(tmp_path, owner=owner) as second:
        events = Collector(second)
        reports = {r.key: r for r in await second.reconcile()}
        assert {k.role: r.status for k, r in reports.items()} == {
            "slow": InstanceStatus.RUNNING,
            "fast": InstanceStatus.EXITED,
        }
        assert (
            reports[InstanceKey(job_id=request.job_id, attempt=1, role="fast", index=0)].exit_code
            == 4
        )
        containers, _ = leftovers(owner)
        assert len(containers) == 2  # the orphan is gone; the two sleepers remain
        await events.until(lambda: len(events.ended(request)) == 2, timeout=30)
        assert {e.exit_code for e in events.ended(request).values()} == {0}
        key = InstanceKey(job_id=request.job_id, attempt=1, role="slow", index=1)
        assert "done" in await log_text(second, key)
        await second.forget(request.job_id, 1)
        events.close()
    assert leftovers(owner) == ([], [])


async def test_logs_can_be_tailed_and_followed(tmp_path: Path) -> None:
    request = job(role("talker", ["for i in 1 2 3 4 5; do echo line $i; sleep 0.3; done"]))
    key = InstanceKey(job_id=request.job_id, attempt=1, role="talker", index=0)
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        await sim.launch(request)
        await events.until(lambda: len(events.started(request)) == 1)
        followed = "".join([c.data async for c in sim.logs(key, follow=True)])
        assert [line for line in followed.splitlines() if line.startswith("line")] == [
            f"line {i}" for i in range(1, 6)
        ]
        tail = "".join([c.data async for c in sim.logs(key, tail=2)])
        assert len(tail.splitlines()) == 2
        assert followed.endswith(tail)
        offset = followed.index("line 3")
        rest = "".join([c.data async for c in sim.logs(key, offset=offset)])
        assert rest.startswith("line 3") and rest == followed[offset:]
        await sim.forget(request.job_id, 1)
        events.close()


@pytest.fixture
def http_site(tmp_path: Path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "numbers.csv").write_text("1,2,3\n")
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(site))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _git_repo(path: Path) -> str:
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    (path / "train.sh").write_text("echo training version 1\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    first = subprocess.run(
        [*git[:3], "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    (path / "train.sh").write_text("echo training version 2\n")
    subprocess.run([*git, "commit", "-qam", "two"], check=True)
    return first


async def test_data_script_and_storage_prerequisites_are_in_place(
    tmp_path: Path, http_site: str
) -> None:
    repo = tmp_path / "repo"
    first_commit = _git_repo(repo)
    materials = [
        Material(name="numbers", kind=Fetch.DOWNLOAD, uris=[f"{http_site}/numbers.csv"]),
        Material(name="code", kind=Fetch.CLONE, uris=[f"file://{repo}@{first_commit}"]),
        Material(name="results", kind=Fetch.MOUNT),
    ]
    commands = [
        "cat numbers/numbers.csv",
        "sh code/train.sh",
        "echo result-$PAI_TASK_INDEX > results/out-$PAI_TASK_INDEX",
    ]
    hooks = Hooks(on_start=["echo starting-hook"], on_success=["echo success-hook"])
    request = job(role("reader", commands, instances=2, materials=materials, hooks=hooks))
    async with backend(
        tmp_path / "state", allowed_file_roots=[repo], allowed_fetch_networks=["127.0.0.1"]
    ) as sim:
        events = Collector(sim)
        await sim.launch(request)
        ended = await events.all_ended(request)
        assert {e.exit_code for e in ended.values()} == {0}, ended
        text = await log_text(
            sim, InstanceKey(job_id=request.job_id, attempt=1, role="reader", index=0)
        )
        assert "1,2,3" in text
        assert "training version 1" in text
        assert text.index("starting-hook") < text.index("1,2,3") < text.index("success-hook")
        storage = Path(sim.settings.state_dir) / "storage" / "users" / request.user / "results"
        assert sorted(p.read_text() for p in storage.iterdir()) == ["result-0\n", "result-1\n"]
        await sim.forget(request.job_id, 1)
        events.close()


# A task retry without gang allocation. Instance 1 fails on its first run and serves its http
# port on the second; instance 0 runs all along and reaches it at the address and port that
# its own environment named when it started, before instance 1 was started again.
RETRIED = [
    'if [ "$PAI_TASK_INDEX" = 0 ]; then',
    "  peer=${PAI_TASK_ROLE_w_HOST_LIST#*,}",
    "  for i in $(seq 1 300); do",
    '    timeout 5 wget -q -O /tmp/answer "http://$peer/hello.txt" && break; sleep 0.2',
    "  done",
    '  grep -q "second run of 1" /tmp/answer || exit 7',
    '  echo "reached $peer: $(cat /tmp/answer)"; touch results/seen; exit 0',
    "fi",
    "if [ -f results/tried-$PAI_TASK_INDEX ]; then",
    '  echo "second run at $PAI_CONTAINER_HOST_IP"; mkdir -p /tmp/www',
    '  echo "second run of $PAI_TASK_INDEX" > /tmp/www/hello.txt',
    "  httpd -p $PAI_CONTAINER_HOST_PORT -h /tmp/www",
    "  for i in $(seq 1 300); do [ -f results/seen ] && break; sleep 0.2; done",
    "  exit 0",
    "fi",
    'touch results/tried-$PAI_TASK_INDEX; echo "first run at $PAI_CONTAINER_HOST_IP"; exit 5',
]


def _runs(events: Collector, key: InstanceKey) -> list[EventKind]:
    return [e.kind for e in events.events if e.key == key]


async def test_relaunch_runs_one_failed_instance_again_where_its_peers_expect_it(
    tmp_path: Path,
) -> None:
    results = Material(name="results", kind=Fetch.MOUNT)
    request = job(role("w", RETRIED, instances=2, materials=[results]))
    first = InstanceKey(job_id=request.job_id, attempt=1, role="w", index=0)
    retried = InstanceKey(job_id=request.job_id, attempt=1, role="w", index=1)
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        await sim.launch(request)
        await events.until(lambda: retried in events.ended(request))
        failed = events.ended(request)[retried]
        assert (failed.kind, failed.exit_code) == (EventKind.EXITED, 5)
        assert first not in events.ended(request)
        with pytest.raises(BackendError, match=r"w-0 of attempt 1 .* has not ended"):
            await sim.relaunch(first)
        with pytest.raises(UnknownInstance):
            await sim.relaunch(retried.model_copy(update={"index": 2}))
        await sim.relaunch(retried, 2)
        await sim.relaunch(retried, 2)  # asked again (a restarted server): nothing more starts
        with pytest.raises(BackendError, match="has not ended"):
            await sim.relaunch(retried, 3)  # the second run is under way
        await events.until(lambda: _runs(events, retried).count(EventKind.EXITED) == 2)
        ended = await events.all_ended(request)
        assert {k.index: (e.kind, e.exit_code) for k, e in ended.items()} == {
            0: (EventKind.EXITED, 0),
            1: (EventKind.EXITED, 0),
        }
        assert _runs(events, retried) == [
            EventKind.PLACED,
            EventKind.STARTED,
            EventKind.EXITED,
            EventKind.PLACED,
            EventKind.STARTED,
            EventKind.EXITED,
        ]
        # each event names the run it is about, so a late copy of the first end is told apart
        assert [e.run for e in events.events if e.key == retried] == [1, 1, 1, 2, 2, 2]
        assert {e.run for e in events.events if e.key == first} == {1}
        placed = [e.placement for e in events.of(request) if e.kind is EventKind.PLACED]
        assert placed[1] == placed[2]  # w-1: same node, address and ports the second time
        log = await log_text(sim, retried)
        address = placed[1].host_ip
        assert log.index(f"first run at {address}\n") < log.index("[paigraph] task retry 1")
        assert log.index("[paigraph] task retry 1") < log.index(f"second run at {address}\n")
        peer = f"{address}:{placed[1].ports['http'][0]}"
        assert f"reached {peer}: second run of 1" in await log_text(sim, first)
        reports = {r.key: r for r in await sim.reconcile()}
        assert (reports[retried].status, reports[retried].exit_code, reports[retried].run) == (
            InstanceStatus.EXITED,
            0,
            2,
        )
        await sim.forget(request.job_id, 1)
        events.close()
        assert leftovers(sim.owner) == ([], [])


@pytest.mark.alone  # its second run's `sleep 2` must outlive a restart of the backend
async def test_a_restarted_backend_tells_the_run_of_a_relaunched_instance(
    tmp_path: Path, owner: str
) -> None:
    """The run a relaunch was asked for is kept with its container: a backend started again
    reports it and names it on the run's end, and is not made to start it a second time."""
    results = Material(name="results", kind=Fetch.MOUNT)
    twice = "if [ -f results/once ]; then sleep 2; exit 0; fi; touch results/once; exit 3"
    request = job(role("w", [twice], materials=[results]))
    retried = InstanceKey(job_id=request.job_id, attempt=1, role="w", index=0)
    async with backend(tmp_path, owner=owner) as first:
        events = Collector(first)
        await first.launch(request)
        await events.until(lambda: retried in events.ended(request))
        await first.relaunch(retried, 2)
        await events.until(lambda: _runs(events, retried).count(EventKind.STARTED) == 2)
        events.close()
    async with backend(tmp_path, owner=owner) as second:
        events = Collector(second)
        (found,) = await second.reconcile()
        assert (found.status, found.run) == (InstanceStatus.RUNNING, 2)
        await second.relaunch(retried, 2)  # a relaunch carried out again after a restart
        await events.until(lambda: retried in events.ended(request))
        end = events.ended(request)[retried]
        assert (end.kind, end.exit_code, end.run) == (EventKind.EXITED, 0, 2)
        await second.forget(request.job_id, 1)
        events.close()
    assert leftovers(owner) == ([], [])


async def test_a_relaunch_cut_short_by_a_restart_is_started_again_not_lost(
    tmp_path: Path, owner: str
) -> None:
    """The server stopped while an instance was being started again on its own: its run was
    recorded as being started, its gate closed, and no container of it made. Its commands never
    ran, so the restarted backend starts that run again; declaring it lost would have made the
    job engine retry it once more than the instance ran."""
    results = Material(name="results", kind=Fetch.MOUNT)
    twice = "if [ -f results/once ]; then echo second run; exit 0; fi; touch results/once; exit 3"
    request = job(role("w", [twice], materials=[results]), role("peer", ["sleep 4"]))
    retried = InstanceKey(job_id=request.job_id, attempt=1, role="w", index=0)
    async with backend(tmp_path, owner=owner) as first:
        events = Collector(first)
        await first.launch(request)
        await events.until(lambda: retried in events.ended(request))
        placement = events.ended(request)[retried].placement
        directory = first._instance_dir(retried)
        events.close()
    # what `relaunch` and the start of its run leave on disk when the process dies before the
    # container is made: no exit record, the gate closed, the run recorded as being started
    records.remove_exit(directory)
    records.close_gate(directory)
    records.write_run(directory, records.RunRecord(2, False, placement, 2))
    async with backend(tmp_path, owner=owner) as second:
        events = Collector(second)
        await events.all_ended(request)
        told = [(e.kind, e.run) for e in events.events if e.key == retried]
        assert told == [
            (EventKind.PLACED, 2),
            (EventKind.STARTED, 2),
            (EventKind.EXITED, 2),
        ]
        assert events.ended(request)[retried].exit_code == 0
        assert "second run" in await log_text(second, retried)
        await second.forget(request.job_id, 1)
        events.close()
    assert leftovers(owner) == ([], [])


async def test_relaunch_after_every_peer_ended_gets_a_network_again(tmp_path: Path) -> None:
    commands = [
        'if [ "$PAI_TASK_INDEX" = 0 ] || [ -f results/tried ]; then',
        '  echo "ran at $PAI_CONTAINER_HOST_IP"; exit 0',
        "fi",
        "touch results/tried; exit 2",
    ]
    results = Material(name="results", kind=Fetch.MOUNT)
    request = job(role("w", commands, instances=2, materials=[results]))
    retried = InstanceKey(job_id=request.job_id, attempt=1, role="w", index=1)
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        await sim.launch(request)
        ended = await events.all_ended(request)
        assert (ended[retried].kind, ended[retried].exit_code) == (EventKind.EXITED, 2), [
            e.reason for e in ended.values()
        ]
        await nothing_left(sim.owner, 10)
        await sim.relaunch(retried)
        await events.until(lambda: _runs(events, retried).count(EventKind.EXITED) == 2)
        second = events.ended(request)[retried]
        assert (second.kind, second.exit_code) == (EventKind.EXITED, 0), second.reason
        placement = [e.placement for e in events.of(request) if e.kind is EventKind.PLACED][-1]
        assert f"ran at {placement.host_ip}\n" in await log_text(sim, retried)
        [report] = [r for r in await sim.reconcile() if r.key == retried]
        assert (report.status, report.exit_code) == (InstanceStatus.EXITED, 0)
        # the network made for the second run is gone with it
        await nothing_left(sim.owner, 10)
        await sim.forget(request.job_id, 1)
        events.close()


async def test_relaunch_waits_for_room_and_a_stop_ends_the_wait(tmp_path: Path) -> None:
    overrides = {"node_count": 1, "node": {"cpu": 2, "memory_mb": 4096}}
    request = job(role("w", ['[ "$PAI_TASK_INDEX" = 0 ] && sleep 1000', "exit 3"], instances=2))
    other = job(role("hog", ["sleep 1000"]))
    retried = InstanceKey(job_id=request.job_id, attempt=1, role="w", index=1)
    async with backend(tmp_path, **overrides) as sim:
        events = Collector(sim)
        await sim.launch(request)
        await events.until(lambda: retried in events.ended(request))
        await sim.launch(other)  # takes the cpu w-1 gave back
        await events.until(lambda: len(events.started(other)) == 1)
        await sim.relaunch(retried)
        await events.until(lambda: EventKind.WAITING in _runs(events, retried))
        [waiting] = [e for e in events.of(request) if e.kind is EventKind.WAITING]
        assert waiting.key == retried
        assert "cpu" in waiting.reason
        assert [r.status for r in await sim.reconcile() if r.key == retried] == [
            InstanceStatus.PENDING
        ]
        await sim.stop(request.job_id, 1, grace_seconds=1)
        ended = await events.all_ended(request, timeout=30)
        assert ended[retried].kind is EventKind.STOPPED
        assert ended[retried].reason == "stopped while waiting to run again"
        assert EventKind.PLACED not in _runs(events, retried)[3:]
        with pytest.raises(BackendError, match="is being stopped"):
            await sim.relaunch(retried)
        await sim.stop(other.job_id, 1, grace_seconds=1)
        await events.all_ended(other, timeout=30)
        for done in (request, other):
            await sim.forget(done.job_id, 1)
        events.close()
        assert leftovers(sim.owner) == ([], [])


async def test_instances_resolve_peers_by_alias_and_get_their_limits(tmp_path: Path) -> None:
    commands = [
        'nslookup worker-1 2>/dev/null | grep -q "$PAI_HOST_IP_worker_1" && echo ALIAS-OK',
        "echo shm=$(df -m /dev/shm | tail -1 | awk '{print $2}')",
        "echo memory=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null"
        " || cat /sys/fs/cgroup/memory.max)",
        "echo pids=$(cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max)",
        "echo init=$(cat /proc/1/comm)",
        "mount -t tmpfs none /mnt 2>/dev/null || echo UNPRIVILEGED",
    ]
    request = job(role("worker", commands, instances=2, memory_mb=128))
    async with backend(tmp_path, pids_limit=200) as sim:
        events = Collector(sim)
        await sim.launch(request)
        ended = await events.all_ended(request)
        assert {e.exit_code for e in ended.values()} == {0}
        text = await log_text(
            sim, InstanceKey(job_id=request.job_id, attempt=1, role="worker", index=0)
        )
        assert "ALIAS-OK" in text
        assert "shm=16\n" in text
        assert f"memory={128 * 1024 * 1024}\n" in text
        assert "pids=200\n" in text
        assert "init=docker-init\n" in text
        assert "UNPRIVILEGED" in text
        await sim.forget(request.job_id, 1)
        events.close()


async def test_limits_beyond_this_machine_are_clipped_and_the_user_is_told(tmp_path: Path) -> None:
    host_cpus = docker.from_env().info()["NCPU"]
    request = job(role("wide", ["cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || true"],
                       cpu=host_cpus + 1))  # fmt: skip
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        await sim.launch(request)
        ended = await events.all_ended(request)
        assert {e.exit_code for e in ended.values()} == {0}
        [placed] = [e for e in events.of(request) if e.kind is EventKind.PLACED]
        assert f"cpu {host_cpus + 1} -> {host_cpus}" in placed.reason
        await sim.forget(request.job_id, 1)
        events.close()


def _other_address() -> str | None:
    """An address of this machine that is not loopback, or None when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))  # no packet is sent: it only picks a route
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def _answers(address: str, port: int) -> bool:
    try:
        return httpx.get(f"http://{address}:{port}/", timeout=2).status_code < 500
    except httpx.TransportError:
        return False


async def _published(tmp_path: Path, **overrides: str) -> tuple[list[dict], int, dict[str, bool]]:
    """Serve on an instance's http port; its bindings as Docker has them, the port, and
    whether loopback and this machine's other address reach it."""
    serve = ["mkdir -p /tmp/www && echo hi > /tmp/www/index.html",
             "httpd -f -p $PAI_CONTAINER_HOST_PORT -h /tmp/www"]  # fmt: skip
    request = job(role("web", serve))
    other = _other_address()
    async with backend(tmp_path, **overrides) as sim:
        events = Collector(sim)
        await sim.launch(request)
        key = InstanceKey(job_id=request.job_id, attempt=1, role="web", index=0)
        await events.until(lambda: key in events.started(request))
        port = events.started(request)[key].placement.ports["http"][0]
        await until_async(
            lambda: _answers("127.0.0.1", port), "the host reaching the instance on loopback", 10
        )
        reached = {"127.0.0.1": True}
        if other is not None:
            reached[other] = _answers(other, port)
        [info] = docker.from_env().api.containers(filters={"label": f"{OWNER}={sim.owner}"})
        bindings = docker.from_env().api.inspect_container(info["Id"])["HostConfig"]
        await sim.stop(request.job_id, 1, 0)
        await events.all_ended(request)
        await sim.forget(request.job_id, 1)
        events.close()
    return bindings["PortBindings"][f"{port}/tcp"], port, reached


async def test_ports_are_published_on_loopback_only_unless_the_settings_say_otherwise(
    tmp_path: Path,
) -> None:
    bindings, port, reached = await _published(tmp_path / "default")
    assert bindings == [{"HostIp": "127.0.0.1", "HostPort": str(port)}]
    assert reached.pop("127.0.0.1"), "the host does not reach the instance on loopback"
    assert not any(reached.values()), f"reachable from the network: {reached}"

    bindings, port, reached = await _published(tmp_path / "open", publish_address="0.0.0.0")
    assert bindings == [{"HostIp": "0.0.0.0", "HostPort": str(port)}]
    assert all(reached.values()), reached


@contextlib.contextmanager
def _port_thief(sim, role_name: str, label: str = "http"):
    """Takes the `label` port the allocator gives `role_name`'s first instance, the first
    time, before Docker can publish it: another program winning the race. Yields the ports
    taken."""
    taken: list[int] = []
    sockets: list[socket.socket] = []
    allocate_many = sim.ports.allocate_many

    def allocate_and_steal(asks):
        result = allocate_many(asks)
        for (owner, _), ports in zip(asks, result, strict=True):
            if not taken and owner.endswith(f"/{role_name}/0"):
                thief = socket.socket()
                thief.bind(("0.0.0.0", ports[label][0]))
                thief.listen()
                sockets.append(thief)
                taken.append(ports[label][0])
        return result

    sim.ports.allocate_many = allocate_and_steal
    try:
        yield taken
    finally:
        for thief in sockets:
            thief.close()


async def test_a_port_taken_before_docker_publishes_it_is_replaced_before_any_command_runs(
    tmp_path: Path,
) -> None:
    request = job(
        role("ps", ["echo ps serves on $PAI_CONTAINER_HOST_PORT"]),
        role("worker", ["echo worker sees ps at $PAI_TASK_ROLE_ps_HOST_LIST"], instances=2),
    )
    ps = InstanceKey(job_id=request.job_id, attempt=1, role="ps", index=0)
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        with _port_thief(sim, "ps") as taken:
            await sim.launch(request)
            ended = await events.all_ended(request)
        assert {k.role: (e.kind, e.exit_code) for k, e in ended.items()} == {
            "ps": (EventKind.EXITED, 0),
            "worker": (EventKind.EXITED, 0),
        }, [e.reason for e in ended.values()]
        [stolen] = taken
        http = ended[ps].placement.ports["http"][0]
        assert http != stolen
        ps_log = await log_text(sim, ps)
        assert ps_log.count("task role ps: starting") == 1  # its commands ran once
        assert f"ps serves on {http}\n" in ps_log
        for index in (0, 1):
            worker = ps.model_copy(update={"role": "worker", "index": index})
            address = f"{ended[ps].placement.host_ip}:{http}"
            assert f"worker sees ps at {address}\n" in await log_text(sim, worker)
        kinds = [e.kind for e in events.of(request) if e.key == ps]
        assert kinds == [EventKind.PLACED, EventKind.STARTED, EventKind.EXITED], kinds
        await sim.forget(request.job_id, 1)
        events.close()
        await nothing_left(sim.owner, 10)


async def test_a_port_lost_on_every_try_fails_the_start_naming_the_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("backends.docker_gang.PORT_TRIES", 1)
    request = job(role("web", ["true"]))
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        with _port_thief(sim, "web") as taken:
            await sim.launch(request)
            [end] = (await events.all_ended(request)).values()
        assert end.kind is EventKind.START_FAILED, end.reason
        assert f"host port {taken[0]} was taken by another program after it was checked free" in (
            end.reason or ""
        )
        await sim.forget(request.job_id, 1)
        events.close()


class PullSpy:
    """Stands in for the Docker SDK's `ImageCollection.pull` (the boundary where the engine is
    asked to pull): records what it was given, then either makes the image exist by tagging the test
    image with its name (as a pull from a registry would) or fails as a registry refusing."""

    def __init__(self, client: docker.DockerClient, refuse: str | None = None) -> None:
        self.client = client
        self.refuse = refuse
        self.calls: list[tuple[str, dict[str, object]]] = []

    def __call__(self, repository: str, **kwargs: object) -> object:
        self.calls.append((repository, kwargs))
        if self.refuse is not None:
            raise docker.errors.APIError("pull refused", explanation=self.refuse)
        name, _, tag = repository.rpartition(":")
        image = self.client.images.get(IMAGE)
        image.tag(name, tag)
        return self.client.images.get(repository)


async def test_a_pull_logs_in_with_the_dockerimage_auth_which_is_masked_everywhere_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    private = f"registry.example.org:5000/team/private-{uuid.uuid4().hex[:8]}:1"
    refused = f"registry.example.org:5000/team/refused-{uuid.uuid4().hex[:8]}:1"
    auth = ImageAuth(
        registry="registry.example.org:5000",
        username="alice",
        password="<% $secrets.registry_password %>",
    )
    secrets = {"registry_password": "s3cret-Pa55"}
    pulled = job(
        role("main", ["echo pulled and ran"], image=private, image_auth=auth), secrets=secrets
    )
    literal = auth.model_copy(update={"password": "s3cret-Pa55"})
    refusing = job(role("main", ["true"], image=refused, image_auth=literal))
    progress: list[str] = []
    client = docker.from_env()
    try:
        async with backend(tmp_path, image_pull=True) as sim:
            sim.progress = progress.append
            spy = PullSpy(sim.engine.client)
            monkeypatch.setattr(
                docker.models.images.ImageCollection,
                "pull",
                lambda _images, repository, **kwargs: spy(repository, **kwargs),
            )
            events = Collector(sim)
            await sim.launch(pulled)
            [end] = (await events.all_ended(pulled)).values()
            assert (end.kind, end.exit_code) == (EventKind.EXITED, 0), end.reason
            assert "pulled and ran" in await log_text(sim, end.key)
            assert spy.calls == [
                (
                    private,
                    {
                        "auth_config": {
                            "username": "alice",
                            "password": "s3cret-Pa55",
                            "serveraddress": "registry.example.org:5000",
                        }
                    },
                )
            ]

            spy.refuse = "unauthorized: user alice with password s3cret-Pa55 is not allowed"
            await sim.launch(refusing)
            [failed] = (await events.all_ended(refusing)).values()
            assert failed.kind is EventKind.START_FAILED
            assert failed.reason == (
                f"image {refused!r} could not be pulled with the credentials of its auth: "
                "unauthorized: user *** with password *** is not allowed"
            )
            assert spy.calls[-1][1]["auth_config"]["password"] == "s3cret-Pa55"  # type: ignore[index]
        assert f"pulling image {private} with the credentials of its auth" in progress
        said = [*progress, *(e.reason or "" for e in events.events)]
        assert not [line for line in said if "s3cret" in line or "alice" in line]
        kept = [p for p in tmp_path.rglob("*") if p.is_file()]
        assert kept, "the backend keeps files of its attempts"
        assert not [p for p in kept if b"s3cret" in p.read_bytes()]
    finally:
        for name in (private, refused):
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(name)


async def test_a_v1_auth_file_gives_the_pull_its_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = tmp_path / "files"
    files.mkdir()
    (files / "registry-auth").write_text("docker.io\nalice\nfile-Pa55\n")
    (files / "short").write_text("docker.io\nalice\n")
    private = f"team/private-{uuid.uuid4().hex[:8]}:1"
    good = job(
        role("main", ["true"], image=private, image_auth=ImageAuth(file=f"{files}/registry-auth"))
    )
    short = job(
        role("main", ["true"], image=private + "x", image_auth=ImageAuth(file=f"{files}/short"))
    )
    outside = job(
        role("main", ["true"], image=private + "y", image_auth=ImageAuth(file="/etc/passwd"))
    )
    client = docker.from_env()
    try:
        async with backend(tmp_path / "state", image_pull=True, allowed_file_roots=[files]) as sim:
            spy = PullSpy(sim.engine.client)
            monkeypatch.setattr(
                docker.models.images.ImageCollection,
                "pull",
                lambda _images, repository, **kwargs: spy(repository, **kwargs),
            )
            events = Collector(sim)
            for request in (good, short, outside):
                await sim.launch(request)
            [ran] = (await events.all_ended(good)).values()
            assert (ran.kind, ran.exit_code) == (EventKind.EXITED, 0), ran.reason
            assert spy.calls == [
                (
                    private,
                    {
                        "auth_config": {
                            "username": "alice",
                            "password": "file-Pa55",
                            "serveraddress": "docker.io",
                        }
                    },
                )
            ]
            [few] = (await events.all_ended(short)).values()
            assert few.kind is EventKind.START_FAILED
            assert few.reason == (
                f"authFile {files}/short: needs three lines (registry server, username, "
                "password), has 2"
            )
            [refused] = (await events.all_ended(outside)).values()
            assert refused.kind is EventKind.START_FAILED
            assert "/etc/passwd is outside the allowed roots" in (refused.reason or "")
            assert len(spy.calls) == 1  # nothing pulled without its credentials
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(private)
