"""The GraphQL API as clients see it, over HTTP, and the committed schema."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from server.api.schema import schema
from server.app import create_app
from tests.jobs import as_yaml, v2

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "schema.graphql"

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
      }
    }
  }
}
"""


def test_schema_file_is_up_to_date() -> None:
    assert SCHEMA_FILE.read_text() == schema.as_str() + "\n", (
        "schema.graphql is stale: run `paigraph schema > schema.graphql`"
    )


@pytest.fixture
def client() -> TestClient:
    return TestClient(create_app())


def post(client: TestClient, variables: dict) -> dict:  # type: ignore[type-arg]
    response = client.post("/graphql", json={"query": RESOLVE, "variables": variables})
    assert response.status_code == 200
    body = response.json()
    assert "errors" not in body, body
    return body["data"]["resolveJob"]


def test_resolve_job_returns_the_resolved_job(client: TestClient) -> None:
    payload = post(client, {"config": as_yaml(v2()), "parameters": {"batch": 64}})
    assert payload["errors"] == []
    job = payload["job"]
    assert job["name"] == "tf_dist" and job["dialect"] == "v2"
    worker = next(r for r in job["taskRoles"] if r["name"] == "worker")
    assert worker["instanceCount"] == 2
    assert worker["commands"][-1] == "python train.py --batch 64"
    ports = {p["label"]: p["count"] for p in worker["resourcePerInstance"]["ports"]}
    assert ports == {"grpc": 2, "ssh": 1, "http": 1}
    assert "protocolVersion: 2" in job["config"]


def test_resolve_job_returns_user_errors_with_paths(client: TestClient) -> None:
    doc = v2()
    doc["taskRoles"]["worker"]["resourcePerInstance"]["cpu"] = 0
    payload = post(client, {"config": as_yaml(doc)})
    assert payload["job"] is None
    assert payload["errors"] == [
        {
            "path": ["taskRoles", "worker", "resourcePerInstance", "cpu"],
            "code": "range",
            "message": "cpu must be at least 1, got 0",
        }
    ]


def test_resolve_job_rejects_non_object_parameters(client: TestClient) -> None:
    payload = post(client, {"config": as_yaml(v2()), "parameters": [1, 2]})
    assert payload["errors"][0]["path"] == ["parameters"]


def test_garbage_gets_an_error_not_a_crash(client: TestClient) -> None:
    payload = post(client, {"config": "\x00\x01binary"})
    assert payload["errors"][0]["code"] == "binary"


def test_health(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
