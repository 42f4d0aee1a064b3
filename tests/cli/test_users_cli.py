"""`paigraph users list|remove|token` and the admins' GraphQL for users, on a real server with
real `paigraph` processes: a revoked token is refused at once, open websockets included; a
removed user's job keeps running under their name and their items stay. Also what `submit`
says of an unknown virtual cluster and of a prerequisite the fetch policy refuses."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from server.client.remote import RemoteError
from tests.servers import Server, instances, job, served
from tests.simulated import job_config
from tests.waiting import until

pytestmark = pytest.mark.docker

_USERS = "query($removed: Boolean!) { users(removed: $removed) { name admin removedAt } }"
_RESET = """mutation($name: String!) { resetUserToken(input: {name: $name}) {
  token user { name } errors { path code message } } }"""
_REMOVE = """mutation($name: String!) { removeUser(input: {name: $name}) {
  user { name removedAt } errors { path code message } } }"""
_ADD = """mutation($name: String!) { addUser(input: {name: $name, virtualClusters: ["research"]}) {
  token user { name virtualClusters } errors { path code message } } }"""
_EXIT = """query($id: ID!) { job(id: $id) { state stateReason
  taskRoles { instances { exitCode exitReason } } } }"""
_ITEM = "name: alice_data\ntype: data\nuri:\n  - https://example.org/points.csv\n"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with served("sqlite", tmp_path) as server:
        yield server


def _add(server: Server, name: str, *options: str) -> str:
    added = server.paigraph("users", "add", name, *options)
    assert added.returncode == 0, added.stderr
    return added.stdout.strip()


@contextmanager
def _socket(server: Server, token: str) -> Iterator[ClientConnection]:
    """A graphql-transport-ws connection opened with `token`, acknowledged."""
    url = server.url.replace("http://", "ws://") + "/graphql"
    with connect(url, subprotocols=["graphql-transport-ws"]) as ws:
        ws.send(json.dumps({"type": "connection_init", "payload": {"token": token}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "connection_ack"
        yield ws


def _closed_with(ws: ClientConnection) -> int | None:
    """The close code once the server closed the connection (pings are answered)."""
    try:
        while True:
            message = json.loads(ws.recv(timeout=15))
            if message["type"] == "ping":
                ws.send(json.dumps({"type": "pong"}))
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd else None


def _refused(server: Server, token: str) -> bool:
    done = server.paigraph("status", "nojob", token=token)
    return done.returncode == 1 and "does not accept the token" in done.stderr


def test_users_list_token_and_remove_revoke_at_once_and_keep_the_record(
    server: Server, tmp_path: Path
) -> None:
    root = _add(server, "root", "--admin")
    alice = _add(server, "alice", "--vc", "research")
    server.start()

    listed = server.paigraph("users", "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split("\t") == ["NAME", "ADMIN", "VIRTUAL CLUSTERS", "ADDED", "REMOVED"]
    assert [line.split("\t")[:3] for line in lines[1:]] == [
        ["alice", "no", "research"],
        ["root", "yes", "-"],
    ]

    # a new token: the old one is refused at once, its open websocket closed
    with _socket(server, alice) as ws:
        reset = server.paigraph("users", "token", "alice")
        assert reset.returncode == 0, reset.stderr
        fresh = reset.stdout.strip()
        assert fresh.startswith("pgt_") and fresh != alice
        assert _refused(server, alice)
        assert _closed_with(ws) == 4401
    assert server.client(fresh).viewer()["name"] == "alice"

    # alice's job and item; then she is removed
    config = tmp_path / "long.yaml"
    config.write_text(job_config({"main": {"commands": ["sleep 600"]}}, name="long"))
    submitted = server.paigraph("submit", str(config), token=fresh)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    admin = server.client(root)
    until(lambda: instances(job(admin, job_id))["main-0"]["state"] == "RUNNING", "running", 120)
    item = tmp_path / "item.yaml"
    item.write_text(_ITEM)
    published = server.paigraph("market", "publish", str(item), token=fresh)
    assert published.returncode == 0, published.stderr

    with _socket(server, fresh) as ws:
        removed = server.paigraph("users", "remove", "alice")
        assert removed.returncode == 0, removed.stderr
        assert "removed user alice" in removed.stderr
        assert _refused(server, fresh)
        assert _closed_with(ws) == 4401

    # her job runs on under her name, her item stays
    status = server.paigraph("status", job_id, token=root)
    assert status.returncode == 0, status.stderr
    assert "RUNNING" in status.stdout and status.stdout.endswith("\n")
    listed_jobs = admin.execute('{ jobs(filter: {user: "alice"}) { edges { node { id } } } }')
    assert [e["node"]["id"] for e in listed_jobs["jobs"]["edges"]] == [job_id]
    shown = server.paigraph("market", "show", "alice_data", token=root)
    assert shown.returncode == 0 and "alice" in shown.stdout, shown.stdout + shown.stderr

    assert [
        line.split("\t")[0] for line in server.paigraph("users", "list").stdout.splitlines()
    ] == [
        "NAME",
        "root",
    ]
    with_removed = server.paigraph("users", "list", "--removed").stdout.splitlines()
    assert with_removed[1].startswith("alice\tno\t-\t") and not with_removed[1].endswith("\t-")
    again = server.paigraph("users", "remove", "alice")
    assert (again.returncode, again.stderr) == (1, "error: user 'alice' was removed already\n")
    taken = server.paigraph("users", "add", "alice")
    assert taken.returncode == 1 and "was removed" in taken.stderr
    unknown = server.paigraph("users", "token", "nobody")
    assert (unknown.returncode, unknown.stderr) == (1, "error: no user is named 'nobody'\n")
    assert server.paigraph("stop", job_id, token=root).returncode == 0


def test_admins_manage_users_over_graphql_and_a_reset_closes_sockets_at_once(
    server: Server,
) -> None:
    root = _add(server, "root", "--admin")
    bob = _add(server, "bob")
    server.start()
    admin, user = server.client(root), server.client(bob)

    refused = user.execute(_RESET, {"name": "root"})["resetUserToken"]
    assert [(e["code"], e["message"]) for e in refused["errors"]] == [
        ("forbidden", "only an admin may manage users")
    ]
    assert _refused(server, root) is False
    with pytest.raises(RemoteError, match="only an admin may manage users"):
        user.execute(_USERS, {"removed": False})

    bad = admin.execute(_ADD.replace('["research"]', '["no good"]'), {"name": "carol"})["addUser"]
    assert [(e["path"], e["code"]) for e in bad["errors"]] == [
        (["virtualClusters", "0"], "invalid")
    ]
    added = admin.execute(_ADD, {"name": "carol"})["addUser"]  # carol was not made above
    assert added["errors"] == [] and added["user"] == {
        "name": "carol",
        "virtualClusters": ["research"],
    }
    assert server.client(added["token"]).viewer()["name"] == "carol"
    names = [u["name"] for u in admin.execute(_USERS, {"removed": False})["users"]]
    assert names == ["bob", "carol", "root"]

    with _socket(server, bob) as ws:
        reset = admin.execute(_RESET, {"name": "bob"})["resetUserToken"]
        assert reset["errors"] == [] and reset["user"] == {"name": "bob"}
        assert _closed_with(ws) == 4401  # swept by the mutation itself
    assert _refused(server, bob)
    assert server.client(reset["token"]).viewer()["name"] == "bob"

    removed = admin.execute(_REMOVE, {"name": "carol"})["removeUser"]
    assert removed["errors"] == [] and removed["user"]["removedAt"]
    assert _refused(server, added["token"])
    itself = admin.execute(_REMOVE, {"name": "root"})["removeUser"]
    assert [e["code"] for e in itself["errors"]] == ["forbidden"]
    everyone = admin.execute(_USERS, {"removed": True})["users"]
    assert [(u["name"], u["removedAt"] is not None) for u in everyone] == [
        ("bob", False),
        ("carol", True),
        ("root", False),
    ]


def test_an_unknown_virtual_cluster_is_said_the_same_by_submit_and_the_dry_run(
    server: Server, tmp_path: Path
) -> None:
    alice = _add(server, "alice")
    server.start()
    config = tmp_path / "elsewhere.yaml"
    doc = json.loads(job_config({"main": {"commands": ["true"]}}, name="elsewhere"))
    doc["defaults"] = {"virtualCluster": "your_virtual_cluster"}
    config.write_text(json.dumps(doc))
    said = "unknown virtual cluster 'your_virtual_cluster'; known: default"
    submitted = server.paigraph("submit", str(config), token=alice)
    assert submitted.returncode == 1
    assert said in submitted.stderr and "may not submit" not in submitted.stderr, submitted.stderr
    dry = server.client(alice).execute(
        "mutation($c: String!) { resolveJob(input: {config: $c}) { errors { path message } } }",
        {"c": config.read_text()},
    )["resolveJob"]
    assert dry["errors"] == [{"path": ["defaults", "virtualCluster"], "message": said}]


def test_a_prerequisite_the_fetch_policy_refuses_is_the_users_error_with_its_own_reason(
    server: Server, tmp_path: Path
) -> None:
    alice = _add(server, "alice")
    server.start()
    doc = json.loads(job_config({"main": {"commands": ["ls /work/points"]}}, name="fetching"))
    doc["prerequisites"].append(
        {"name": "points", "type": "data", "uri": ["http://127.0.0.1:9/points.csv"]}
    )
    doc["taskRoles"]["main"]["data"] = "points"
    config = tmp_path / "fetching.yaml"
    config.write_text(json.dumps(doc))
    watched = server.paigraph("submit", "--watch", str(config), token=alice)
    assert watched.returncode == 1, watched.stdout + watched.stderr
    assert watched.stdout.endswith("\n"), repr(watched.stdout[-200:])
    assert "FAILED" in watched.stdout
    job_id = watched.stdout.splitlines()[0]
    found = server.client(alice).execute(_EXIT, {"id": job_id})["job"]
    (main,) = found["taskRoles"][0]["instances"]
    assert "paigraph does not fetch from loopback" in main["exitReason"], main
    said = found["stateReason"] + " " + main["exitReason"]
    assert "PrerequisiteFetchRefused" in said, said
    assert "ContainerDockerCreationError" not in said and "unknown failure" not in said, said
    status = server.paigraph("status", job_id, token=alice)
    assert status.returncode == 0 and status.stdout.endswith("\n")
    assert "PrerequisiteFetchRefused" in status.stdout
