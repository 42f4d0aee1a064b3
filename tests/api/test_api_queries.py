"""Reading jobs over HTTP on SQLite and PostgreSQL: global IDs, pages, filters, limits, and
the number of SQL statements a deep list query costs."""

from __future__ import annotations

import gc
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import update

from server.api.jobs.types import PortAllocation, TaskInstance, TaskRole
from server.api.loaders import Loaders
from server.api.schema import executor_setting
from server.app.asgi import create_app
from server.jobs import JobMachine, JobState, job_policy
from server.protocol import parse_job
from server.shapes.values import Job
from server.store import Store, session_scope
from server.store.tables import JobRow
from tests.api_support import data, gql, place_and_start, runtime, serving
from tests.store_support import StatementLog, submit

pytestmark = pytest.mark.anyio
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)

JOBS = """
query Jobs($first: Int, $after: String, $filter: JobFilter) {
  jobs(first: $first, after: $after, filter: $filter) {
    edges { cursor node { id name state virtualCluster user { name } } }
    pageInfo { hasNextPage endCursor }
  }
}
"""

DEEP = """
query Deep($first: Int) {
  jobs(first: $first) {
    edges { node { id taskRoles { name instances { index hostIp ports { label ports } } } } }
  }
}
"""
OWNERS = """
query Owners($first: Int) {
  jobs(first: $first) { edges { node { config user { name virtualClusters } } } }
}
"""


@pytest.fixture
async def client(db_url: str, store: Store) -> AsyncIterator[httpx.AsyncClient]:
    async with serving(create_app(db_url=db_url, backend=None)) as http:
        yield http


def add_jobs(store: Store, owner_id: int, count: int, *, prefix: str = "job", vc: str = "default"):
    """`count` jobs submitted a minute apart, their instances placed and running."""
    jobs: list[Job] = []
    for n in range(count):
        job, machine = submit(store, owner_id, f"{prefix}{n}", T0 + timedelta(minutes=n), vc=vc)
        place_and_start(store, job.id, machine, T0 + timedelta(minutes=n, seconds=5))
        jobs.append(job)
    return jobs


async def test_a_job_id_round_trips_through_node_and_job(
    client: httpx.AsyncClient, store: Store
) -> None:
    ann, token = store.create_user("ann")
    add_jobs(store, ann.id, 1)
    listed = await data(client, JOBS, {"first": 1}, token=token)
    node = listed["jobs"]["edges"][0]["node"]
    assert node["name"] == "job0" and node["user"] == {"name": "ann"}
    assert node["state"] == "RUNNING"

    by_node = await data(
        client,
        "query($id: ID!) { node(id: $id) { id ... on Job { name } } }",
        {"id": node["id"]},
        token=token,
    )
    assert by_node["node"] == {"id": node["id"], "name": "job0"}
    by_job = await data(
        client, "query($id: ID) { job(id: $id) { id name } }", {"id": node["id"]}, token=token
    )
    assert by_job["job"] == {"id": node["id"], "name": "job0"}
    by_name = await data(client, '{ job(name: "job0") { id } }', token=token)
    assert by_name["job"]["id"] == node["id"]
    qualified = await data(client, '{ job(name: "ann~job0") { id } }', token=token)
    assert qualified["job"]["id"] == node["id"]

    viewer = await data(client, "{ viewer { id name admin } }", token=token)
    user = await data(
        client,
        "query($id: ID!) { node(id: $id) { ... on User { name } } }",
        {"id": viewer["viewer"]["id"]},
        token=token,
    )
    assert viewer["viewer"]["name"] == "ann" and viewer["viewer"]["admin"] is False
    assert user["node"] == {"name": "ann"}


async def test_a_job_id_is_not_a_user_id_and_garbage_is_a_clear_error(
    client: httpx.AsyncClient, store: Store
) -> None:
    _, token = store.create_user("ann")
    viewer = await data(client, "{ viewer { id } }", token=token)
    body = await gql(
        client,
        "query($id: ID) { job(id: $id) { id } }",
        {"id": viewer["viewer"]["id"]},
        token=token,
    )
    assert body["errors"][0]["message"] == "id: expected the ID of a Job, got the ID of a User"
    body = await gql(client, '{ node(id: "%%%") { id } }', token=token)
    assert "not an ID this service gave out" in body["errors"][0]["message"]
    missing = await data(client, '{ job(name: "nothing") { id } }', token=token)
    assert missing["job"] is None


async def test_jobs_page_newest_first_without_gaps_or_repeats(
    client: httpx.AsyncClient, store: Store
) -> None:
    ann, token = store.create_user("ann")
    add_jobs(store, ann.id, 7)
    names: list[str] = []
    after = None
    pages = 0
    while True:
        page = await data(client, JOBS, {"first": 3, "after": after}, token=token)
        connection = page["jobs"]
        names += [e["node"]["name"] for e in connection["edges"]]
        assert connection["pageInfo"]["endCursor"] == connection["edges"][-1]["cursor"]
        pages += 1
        if not connection["pageInfo"]["hasNextPage"]:
            break
        after = connection["pageInfo"]["endCursor"]
    assert names == [f"job{n}" for n in reversed(range(7))]
    assert pages == 3


async def test_filters_by_state_user_virtual_cluster_and_name(
    client: httpx.AsyncClient, store: Store
) -> None:
    ann, token = store.create_user("ann")
    bob, _ = store.create_user("bob")
    add_jobs(store, ann.id, 2, prefix="a")
    add_jobs(store, bob.id, 2, prefix="b", vc="research")
    submit(store, bob.id, "queued", T0 + timedelta(hours=1))

    async def names(**filter: object) -> list[str]:
        page = await data(client, JOBS, {"filter": filter}, token=token)
        return [e["node"]["name"] for e in page["jobs"]["edges"]]

    assert await names(user="ann") == ["a1", "a0"]
    assert await names(virtualCluster="research") == ["b1", "b0"]
    assert await names(state=["WAITING"]) == ["queued"]
    assert await names(state=["WAITING", "RUNNING"], user="bob") == ["queued", "b1", "b0"]
    assert await names(name="a0") == ["a0"]
    assert await names(user="nobody") == []


async def test_name_contains_finds_part_of_a_name_in_any_case_and_takes_wildcards_literally(
    client: httpx.AsyncClient, store: Store
) -> None:
    ann, token = store.create_user("ann")
    for n, name in enumerate(["Train-ResNet", "train_bert", "eval-resnet", "trainXbert"]):
        submit(store, ann.id, name, T0 + timedelta(minutes=n))

    async def names(**filter: object) -> list[str]:
        page = await data(client, JOBS, {"filter": filter}, token=token)
        return [e["node"]["name"] for e in page["jobs"]["edges"]]

    assert await names(nameContains="resnet") == ["eval-resnet", "Train-ResNet"]
    assert await names(nameContains="TRAIN") == ["trainXbert", "train_bert", "Train-ResNet"]
    assert await names(nameContains="n_b") == ["train_bert"]  # `_` is no wildcard
    assert await names(nameContains="%") == []
    assert await names(nameContains="bert", state=["RUNNING"]) == []


async def test_a_list_row_has_instance_counts_and_the_cursor_of_its_newest_event(
    client: httpx.AsyncClient, store: Store
) -> None:
    ann, token = store.create_user("ann")
    (running,) = add_jobs(store, ann.id, 1, prefix="running")
    submit(store, ann.id, "queued", T0 + timedelta(hours=1))
    query = """
    { jobs { edges { node { name eventCursor instanceCounts { total running }
                            events { edges { cursor } } } } } }
    """
    page = await data(client, query, token=token)
    rows = {e["node"]["name"]: e["node"] for e in page["jobs"]["edges"]}
    total = sum(role.instances for role in store.job_specs([running.id])[running.id].task_roles)
    assert total > 1
    assert rows["running0"]["instanceCounts"] == {"total": total, "running": total}
    assert rows["queued"]["instanceCounts"] == {"total": total, "running": 0}
    for row in rows.values():  # the newest event's cursor: subscribing after it skips the past
        assert row["eventCursor"] == row["events"]["edges"][-1]["cursor"]


async def test_first_above_100_is_an_error_naming_the_argument(
    client: httpx.AsyncClient, store: Store
) -> None:
    _, token = store.create_user("ann")
    body = await gql(client, JOBS, {"first": 101}, token=token)
    assert body["data"] is None
    (error,) = body["errors"]
    assert error["message"].startswith("first must be between 0 and 100, got 101")
    assert error["extensions"]["code"] == "BAD_ARGUMENT"
    body = await gql(client, JOBS, {"after": "bm90IGEgY3Vyc29y"}, token=token)
    assert body["errors"][0]["message"].startswith("after: ")


async def test_job_details_task_roles_instances_and_events(
    client: httpx.AsyncClient, store: Store
) -> None:
    ann, token = store.create_user("ann")
    add_jobs(store, ann.id, 1)
    query = """
    query($name: String) { job(name: $name) {
      config
      taskRoles {
        name instanceCount commands minFailedInstances minSucceededInstances
        resourcePerInstance { cpu memoryMB gpu ports { label count } }
        dockerImage { name type uri }
        prerequisites { name type uri }
        instances { taskRole index attempt taskAttempt state node hostIp startedAt
                    ports { label ports } }
      }
      events(first: 2) { edges { cursor node { sequence type state taskRole index } }
                         pageInfo { hasNextPage endCursor } }
    } }
    """
    found = (await data(client, query, {"name": "job0"}, token=token))["job"]
    assert "protocolVersion: 2" in found["config"]
    worker = next(r for r in found["taskRoles"] if r["name"] == "worker")
    assert worker["instanceCount"] == 2
    assert worker["commands"][-1].startswith("python train.py --batch")
    ports = {p["label"]: p["count"] for p in worker["resourcePerInstance"]["ports"]}
    assert ports == {"grpc": 2, "ssh": 1, "http": 1}
    assert worker["dockerImage"] == {
        "name": "tf_image",
        "type": "DOCKERIMAGE",
        "uri": ["openpai/tensorflow"],
    }
    assert [p["name"] for p in worker["prerequisites"]] == ["tf_image", "cifar", "bench"]
    assert [(i["index"], i["state"]) for i in worker["instances"]] == [
        (0, "RUNNING"),
        (1, "RUNNING"),
    ]
    first = worker["instances"][0]
    assert first["hostIp"].startswith("10.0.0.") and first["node"].startswith("node-")
    assert {p["label"] for p in first["ports"]} == {"ssh", "http"}

    events = found["events"]
    assert [e["node"]["sequence"] for e in events["edges"]] == [1, 2]
    assert events["pageInfo"]["hasNextPage"] is True
    rest = await data(
        client,
        "query($id: ID, $after: String) { job(id: $id) { events(first: 100, after: $after) "
        "{ edges { node { sequence type state } } pageInfo { hasNextPage } } } }",
        {
            "id": (await data(client, '{ job(name: "job0") { id } }', token=token))["job"]["id"],
            "after": events["pageInfo"]["endCursor"],
        },
        token=token,
    )
    sequences = [e["node"]["sequence"] for e in rest["job"]["events"]["edges"]]
    assert sequences == list(range(3, 3 + len(sequences))) and len(sequences) > 3
    assert rest["job"]["events"]["pageInfo"]["hasNextPage"] is False
    job_states = [
        e["node"]["state"]
        for e in rest["job"]["events"]["edges"]
        if e["node"]["type"] == "JOB_STATE"
    ]
    assert job_states[-1] == "RUNNING"


INSTANCE_FIELDS = """taskRole index attempt taskAttempt state stateReason exitCode exitReason
node hostIp startedAt finishedAt ports { label ports }"""


async def test_a_job_list_answers_every_instance_field_however_the_query_asks_for_it(
    client: httpx.AsyncClient, store: Store
) -> None:
    """A list that shows only its instances' states and ports reads less of them; asked for
    more anywhere in the query (here in an aliased field of a fragment), it answers every
    field as the job itself does."""
    ann, token = store.create_user("ann")
    add_jobs(store, ann.id, 3)
    one = "query($id: ID) { job(id: $id) { taskRoles { name instances { %s } } } }"
    states = (
        "{ jobs(first: 10) { edges { node { id "
        "taskRoles { name instances { index state ports { label ports } } } } } } }"
    )
    mixed = (
        "{ jobs(first: 10) { edges { node { id taskRoles { name instances { index state } } "
        "...More } } } } fragment More on Job { more: taskRoles { instances { %s } } }"
    )
    by_states = (await data(client, states, token=token))["jobs"]["edges"]
    by_mixed = (await data(client, mixed % INSTANCE_FIELDS, token=token))["jobs"]["edges"]
    assert len(by_states) == len(by_mixed) == 3
    for shown, both in zip(by_states, by_mixed, strict=True):
        job_id = shown["node"]["id"]
        assert both["node"]["id"] == job_id
        roles = (await data(client, one % INSTANCE_FIELDS, {"id": job_id}, token=token))["job"]
        roles = roles["taskRoles"]
        instances = [i for r in roles for i in r["instances"]]
        assert instances and all(i["hostIp"] and i["node"] and i["startedAt"] for i in instances)
        assert all(i["taskAttempt"] == 1 and i["state"] == "RUNNING" for i in instances)
        assert shown["node"]["taskRoles"] == [
            {
                "name": r["name"],
                "instances": [
                    {"index": i["index"], "state": i["state"], "ports": i["ports"]}
                    for i in r["instances"]
                ],
            }
            for r in roles
        ]
        assert both["node"]["more"] == [{"instances": r["instances"]} for r in roles]


async def test_a_job_list_of_names_states_and_task_roles_answers_as_a_full_one_does(
    client: httpx.AsyncClient, store: Store
) -> None:
    """A list that shows its jobs' names, states, owners and task roles reads less of them;
    its answer is the one a list asking for every field gives."""
    ann, token = store.create_user("ann")
    bob, _ = store.create_user("bob")
    add_jobs(store, ann.id, 3)
    add_jobs(store, bob.id, 2, prefix="b")
    shown = "id name state attempt user { name } taskRoles { name instances { index state } }"
    every = (
        f"{shown} virtualCluster stateReason submittedAt startedAt completedAt retries "
        "eventCursor warnings { code }"
    )

    def page(fields: str) -> str:
        return (
            'jobs(first: 3, filter: {user: "ann"}) { '
            f"edges {{ cursor node {{ {fields} }} }} pageInfo {{ endCursor hasNextPage }} }}"
        )

    full = (await data(client, f"{{ {page(every)} }}", token=token))["jobs"]
    brief = (await data(client, f"{{ {page(shown)} }}", token=token))["jobs"]
    assert len(full["edges"]) == 3 and full["pageInfo"]["hasNextPage"] is False
    assert {e["node"]["user"]["name"] for e in full["edges"]} == {"ann"}
    assert all(e["node"]["startedAt"] and e["node"]["eventCursor"] for e in full["edges"])
    assert brief["pageInfo"] == full["pageInfo"]
    names = list(brief["edges"][0]["node"])
    assert brief["edges"] == [
        {"cursor": e["cursor"], "node": {name: e["node"][name] for name in names}}
        for e in full["edges"]
    ]


async def test_a_deep_job_list_costs_the_same_statements_for_5_and_50_jobs(
    client: httpx.AsyncClient, store: Store
) -> None:
    ann, token = store.create_user("ann")
    engine = runtime(client._transport.app).store.engine  # type: ignore[attr-defined]

    async def statements(expected_jobs: int) -> int:
        log = StatementLog(engine)
        try:
            page = await data(client, DEEP, {"first": 50}, token=token)
        finally:
            log.close()
        edges = page["jobs"]["edges"]
        assert len(edges) == expected_jobs
        ports = [
            p
            for e in edges
            for r in e["node"]["taskRoles"]
            for i in r["instances"]
            for p in i["ports"]
        ]
        assert len(ports) == expected_jobs * 3 * 2  # 3 instances, ssh and http each
        return len(log.statements)

    add_jobs(store, ann.id, 5)
    few = await statements(5)
    add_jobs(store, ann.id, 45, prefix="more")
    many = await statements(50)
    assert few == many
    assert many <= 5  # token, job page, specs, instances (one each)


@pytest.mark.skipif(
    executor_setting() != "fast",
    reason="graphql-core's standard executor holds the request's context in a reference cycle "
    "(its resolve-info helpers are bound methods); only the fast executor promises this",
)
async def test_what_a_job_page_read_and_built_is_freed_when_the_request_ends(
    client: httpx.AsyncClient, store: Store
) -> None:
    """Nothing of a request may hang on a reference cycle: what hangs there waits for the
    cycle collector, whose sweep over a few pages' worth of rows stalls a later request for
    tens of milliseconds. With the collector off, no task role, instance or port group of
    the page may outlive the request."""
    ann, token = store.create_user("ann")
    add_jobs(store, ann.id, 20)
    await data(client, DEEP, {"first": 50}, token=token)  # the first request builds caches
    kinds = (TaskRole, TaskInstance, PortAllocation, Loaders)
    gc.collect()
    gc.disable()
    try:
        page = await data(client, DEEP, {"first": 50}, token=token)
        alive = [type(o).__name__ for o in gc.get_objects() if isinstance(o, kinds)]
    finally:
        gc.enable()
    assert len(page["jobs"]["edges"]) == 20
    assert alive == []


async def test_owners_and_configs_of_a_job_list_are_read_in_one_statement_each(
    client: httpx.AsyncClient, store: Store
) -> None:
    engine = runtime(client._transport.app).store.engine  # type: ignore[attr-defined]
    tokens = []
    for n in range(6):
        user, token = store.create_user(f"user{n}")
        store.add_membership(user.id, f"vc{n}")
        add_jobs(store, user.id, 2, prefix=f"u{n}-")
        tokens.append(token)

    async def statements(first: int) -> tuple[int, list[dict]]:  # type: ignore[type-arg]
        log = StatementLog(engine)
        try:
            page = await data(client, OWNERS, {"first": first}, token=tokens[0])
        finally:
            log.close()
        return len(log.statements), [e["node"] for e in page["jobs"]["edges"]]

    two, _ = await statements(2)  # the newest two jobs: one owner
    count, nodes = await statements(12)  # six owners
    assert count == two
    assert {(n["user"]["name"], tuple(n["user"]["virtualClusters"])) for n in nodes} == {
        (f"user{n}", (f"vc{n}",)) for n in range(6)
    }
    assert all("protocolVersion: 2" in n["config"] for n in nodes)


async def test_an_unexpected_failure_is_masked(client: httpx.AsyncClient, store: Store) -> None:
    ann, token = store.create_user("ann")
    (job,) = add_jobs(store, ann.id, 1)
    with session_scope(store.engine, write=True) as session:  # a damaged row
        session.execute(update(JobRow).where(JobRow.id == job.id).values(spec="{not json"))
    body = await gql(client, '{ job(name: "job0") { name taskRoles { name } } }', token=token)
    assert body["errors"] == [
        {
            "message": "Unexpected error.",
            "locations": body["errors"][0]["locations"],
            "path": ["job", "taskRoles"],
        }
    ]
    assert "pydantic" not in str(body) and "json" not in str(body["errors"]).lower()


async def test_state_is_an_enum_of_the_seven_states(
    client: httpx.AsyncClient, store: Store
) -> None:
    _, token = store.create_user("ann")
    body = await data(client, '{ __type(name: "JobState") { enumValues { name } } }', token=token)
    assert [v["name"] for v in body["__type"]["enumValues"]] == [s.value for s in JobState]


@pytest.mark.parametrize(
    "text",
    [
        '{"protocolVersion": 2, "name": "flow", "type": "job", "secrets": {"key": "hush-%s"}, %s}',
        "{protocolVersion: 2, name: flow, type: job, secrets: {key: hush-%s}, %s}",
    ],
    ids=["json", "yaml-flow"],
)
async def test_a_config_never_shows_its_secrets_whatever_its_style(
    client: httpx.AsyncClient, store: Store, text: str
) -> None:
    ann, token = store.create_user("ann")
    roles = (
        '"prerequisites": [{"name": "i", "type": "dockerimage", "uri": "busybox"}], '
        '"taskRoles": {"main": {"dockerImage": "i", "commands": ["true"], '
        '"resourcePerInstance": {"cpu": 1, "memoryMB": 128, "gpu": 0}}}'
    )
    marker = uuid.uuid4().hex
    config = text % (marker, roles)
    spec = parse_job(config).spec
    assert spec is not None, parse_job(config).errors
    machine = JobMachine(job_policy(spec), f"flow-{marker[:6]}", at=T0)
    store.create_job(spec, machine.snapshot(), owner_id=ann.id)
    found = (await data(client, '{ job(name: "flow") { config } }', token=token))["job"]
    assert marker not in found["config"]
    assert "secrets" in found["config"] and "busybox" in found["config"]
