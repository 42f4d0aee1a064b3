"""/metrics on real servers: who may read it from where (a `paigraph serve` process listening
on every address, asked over loopback and over another address of this machine), and the
Grafana dashboard in deploy/ drawing only series that a server which ran a job on real Docker
does serve."""

from __future__ import annotations

import ipaddress
import json
import re
import socket
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from backends.base import InstanceKey, utcnow
from backends.docker import DockerBackend
from backends.docker_specs import ATTEMPT, INDEX, JOB, ROLE
from backends.usage import UsageSample
from server.api.ids import parse_global_id
from server.app.asgi import create_app
from server.events import bus_for
from server.jobs.service import JobService
from server.store import Store, open_store
from simulator.containers import OWNER
from tests.api_support import data, live_server
from tests.servers import Server, paigraph, served
from tests.service_support import job_config
from tests.simulated import settings
from tests.waiting import until_async

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "paigraph-dashboard.json"
SUBMIT = """mutation Submit($config: String!) {
  submitJob(input: {config: $config}) { job { id state } errors { message } } }"""
STATE = "query State($id: ID!) { job(id: $id) { state } }"


def other_address() -> str | None:
    """An address of this machine that is not loopback (the one its default route leaves
    from), or None when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.200", 9))  # no packet is sent: this only picks a route
        except OSError:
            return None
        found = probe.getsockname()[0]
    return None if ipaddress.ip_address(found).is_loopback else found


def metrics(base: str, token: str | None = None, **headers: str) -> httpx.Response:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.get(f"{base}/metrics", headers=headers, timeout=30)


def user(server: Server, name: str, *options: str) -> str:
    added = server.paigraph("users", "add", name, *options)
    assert added.returncode == 0, added.stderr
    return added.stdout.strip()


# --- who may read it ---------------------------------------------------------------------------


@pytest.fixture
def everywhere(tmp_path: Path) -> Iterator[tuple[Server, str]]:
    """A server listening on every address, not started yet, with another address of this
    machine to reach it from."""
    address = other_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    with served("sqlite", tmp_path) as server:
        server.serve_args = ("--host", "0.0.0.0")
        yield server, f"http://{address}:{server.port}"


def test_loopback_clients_and_admin_tokens_may_read_metrics_and_no_one_else(
    everywhere: tuple[Server, str],
) -> None:
    server, remote = everywhere
    admin = user(server, "root", "--admin")
    ann = user(server, "ann")
    server.start()

    local = metrics(server.url)
    assert local.status_code == 200, local.text
    assert "paigraph_subscriptions" in local.text

    refused = metrics(server.url, ann)
    assert refused.status_code == 403
    assert "admin" in refused.text and "'ann'" in refused.text
    assert metrics(server.url, "not-a-token").status_code == 401

    from_afar = metrics(remote)
    assert from_afar.status_code == 401
    assert from_afar.headers["www-authenticate"] == "Bearer"
    assert "PAIGRAPH_METRICS_OPEN" in from_afar.text
    assert metrics(remote, ann).status_code == 403
    granted = metrics(remote, admin)
    assert granted.status_code == 200 and "paigraph_subscriptions" in granted.text

    # loopback, but another site's name (DNS rebinding) or through a proxy: not local
    assert metrics(server.url, Host=f"attacker.example:{server.port}").status_code == 401
    assert metrics(server.url, **{"X-Forwarded-For": "203.0.113.9"}).status_code == 401
    assert metrics(server.url, Forwarded="for=203.0.113.9").status_code == 401


def test_the_open_setting_lets_every_client_read_metrics(everywhere: tuple[Server, str]) -> None:
    server, remote = everywhere
    user(server, "ann")
    server.settings["PAIGRAPH_METRICS_OPEN"] = "true"
    server.start()
    assert metrics(remote).status_code == 200
    # the rest of the API still needs a token
    assert httpx.post(f"{remote}/graphql", json={"query": "{ version }"}).status_code == 401


def test_a_malformed_setting_stops_serve_naming_it() -> None:
    done = paigraph("serve", "--port", "0", env={"PAIGRAPH_METRICS_MAX_INSTANCES": "lots"})
    assert done.returncode == 2
    assert "PAIGRAPH_METRICS_MAX_INSTANCES must be a whole number" in done.stderr
    assert "Traceback" not in done.stderr


# --- the dashboard -----------------------------------------------------------------------------

# PromQL words that are no metric: keywords, aggregation modifiers and set operators.
KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
    | {"and", "or", "unless", "inf", "nan"}
)
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")


def expressions(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard: its panels' targets and its variables'."""
    found = [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if "expr" in target
    ]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            found.append(query["query"] if isinstance(query, dict) else query)
    return found


def metric_names(expression: str) -> set[str]:
    """The metrics an expression reads: what remains once strings, label matchers, ranges,
    grouping clauses, functions, keywords and numbers are taken out."""
    assert expression.count("(") == expression.count(")"), expression
    assert expression.count("{") == expression.count("}"), expression
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expression)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = GROUPING.sub(" ", text)
    label_values = re.fullmatch(r"\s*label_values\(\s*([A-Za-z_:][\w:]*)\s*,\s*\w+\s*\)\s*", text)
    if label_values:
        return {label_values.group(1)}
    names = set()
    for match in re.finditer(r"[A-Za-z_:][\w:]*", text):
        word, rest = match.group(), text[match.end() :]
        if rest.lstrip().startswith("(") or word in KEYWORDS:
            continue  # a function
        if text[: match.start()].endswith(("$", ".")) or word.startswith("__"):
            continue  # a Grafana variable, a number's exponent
        names.add(word)
    return names


def test_the_expressions_are_read_for_their_metric_names() -> None:
    quantile = (
        "histogram_quantile(0.95, sum by (le, operation) "
        '(rate(a_bucket{x=~"$v", y!="by (z)"}[$__rate_interval])))'
    )
    assert metric_names(quantile) == {"a_bucket"}
    assert metric_names("sum(b) * 60 / on (job) group_left c_total") == {"b", "c_total"}
    assert metric_names("label_values(paigraph_jobs, virtual_cluster)") == {"paigraph_jobs"}


def docker_usage(store: Store, owner: str) -> Sequence[tuple[UsageSample, str]]:
    """What the owner's running containers use now, as Docker's stats say, with their job's
    user: a stand-in for the usage sampler, measuring real containers."""
    found = []
    engine = docker.from_env()
    try:
        for container in engine.containers.list(filters={"label": f"{OWNER}={owner}"}):
            labels = container.labels
            if JOB not in labels:
                continue
            stats: dict[str, Any] = container.stats(stream=False)
            cpu, pre = stats["cpu_stats"], stats.get("precpu_stats") or {}
            used = cpu["cpu_usage"]["total_usage"] - pre.get("cpu_usage", {}).get("total_usage", 0)
            system = cpu.get("system_cpu_usage", 0) - pre.get("system_cpu_usage", 0)
            cores = used / system * cpu.get("online_cpus", 1) if system > 0 else 0.0
            networks = stats.get("networks") or {}
            job = store.get_job(labels[JOB])
            sample = UsageSample(
                key=InstanceKey(
                    job_id=labels[JOB],
                    attempt=int(labels[ATTEMPT]),
                    role=labels[ROLE],
                    index=int(labels[INDEX]),
                ),
                at=utcnow(),
                cpu_cores=max(cores, 0.0),
                memory_bytes=stats["memory_stats"].get("usage", 0),
                memory_limit_bytes=stats["memory_stats"].get("limit"),
                network_rx_bytes=sum(n["rx_bytes"] for n in networks.values()),
                network_tx_bytes=sum(n["tx_bytes"] for n in networks.values()),
            )
            found.append((sample, job.owner if job else "?"))
    finally:
        engine.close()
    return found


@pytest.mark.anyio
async def test_every_series_the_grafana_dashboard_draws_is_served_after_a_job_ran(
    tmp_path: Path, owner: str
) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    wanted = {name for expr in expressions(dashboard) for name in metric_names(expr)}
    assert len(wanted) >= 15, wanted

    db_url = f"sqlite:///{tmp_path / 'jobs.db'}"
    store = open_store(db_url)
    bus = bus_for(db_url)
    service = JobService(store, DockerBackend(settings(tmp_path / "state"), owner=owner), bus)
    app = create_app(service, latest_usage=lambda: docker_usage(store, owner))
    config = job_config(
        {"main": {"commands": ["echo started", "sleep 4", "exit 0"]}}, name="scraped"
    )
    try:
        async with live_server(app) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
            _, token = store.create_user("ann")
            submitted = (await data(client, SUBMIT, {"config": config}, token=token))["submitJob"]
            assert submitted["errors"] == [], submitted
            job_id = submitted["job"]["id"]

            async def state() -> str:
                return (await data(client, STATE, {"id": job_id}, token=token))["job"]["state"]

            await until_async(lambda: _is(state, "RUNNING"), "the job running", 90)
            while_running = (await client.get("/metrics")).text
            await until_async(lambda: _is(state, "SUCCEEDED"), "the job succeeding", 90)
            after = (await client.get("/metrics")).text
    finally:
        await bus.close()
        store.close()

    served_names = samples_of(while_running) | samples_of(after)
    assert wanted - served_names == set(), "the dashboard draws series /metrics does not serve"
    running = {s.name: s for f in text_string_to_metric_families(while_running) for s in f.samples}
    memory = running["paigraph_instance_memory_bytes"]
    stored_id = parse_global_id(job_id)[1]
    assert memory.labels == {"job": stored_id, "role": "main", "index": "0", "user": "ann"}
    assert memory.value > 0
    ended = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(after)
        for s in f.samples
    }
    assert ended[("paigraph_launches_total", ())] == 1
    assert ended[("paigraph_instance_exits_total", (("exit_class", "succeeded"),))] == 1
    assert ended[("paigraph_jobs", (("state", "SUCCEEDED"), ("virtual_cluster", "default")))] == 1
    assert ended[("paigraph_backend_up", (("backend", "docker"),))] == 1


async def _is(state: Any, wanted: str) -> bool:
    return await state() == wanted


def samples_of(text: str) -> set[str]:
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}
