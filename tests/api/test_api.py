"""The GraphQL API as clients see it, over HTTP: the dry run, and the committed schema."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from server.api.jobs import mutations
from server.api.jobs.dry_run import PLACEHOLDER_PORT_BASE
from server.api.schema import current_schema
from server.app.asgi import create_app
from tests.api_support import gql, serving
from tests.jobs import as_json, as_yaml, v1, v2
from tests.servers import free_port, paigraph

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "schema.graphql"

RESOLVE = """
mutation Resolve($config: String!, $parameters: JSON) {
  resolveJob(input: {config: $config, parameters: $parameters}) {
    errors { path code message }
    warnings { path code message }
    job {
      name dialect virtualCluster config
      taskRoles {
        name instanceCount commands dockerImage
        resourcePerInstance { cpu memoryMB gpu shmMB ports { label count } }
        prerequisites { name type uri }
        instances { index hostIp ports { label ports } environment { name value } }
      }
    }
  }
}
"""


def test_schema_file_is_up_to_date() -> None:
    assert SCHEMA_FILE.read_text() == current_schema().as_str() + "\n", (
        "schema.graphql is stale: run `paigraph schema > schema.graphql`"
    )


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(db_url=f"sqlite:///{tmp_path / 'api.db'}", backend=None)
    async with serving(app) as http:
        yield http


async def resolve(client: httpx.AsyncClient, variables: dict) -> dict:  # type: ignore[type-arg]
    body = await gql(client, RESOLVE, variables)
    assert "errors" not in body, body
    return body["data"]["resolveJob"]


def env_of(instance: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {e["name"]: e["value"] for e in instance["environment"]}


@pytest.mark.anyio
async def test_resolve_job_returns_the_resolved_job(client: httpx.AsyncClient) -> None:
    payload = await resolve(client, {"config": as_yaml(v2()), "parameters": {"batch": 64}})
    assert payload["errors"] == []
    job = payload["job"]
    assert job["name"] == "tf_dist" and job["dialect"] == "v2"
    worker = next(r for r in job["taskRoles"] if r["name"] == "worker")
    assert worker["instanceCount"] == 2
    assert worker["commands"][-1] == "python train.py --batch 64"
    ports = {p["label"]: p["count"] for p in worker["resourcePerInstance"]["ports"]}
    assert ports == {"grpc": 2, "ssh": 1, "http": 1}
    assert "protocolVersion: 2" in job["config"]
    assert worker["prerequisites"] == [
        {"name": "tf_image", "type": "DOCKERIMAGE", "uri": ["openpai/tensorflow"]},
        {"name": "cifar", "type": "DATA", "uri": ["https://example.org/cifar.tgz"]},
        {"name": "bench", "type": "SCRIPT", "uri": ["https://example.org/bench.git"]},
    ]


@pytest.mark.anyio
async def test_resolve_job_shows_each_instance_with_placeholder_addresses_and_its_env(
    client: httpx.AsyncClient,
) -> None:
    job = (await resolve(client, {"config": as_yaml(v2())}))["job"]
    ps, worker = (next(r for r in job["taskRoles"] if r["name"] == n) for n in ("ps", "worker"))
    assert [i["index"] for i in worker["instances"]] == [0, 1]
    assert [i["hostIp"] for i in worker["instances"]] == ["worker-0", "worker-1"]

    all_ports = [
        port
        for role in (ps, worker)
        for instance in role["instances"]
        for allocation in instance["ports"]
        for port in allocation["ports"]
    ]
    assert len(all_ports) == len(set(all_ports)) == 2 + 2 * 4  # ps: ssh, http; worker: 2 grpc
    assert min(all_ports) >= PLACEHOLDER_PORT_BASE
    second = worker["instances"][1]
    grpc = next(p["ports"] for p in second["ports"] if p["label"] == "grpc")
    http = next(p["ports"] for p in second["ports"] if p["label"] == "http")
    assert len(grpc) == 2

    env = env_of(second)
    assert env["PAI_CURRENT_TASK_ROLE_NAME"] == "worker"
    assert env["PAI_TASK_INDEX"] == "1"
    assert env["PAI_USER_NAME"] == "local"  # the local admin of a fresh loopback server
    assert env["PAI_CURRENT_CONTAINER_IP"] == "worker-1"
    assert env["PAI_PORT_LIST_worker_1_grpc"] == ",".join(map(str, grpc))
    assert env["PAI_CONTAINER_HOST_PORT"] == str(http[0])
    ps_http = next(p["ports"] for p in ps["instances"][0]["ports"] if p["label"] == "http")
    assert env["PAI_TASK_ROLE_ps_HOST_LIST"] == f"ps-0:{ps_http[0]}"
    assert (
        env_of(ps["instances"][0])["PAI_TASK_ROLE_worker_HOST_LIST"]
        == env["PAI_TASK_ROLE_worker_HOST_LIST"]
    )


@pytest.mark.anyio
async def test_resolve_job_keeps_v1_begin_at_ports_and_job_envs(client: httpx.AsyncClient) -> None:
    job = (await resolve(client, {"config": as_json(v1())}))["job"]
    ps = next(r for r in job["taskRoles"] if r["name"] == "ps_server")
    grpc = [next(p["ports"] for p in i["ports"] if p["label"] == "grpc") for i in ps["instances"]]
    assert grpc == [[20000, 20001], [20000, 20001]]  # as asked; a real backend uses them too
    assert env_of(ps["instances"][0])["MODE"] == "fast"


@pytest.mark.anyio
async def test_resolve_job_never_shows_secrets(client: httpx.AsyncClient) -> None:
    doc = v2()
    doc["secrets"] = {"token": "s3cr3t-value-123"}
    doc["taskRoles"]["ps"]["commands"] = ["login --token <% $secrets.token %>"]
    response = await client.post(
        "/graphql", json={"query": RESOLVE, "variables": {"config": as_yaml(doc)}}
    )
    assert response.status_code == 200
    assert "s3cr3t-value-123" not in response.text
    ps = next(
        r for r in response.json()["data"]["resolveJob"]["job"]["taskRoles"] if r["name"] == "ps"
    )
    assert ps["commands"] == ["login --token <% $secrets.token %>"]


@pytest.mark.anyio
async def test_resolve_job_returns_user_errors_with_paths(client: httpx.AsyncClient) -> None:
    doc = v2()
    doc["taskRoles"]["worker"]["resourcePerInstance"]["cpu"] = 0
    payload = await resolve(client, {"config": as_yaml(doc)})
    assert payload["job"] is None
    assert payload["errors"] == [
        {
            "path": ["taskRoles", "worker", "resourcePerInstance", "cpu"],
            "code": "range",
            "message": "cpu must be at least 1, got 0",
        }
    ]


@pytest.mark.anyio
async def test_resolve_job_refuses_a_role_aliased_9000_times_by_the_role_limit(
    client: httpx.AsyncClient,
) -> None:
    roles = "".join(f"  r{i}: *role\n" for i in range(1, 9000))
    config = as_yaml(v2()).split("taskRoles:")[0] + "taskRoles:\n  r0: &role {}\n" + roles
    payload = await resolve(client, {"config": config})
    assert payload["job"] is None
    assert payload["errors"] == [
        {
            "path": ["taskRoles"],
            "code": "max-items",
            "message": "a job may have at most 100 task roles, got 9000",
        }
    ]


@pytest.mark.anyio
async def test_other_requests_are_answered_while_a_job_is_resolved(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    real = mutations.resolved_job

    def slow(*args: object, **kwargs: object) -> object:
        entered.set()
        assert release.wait(10), "no other request was answered while the job resolved"
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(mutations, "resolved_job", slow)
    pending = asyncio.create_task(resolve(client, {"config": as_yaml(v2())}))
    assert await asyncio.to_thread(entered.wait, 10)
    assert (await client.get("/healthz")).status_code == 200
    release.set()
    payload = await pending
    assert payload["errors"] == [] and payload["job"]["name"] == v2()["name"]


@pytest.mark.anyio
async def test_resolve_job_rejects_non_object_parameters(client: httpx.AsyncClient) -> None:
    payload = await resolve(client, {"config": as_yaml(v2()), "parameters": [1, 2]})
    assert payload["errors"][0]["path"] == ["parameters"]


@pytest.mark.anyio
async def test_garbage_gets_an_error_not_a_crash(client: httpx.AsyncClient) -> None:
    payload = await resolve(client, {"config": "\x00\x01binary"})
    assert payload["errors"][0]["code"] == "binary"


@pytest.mark.anyio
async def test_health(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}


def test_serve_refuses_a_kubernetes_backend_without_a_cluster(tmp_path: Path) -> None:
    # a port of its own: the default one may be taken by a server someone runs meanwhile
    done = paigraph(
        *("serve", "--backend", "kubernetes", "--port", str(free_port())),
        *("--db", f"sqlite:///{tmp_path / 'k.db'}"),
        env={"PAIGRAPH_KUBECONFIG": str(tmp_path / "no-such-kubeconfig")},
        timeout=60,
    )
    assert done.returncode == 1
    assert "the kubernetes backend cannot start: no usable Kubernetes configuration" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.anyio
async def test_a_large_dry_run_shows_the_environment_of_its_first_instances_only(
    client: httpx.AsyncClient,
) -> None:
    doc = v2()
    doc["taskRoles"]["ps"]["instances"] = 60
    doc["taskRoles"]["worker"]["instances"] = 1000
    payload = await resolve(client, {"config": as_yaml(doc)})
    assert payload["errors"] == []
    (warning,) = [w for w in payload["warnings"] if w["code"] == "environment-not-shown"]
    assert "1060 instances" in warning["message"] and "first 100" in warning["message"]
    ps, worker = (
        next(r for r in payload["job"]["taskRoles"] if r["name"] == n) for n in ("ps", "worker")
    )
    assert all(instance["environment"] for instance in ps["instances"])
    shown = [i["index"] for i in worker["instances"] if i["environment"]]
    assert shown == list(range(40))  # 60 ps instances come first in the job's order
    assert len(worker["instances"]) == 1000
    hosts = env_of(worker["instances"][39])["PAI_TASK_ROLE_worker_HOST_LIST"]
    assert len(hosts.split(",")) == 1000
