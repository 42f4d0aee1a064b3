"""Containers run with least privilege, and no field of a job can ask for more.

The container tests run real jobs on the Docker simulator and read what Docker created; the
config tests try every place a job could write a way out and expect an error at that place.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
import yaml

from backends.base import InstanceKey
from server.protocol.engine import parse_document
from simulator.containers import KEPT_CAPABILITIES, BindMount, ContainerSpec, Engine, EngineError
from tests.servers import Server, served
from tests.simulated import IMAGE, Collector, backend, job, job_config, log_text, role

# What a job tries from inside: each line prints what happened.
ATTEMPTS = [
    "grep NoNewPrivs /proc/self/status",
    "ping -c 1 -W 1 127.0.0.1 >/dev/null 2>&1 && echo RAW-SOCKET-OPEN || echo RAW-SOCKET-REFUSED",
    "mknod /tmp/disk b 8 0 2>/dev/null && echo MKNOD-OPEN || echo MKNOD-REFUSED",
    "touch /tmp/mine && chown 1234:1234 /tmp/mine && echo CHOWN-OWN-FILE-OK",
    "chown 1234 /usr/local/pai/entrypoint.sh 2>/dev/null && echo CHOWN-RUNTIME-OPEN"
    " || echo CHOWN-RUNTIME-REFUSED",
    "echo x > /usr/local/pai/runtime_env.sh 2>/dev/null && echo RUNTIME-WRITABLE"
    " || echo RUNTIME-READ-ONLY",
    "echo x > /usr/local/pai/run/scratch && echo RUN-DIR-WRITABLE",
    "mount -t tmpfs none /mnt 2>/dev/null && echo MOUNT-OPEN || echo MOUNT-REFUSED",
    "touch /tmp/go-on; while [ ! -e /usr/local/pai/run/release ]; do sleep 0.1; done",
]


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_container_has_no_new_privileges_and_only_the_kept_capabilities(
    tmp_path: Path,
) -> None:
    request = job(role("main", ATTEMPTS))
    key = InstanceKey(job_id=request.job_id, attempt=1, role="main", index=0)
    async with backend(tmp_path) as sim:
        events = Collector(sim)
        await sim.launch(request)
        await events.until(lambda: key in events.started(request))
        api = docker.from_env().api
        [listed] = api.containers(filters={"label": f"io.paigraph.owner={sim.owner}"})
        inspected = api.inspect_container(listed["Id"])
        host = inspected["HostConfig"]
        run_dir = next(
            m["Source"] for m in inspected["Mounts"] if m["Destination"] == "/usr/local/pai/run"
        )
        (Path(run_dir) / "release").touch()
        ended = await events.all_ended(request)
        text = await log_text(sim, key)
        await sim.forget(request.job_id, 1)
        events.close()

    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["CapDrop"] == ["ALL"]
    assert sorted(host["CapAdd"]) == sorted(KEPT_CAPABILITIES)
    assert "NET_RAW" not in host["CapAdd"] and "MKNOD" not in host["CapAdd"]
    assert host["Privileged"] is False
    assert host["NetworkMode"].startswith("pai-")
    assert not host.get("Binds")
    mounts = {m["Destination"]: m["RW"] for m in inspected["Mounts"]}
    # the runtime files read-only; the log, and the user's own simulated HDFS, read-write
    assert mounts == {
        "/usr/local/pai": False,
        "/usr/local/pai/run": True,
        "/usr/local/pai/dfs": True,
    }

    assert {e.exit_code for e in ended.values()} == {0}, text
    assert "NoNewPrivs:\t1" in text
    assert "RAW-SOCKET-REFUSED" in text
    assert "MKNOD-REFUSED" in text
    assert "CHOWN-OWN-FILE-OK" in text  # root in its own container still owns its files
    assert "CHOWN-RUNTIME-REFUSED" in text
    assert "RUNTIME-READ-ONLY" in text
    assert "RUN-DIR-WRITABLE" in text
    assert "MOUNT-REFUSED" in text


def _spec(tmp_path: Path, **fields: Any) -> ContainerSpec:
    values: dict[str, Any] = {
        "name": f"pai-confined-{tmp_path.name[-8:]}",
        "image": IMAGE,
        "command": ["true"],
        "network": "pai-nowhere",
        "ip": "10.222.0.2",
        "aliases": [],
        "labels": {},
    }
    return ContainerSpec(**(values | fields))


@pytest.mark.docker
@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"network": "host"}, "network 'host' refused"),
        ({"network": "container:other"}, "network 'container:other' refused"),
        (
            {"mounts": [BindMount("/var/run", "/host-run", read_only=True)]},
            "exposes the Docker engine's socket",
        ),
        ({"mounts": [BindMount("/", "/host")]}, "exposes the Docker engine's socket"),
    ],
)
def test_the_engine_driver_never_creates_a_container_that_reaches_out(
    tmp_path: Path, fields: dict[str, Any], said: str
) -> None:
    engine = Engine()
    spec = _spec(tmp_path, **fields)
    with pytest.raises(EngineError, match=said):
        engine.run(spec)
    assert not engine.api.containers(all=True, filters={"name": spec.name})


def _v2_with(
    role_fields: dict[str, Any], prerequisite: dict[str, Any] | None = None, **top: Any
) -> dict[str, Any]:
    """The tests' one-role v2 job with more role fields, one more prerequisite, top keys."""
    doc = json.loads(job_config({"main": {"commands": ["true"]}}, **top))
    doc["taskRoles"]["main"].update(role_fields)
    if prerequisite is not None:
        doc["prerequisites"].append(prerequisite)
    return doc


def _v1(**role_fields: Any) -> dict[str, Any]:
    return {
        "jobName": "v1job",
        "image": IMAGE,
        "taskRoles": [
            {
                "name": "main",
                "taskNumber": 1,
                "cpuNumber": 1,
                "memoryMB": 128,
                "gpuNumber": 0,
                "command": "true",
                **role_fields,
            }
        ],
    }


def _draft(**task_fields: Any) -> dict[str, Any]:
    return {
        "protocol_version": "v2",
        "name": "draftjob",
        "type": "job",
        "tasks": [
            {
                "role": "main",
                "dockerimage": "bb",
                "command": ["true"],
                "resource": {
                    "instances": 1,
                    "resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0},
                },
                **task_fields,
            }
        ],
        "prerequisites": [
            {"protocol_version": "v2", "name": "bb", "type": "dockerimage", "uri": IMAGE}
        ],
    }


DATA = {"name": "d", "type": "data", "uri": ["http://example.org/d.csv"]}
ASKS: list[tuple[str, dict[str, Any], str]] = [
    ("v2 privileged", _v2_with({"extraContainerOptions": {"privileged": True}}),
     "taskRoles.main.extraContainerOptions.privileged"),
    ("v2 host network", _v2_with({"extraContainerOptions": {"hostNetwork": True}}),
     "taskRoles.main.extraContainerOptions.hostNetwork"),
    ("v2 network mode", _v2_with({"extraContainerOptions": {"network_mode": "host"}}),
     "taskRoles.main.extraContainerOptions.network_mode"),
    ("v2 capabilities", _v2_with({"extraContainerOptions": {"capAdd": ["SYS_ADMIN"]}}),
     "taskRoles.main.extraContainerOptions.capAdd"),
    ("v2 docker socket",
     _v2_with({"extraContainerOptions": {"volumes": ["/var/run/docker.sock:/d.sock"]}}),
     "taskRoles.main.extraContainerOptions.volumes"),
    ("v2 devices", _v2_with({"extraContainerOptions": {"devices": ["/dev/sda"]}}),
     "taskRoles.main.extraContainerOptions.devices"),
    ("extras", _v2_with({}, extras={"dockerOptions": {"privileged": True}}),
     "extras.dockerOptions.privileged"),
    ("extras in a list",
     _v2_with({}, extras={"pods": [{"spec": {"hostNetwork": True}}]}),
     "extras.pods[0].spec.hostNetwork"),
    ("dockerimage option",
     _v2_with({}, prerequisite={"name": "img", "type": "dockerimage", "uri": IMAGE,
                                "privileged": True}),
     "prerequisites[1].privileged"),
    ("data plugin setting", _v2_with({}, prerequisite=DATA | {"binds": ["/:/host"]}),
     "prerequisites[1].binds"),
    ("v1 role field", _v1(privileged=True), "taskRoles[0].privileged"),
    ("v1 extras", _v1() | {"extras": {"hostNetwork": True}}, "extras.hostNetwork"),
    ("draft task field", _draft(hostNetwork=True), "tasks[0].hostNetwork"),
]  # fmt: skip


@pytest.mark.parametrize(("doc", "path"), [a[1:] for a in ASKS], ids=[a[0] for a in ASKS])
def test_every_field_that_asks_for_privilege_is_an_error_at_its_path(
    doc: dict[str, Any], path: str
) -> None:
    result = parse_document(yaml.safe_dump(doc))
    assert not result.ok
    errors = {e.path: e for e in result.errors}
    assert path in errors, [str(e) for e in result.errors]
    assert errors[path].code in ("privilege-refused", "unknown-field"), errors[path]


def test_options_that_ask_for_nothing_are_still_accepted() -> None:
    doc = _v2_with({"extraContainerOptions": {"privileged": False, "shmMB": 64}})
    assert parse_document(yaml.safe_dump(doc)).ok
    assert parse_document(yaml.safe_dump(_v2_with({}, extras={"gangAllocation": False}))).ok


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with served("sqlite", tmp_path) as running:
        yield running


def _storage_job(uri: str) -> str:
    doc = _v2_with(
        {"output": "out"},
        prerequisite={"name": "out", "type": "output", "uri": uri},
    )
    return json.dumps(doc)


@pytest.mark.docker
def test_submit_job_refuses_each_way_out_with_its_path(server: Server, tmp_path: Path) -> None:
    settings = tmp_path / "simulator.yaml"
    settings.write_text(f"allowed_file_roots: [/run, {tmp_path / 'data'}]\n")
    (tmp_path / "data").mkdir()
    server.settings["PAIGRAPH_SIMULATOR_CONFIG"] = str(settings)
    server.start()
    client = server.client()
    for _, doc, path in ASKS:
        answer = client.submit(json.dumps(doc), {})
        assert answer["job"] is None
        assert path.replace("[", ".").replace("]", "") in {
            ".".join(e["path"]) for e in answer["errors"]
        }, answer["errors"]

    socket_dir = client.submit(_storage_job("file:///run"), {})
    assert socket_dir["job"] is None
    error = socket_dir["errors"][0]
    assert error["code"] == "refused", socket_dir["errors"]
    assert "Docker engine's socket" in error["message"], error
    assert "'out'" in error["message"]

    outside = client.submit(_storage_job("file:///etc"), {})
    assert outside["job"] is None
    assert "outside the allowed roots" in outside["errors"][0]["message"]
