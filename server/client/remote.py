"""The `paigraph` commands that talk to a running server over GraphQL.

`submit`, `status`, `logs` and `stop` use only the public API (the same one a web frontend
uses): HTTP for queries and mutations, graphql-transport-ws for the live parts. The server is
`--url` or `PAIGRAPH_URL` (default http://127.0.0.1:8000) and the token `--token` or
`PAIGRAPH_TOKEN`.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from server.api.ids import BadId, parse_global_id

DEFAULT_URL = "http://127.0.0.1:8000"
UNAUTHORIZED_CLOSE = 4401  # the websocket close code for missing or wrong credentials
FINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
LIVE_STATES = frozenset({"WAITING", "STARTING", "RUNNING"})  # a stop still has work to do

if TYPE_CHECKING:
    import httpx

JOB_FIELDS = """
  id name state stateReason attempt retries virtualCluster
  user { name }
  warnings { path code message }
  taskRoles {
    name instanceCount
    instances { index attempt state exitCode exitReason node hostIp ports { label ports } }
  }
"""


class RemoteError(Exception):
    """The server could not be reached or said no; the message is for the user."""


class Client:
    """A small GraphQL client: one HTTP client, a bearer token, errors made readable."""

    def __init__(self, url: str | None = None, token: str | None = None) -> None:
        self.url = (url or os.environ.get("PAIGRAPH_URL") or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else os.environ.get("PAIGRAPH_TOKEN")
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        import httpx  # here, not at the top: `paigraph --help` and the like never need it

        self.http: httpx.Client = httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def execute(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        import httpx

        try:
            response = self.http.post("/graphql", json={"query": query, "variables": variables})
        except httpx.TransportError as exc:
            raise RemoteError(f"cannot reach the paigraph server at {self.url}: {exc}") from None
        if response.status_code == 401:
            raise RemoteError(self.unauthorized())
        try:
            body = response.json()
        except ValueError:
            raise RemoteError(
                f"the server at {self.url} answered {response.status_code} without JSON"
            ) from None
        if not isinstance(body, dict):
            raise RemoteError(f"the server at {self.url} answered JSON that is not an object")
        if body.get("errors"):
            raise RemoteError("; ".join(e.get("message", "error") for e in body["errors"]))
        data = body.get("data")
        if not isinstance(data, dict):
            raise RemoteError(f"the server at {self.url} answered neither data nor errors")
        return data

    def unauthorized(self) -> str:
        """Why the server said 401: the token given is wrong, or none was given. The server
        answers both alike, but a user who gave one must not be told to give one."""
        if self.token:
            return (
                f"the server at {self.url} does not accept the token given (--token or "
                "PAIGRAPH_TOKEN): it is wrong, or was made for another server's database; "
                "paigraph users add prints a new one"
            )
        return (
            f"the server at {self.url} wants a token: give it with --token or PAIGRAPH_TOKEN "
            "(paigraph users add prints one)"
        )

    def subscribe(self, query: str, variables: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Results of a subscription until the server completes it."""
        from websockets.exceptions import ConnectionClosed
        from websockets.sync.client import connect

        ws_url = "ws" + self.url[len("http") :] + "/graphql"
        payload = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            with connect(ws_url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
                ws.send(json.dumps({"type": "connection_init", "payload": payload}))
                if json.loads(ws.recv(timeout=30)).get("type") != "connection_ack":
                    raise RemoteError(self.unauthorized())
                sub_id = uuid.uuid4().hex
                ws.send(
                    json.dumps(
                        {
                            "id": sub_id,
                            "type": "subscribe",
                            "payload": {"query": query, "variables": variables},
                        }
                    )
                )
                for raw in ws:
                    message = json.loads(raw)
                    kind = message.get("type")
                    if kind == "ping":
                        ws.send(json.dumps({"type": "pong"}))
                    elif kind == "next" and message.get("id") == sub_id:
                        data = message.get("payload") or {}
                        if data.get("errors"):
                            raise RemoteError(
                                "; ".join(e.get("message", "error") for e in data["errors"])
                            )
                        yield data.get("data") or {}
                    elif kind == "error":
                        raise RemoteError(
                            "; ".join(e.get("message", "error") for e in message.get("payload", []))
                        )
                    elif kind == "complete" and message.get("id") == sub_id:
                        return
        except ConnectionClosed as exc:
            if exc.rcvd is not None and exc.rcvd.code == UNAUTHORIZED_CLOSE:
                raise RemoteError(self.unauthorized()) from None
            raise RemoteError(f"the live connection to {ws_url} failed: {exc}") from None
        except OSError as exc:
            raise RemoteError(f"the live connection to {ws_url} failed: {exc}") from None

    # --- the operations the commands use -----------------------------------------------------

    def submit(self, config: str, parameters: dict[str, Any]) -> dict[str, Any]:
        data = self.execute(
            "mutation($config: String!, $parameters: JSON) {"
            " submitJob(input: {config: $config, parameters: $parameters}) {"
            f" job {{ {JOB_FIELDS} }} errors {{ path code message }}"
            " warnings { path code message } } }",
            {"config": config, "parameters": parameters},
        )
        return answer_object(data, "submitJob")

    def job(self, reference: str) -> dict[str, Any]:
        by = "id" if _is_job_id(reference) else "name"
        data = self.execute(
            f"query($ref: {'ID' if by == 'id' else 'String'}) {{"
            f" job({by}: $ref) {{ {JOB_FIELDS} }} }}",
            {"ref": reference},
        )
        if data.get("job") is None:
            raise RemoteError(f"no job {reference!r}")
        return answer_object(data, "job")

    def stop(self, job_id: str) -> dict[str, Any]:
        data = self.execute(
            "mutation($id: ID!) { stopJob(input: {id: $id}) {"
            f" job {{ {JOB_FIELDS} }} errors {{ path code message }} }} }}",
            {"id": job_id},
        )
        return answer_object(data, "stopJob")

    def viewer(self) -> dict[str, Any]:
        """Who the token is: `name` and `admin`."""
        return answer_object(self.execute("{ viewer { name admin } }"), "viewer")

    def live_jobs(self, owner: str | None) -> list[dict[str, Any]]:
        """Every job not ended yet (`owner`'s, or everyone's the viewer may see), newest first."""
        query = (
            "query($after: String, $filter: JobFilter) {"
            " jobs(first: 100, after: $after, filter: $filter) {"
            " edges { node { id name state user { name } } } pageInfo { hasNextPage endCursor } } }"
        )
        found: list[dict[str, Any]] = []
        after = None
        job_filter = {"state": sorted(LIVE_STATES), **({"user": owner} if owner else {})}
        while True:
            page = self.execute(query, {"after": after, "filter": job_filter})["jobs"]
            found += [edge["node"] for edge in page["edges"]]
            if not page["pageInfo"]["hasNextPage"]:
                return found
            after = page["pageInfo"]["endCursor"]

    def job_events(self, job_id: str) -> Iterator[dict[str, Any]]:
        query = (
            "subscription($id: ID!) { jobEvents(jobId: $id) {"
            " cursor sequence type message state taskRole index } }"
        )
        for data in self.subscribe(query, {"id": job_id}):
            yield data["jobEvents"]

    def job_usage(self, job_id: str) -> Iterator[dict[str, Any]]:
        """Each sampling round's figures of the job's running instances, until it ends."""
        query = (
            "subscription($id: ID!) { jobUsage(jobId: $id) { at source instances {"
            " taskRole index cpuCores memoryBytes memoryLimitBytes networkRxBytesPerSecond"
            " networkTxBytesPerSecond gpuUtilization gpuMemoryBytes } } }"
        )
        for data in self.subscribe(query, {"id": job_id}):
            yield data["jobUsage"]

    def task_logs(self, job_id: str, role: str, index: int, follow: bool) -> Iterator[str]:
        query = (
            "subscription($id: ID!, $role: String!, $index: Int!, $follow: Boolean) {"
            " taskLogs(jobId: $id, taskRole: $role, index: $index, follow: $follow)"
            " { offset data } }"
        )
        variables = {"id": job_id, "role": role, "index": index, "follow": follow}
        for data in self.subscribe(query, variables):
            yield data["taskLogs"]["data"]


def answer_object(data: dict[str, Any], field: str) -> dict[str, Any]:
    """`data[field]`, which the schema makes a JSON object; anything else is a server that does
    not speak this client's API, said as such rather than as a crash further on."""
    value = data.get(field)
    if not isinstance(value, dict):
        raise RemoteError(f"the server's answer has no {field} object")
    return value


def _is_job_id(reference: str) -> bool:
    try:
        return parse_global_id(reference)[0] == "Job"
    except BadId:
        return False
