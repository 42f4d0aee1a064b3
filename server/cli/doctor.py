"""`paigraph doctor`: check what the service and the simulator need on this machine.

Each check looks at one thing (the Docker engine, the simulator's settings, its port range and
state directory, the database, the images the examples run in) and gives a `Finding`: fine or
not, what it saw, and when not fine what to do about it. Nothing is changed: no database is
created or migrated, no directory made, no image pulled.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape
from rich.table import Table
from sqlalchemy.engine import make_url

from server.shapes.store_errors import DatabaseError
from server.store import create_store_engine, current_revision, database_url
from server.store.migrate import alembic_config
from simulator.cluster import Cluster
from simulator.containers import Engine, EngineError, plain_runtime
from simulator.ports import bind_problem
from simulator.settings import (
    CONFIG_ENV,
    STATE_ENV,
    SettingsError,
    SimulatorSettings,
    load_settings,
)

TEST_IMAGE = "paigraph/busybox:test"
# the images the examples and tests run in, and how to get each without a registry
EXAMPLE_IMAGES = {TEST_IMAGE: "build it: ./scripts/build-test-image (needs busybox-static)"}


@dataclass(frozen=True)
class Finding:
    """The outcome of one check; `advice` says what to do when it is not `ok`."""

    check: str
    ok: bool
    detail: str
    advice: str = ""


def check_engine() -> tuple[Finding, Engine | None]:
    """Whether a Docker engine answers, and which version it is."""
    name = "Docker engine"
    try:
        engine = Engine()
        version = engine.client.version()
    except EngineError as exc:
        # the engine's own hint is the short form of the advice given here
        return Finding(name, False, str(exc).split("; start one")[0], _START_DOCKER), None
    except Exception as exc:  # the engine answered the ping but not the version call
        return Finding(name, False, f"the engine does not answer: {exc}", _START_DOCKER), None
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    detail = (
        f"Docker {version.get('Version', '?')} (API {version.get('ApiVersion', '?')}) at {where}"
    )
    return Finding(name, True, detail), engine


_START_DOCKER = (
    "start the engine (./scripts/start-docker as root, or systemctl start docker), "
    "or point DOCKER_HOST at one; your user needs access to its socket"
)


def check_settings(config: Path | None) -> tuple[Finding, SimulatorSettings | None]:
    """Whether the simulator's settings (the file or the defaults) can be loaded."""
    name = "Simulator settings"
    try:
        settings = load_settings(config)
    except SettingsError as exc:
        return Finding(
            name, False, str(exc), f"fix the file named by --config or ${CONFIG_ENV}"
        ), None
    source = config or os.environ.get(CONFIG_ENV)
    return Finding(name, True, f"from {source}" if source else "built-in defaults"), settings


def check_ports(settings: SimulatorSettings) -> Finding:
    """Whether the port range has ports instances can get: free and bindable right now."""
    name = "Port range"
    start, end = settings.port_range.start, settings.port_range.end
    span = f"{start}-{end - 1}"
    free = sum(1 for port in range(start, end) if bind_problem(port) is None)
    total = end - start
    detail = f"{free} of {total} ports in {span} can be bound"
    if free == 0:
        return Finding(
            name,
            False,
            f"no port in {span} can be bound: other programs (or running jobs) use all {total}",
            "stop what holds them, or choose a free range with port_range in the simulator "
            f"settings (a YAML file named by ${CONFIG_ENV}, e.g. port_range: 20000-30000)",
        )
    if free < 2:
        return Finding(
            name,
            False,
            f"{detail}: an instance needs at least 2 (its ssh and http ports)",
            f"widen port_range in the simulator settings (${CONFIG_ENV})",
        )
    return Finding(name, True, detail)


def check_publish_address(settings: SimulatorSettings) -> Finding:
    """Whether instances' ports can be published on `publish_address`, and who reaches them:
    an address that is not this machine's fails every start, and a wildcard opens every job's
    ssh and http ports to the network."""
    name = "Publish address"
    address = settings.publish_address
    problem = _bind_problem(address)
    if problem is not None:
        return Finding(
            name,
            False,
            f"instances' ports cannot be published on {address}: {problem}",
            "set publish_address in the simulator settings to an address of this machine "
            f"(127.0.0.1, the default, for this machine only) (${CONFIG_ENV})",
        )
    parsed = ipaddress.ip_address(address)
    if parsed.is_loopback:
        return Finding(name, True, f"ports are published on {address}: this machine only")
    who = "every network this machine is on" if parsed.is_unspecified else f"{address}'s network"
    return Finding(name, True, f"ports are published on {address}: reachable from {who}")


def _bind_problem(address: str) -> str | None:
    """Why a TCP socket cannot be bound on `address` (any free port), or None."""
    family = socket.AF_INET6 if ipaddress.ip_address(address).version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, 0))
        except OSError as exc:
            return (exc.strerror or str(exc)).lower()
    return None


def check_gpus(engine: Engine, settings: SimulatorSettings) -> Finding:
    """Which GPUs the simulated cluster hands out, and whether simulated ones stay simulated:
    under a default NVIDIA runtime they need a plain runtime to run with (Engine.runtime_for)."""
    name = "GPUs"
    cluster = Cluster(settings)
    real = [n for n in cluster.nodes if n.real_gpus]
    total = sum(n.gpu for n in cluster.nodes)
    simulated = total - sum(n.gpu for n in real)
    detail = f"{total} on {len(cluster.nodes)} nodes: {simulated} simulated"
    if real:
        detail += f", {real[0].gpu} of this machine's on {real[0].name}"
    if not total:
        return Finding(name, True, "none (gpus_per_node: 0): jobs asking for GPUs are refused")
    default, runtimes = engine.runtimes()
    runtime, problem = plain_runtime(default, runtimes)
    if problem is not None and simulated:
        return Finding(
            name,
            False,
            f"{detail}; {problem}",
            "register runc with the Docker engine (it comes with Docker), or set "
            f"gpus_per_node: 0 in the simulator settings (${CONFIG_ENV})",
        )
    if runtime is not None:
        detail += (
            f"; the default runtime {default} attaches GPUs, so simulated ones run with {runtime}"
        )
    return Finding(name, True, detail)


def check_state_dir(settings: SimulatorSettings) -> Finding:
    """Whether the simulator may write its state directory (made on first use if missing)."""
    name = "State directory"
    path = Path(settings.state_dir)
    advice = (
        f"make {path} writable for this user, or choose another directory with "
        f"${STATE_ENV} (or state_dir in the simulator settings)"
    )
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return Finding(name, False, f"{existing} is in the way of {path}: not a directory", advice)
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        why = exc.strerror or str(exc)
        return Finding(name, False, f"cannot write in {existing}: {why.lower()}", advice)
    if existing == path:
        return Finding(name, True, f"{path} is writable")
    return Finding(name, True, f"{path} will be created on first use ({existing} is writable)")


def check_database(url: str | None) -> Finding:
    """Whether the database answers and its schema is what this paigraph expects."""
    name = "Database"
    try:
        chosen = database_url(url)
    except DatabaseError as exc:
        return Finding(name, False, str(exc), _DB_ADVICE)
    masked_url = _password_hidden(chosen)
    file = _sqlite_file(chosen)
    if file is not None and not file.exists() and file.parent.is_dir():
        return Finding(name, True, f"{masked_url}: no file yet; paigraph serve creates it")
    try:
        engine = create_store_engine(chosen)
    except DatabaseError as exc:
        return Finding(name, False, str(exc), _DB_ADVICE)
    try:
        current = current_revision(engine)
    except Exception as exc:
        reason = f"{masked_url}: cannot read the schema version: {exc}"
        return Finding(name, False, reason, _DB_ADVICE)
    finally:
        engine.dispose()
    return _schema_finding(name, masked_url, current)


_DB_ADVICE = (
    "check that the database server runs and that the URL's user, password, host and database "
    "are right; choose the database with --db or PAIGRAPH_DB (postgresql://USER:PASSWORD@HOST:"
    "PORT/DB or sqlite:///PATH)"
)


def _schema_finding(name: str, masked_url: str, current: str | None) -> Finding:
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config())
    head = scripts.get_current_head()
    if current is None:
        return Finding(name, True, f"{masked_url}: empty; paigraph serve creates the tables")
    if current == head:
        return Finding(name, True, f"{masked_url}: schema up to date (revision {head})")
    known = {script.revision for script in scripts.walk_revisions()}
    if current not in known:
        return Finding(
            name,
            False,
            f"{masked_url}: schema revision {current!r} is unknown to this paigraph (head {head})",
            "the database was migrated by a newer paigraph: upgrade paigraph, or use another "
            "database",
        )
    return Finding(
        name,
        False,
        f"{masked_url}: schema at revision {current}, this paigraph needs {head}",
        "migrate it: paigraph serve (or paigraph users add) brings the schema up to date "
        "when it starts",
    )


def check_server(url: str | None) -> Finding:
    """Whether the paigraph server at `url` (else $PAIGRAPH_URL, else the local default) can
    run jobs: its /health answer. No server answering is fine (doctor also runs before one
    is started); one that answers unhealthy says why (e.g. its Docker engine unreachable)."""
    import httpx

    from server.client.remote import DEFAULT_URL

    base = (url or os.environ.get("PAIGRAPH_URL") or DEFAULT_URL).rstrip("/")
    name = "Server"
    try:
        answer = httpx.get(f"{base}/health", timeout=3)
    except httpx.HTTPError as exc:
        return Finding(name, True, f"no paigraph server answers at {base} ({exc}); not checked")
    if answer.status_code == 200:
        return Finding(name, True, f"{base} runs jobs normally")
    try:
        body = answer.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict) or "status" not in body:
        return Finding(name, True, f"{base}/health answered {answer.status_code}; not paigraph")
    reason = body.get("reason") or f"/health answered {answer.status_code}"
    detail = f" ({body['detail']})" if body.get("detail") else ""
    return Finding(
        name,
        False,
        f"{base}: {reason}{detail}",
        "jobs wait and go on by themselves once it is back; start the Docker engine the "
        "server uses (./scripts/start-docker as root, or systemctl start docker) or fix what "
        "keeps the server from reaching it",
    )


def check_images(
    engine: Engine | None, images: Iterable[str], settings: SimulatorSettings | None
) -> list[Finding]:
    """Whether each image is on the engine; the simulator starts only local images."""
    findings = []
    for image in images:
        name = f"Image {image}"
        how = EXAMPLE_IMAGES.get(
            image,
            "build or load it on this machine (docker build, docker load or docker import); "
            "the simulator does not pull images",
        )
        if engine is None:
            findings.append(Finding(name, False, "not checked: no Docker engine", how))
            continue
        try:
            present = engine.image_exists(image)
        except EngineError as exc:
            findings.append(Finding(name, False, str(exc), how))
            continue
        if present:
            findings.append(Finding(name, True, "present"))
        elif settings is not None and settings.image_pull:
            findings.append(Finding(name, True, "missing; pulled on first use (image_pull)"))
        else:
            findings.append(Finding(name, False, "not on this machine", how))
    return findings


def diagnose(
    *,
    db: str | None = None,
    config: Path | None = None,
    images: Iterable[str] = (),
    url: str | None = None,
) -> list[Finding]:
    """Every check, in the order a user would fix them; the running server's last."""
    engine_finding, engine = check_engine()
    settings_finding, settings = check_settings(config)
    findings = [engine_finding, settings_finding]
    if settings is not None:
        findings += [
            check_ports(settings),
            check_publish_address(settings),
            check_state_dir(settings),
        ]
    if settings is not None and engine is not None:
        findings.append(check_gpus(engine, settings))
    findings.append(check_database(db))
    wanted = list(dict.fromkeys([*EXAMPLE_IMAGES, *images]))
    findings += check_images(engine, wanted, settings)
    if engine is not None:
        engine.client.close()
    findings.append(check_server(url))
    return findings


def report(findings: list[Finding]) -> Table:
    """The findings as a table: one row per check; a problem's row says what to do."""
    table = Table(title="paigraph doctor", title_justify="left", show_lines=True)
    table.add_column("Check", no_wrap=True)
    table.add_column("Status", no_wrap=True)
    table.add_column("Details and what to do", overflow="fold")
    for finding in findings:
        status = "[green]OK[/green]" if finding.ok else "[red]PROBLEM[/red]"
        text = escape(finding.detail)
        if finding.advice:
            text += f"\n[yellow]To do:[/yellow] {escape(finding.advice)}"
        table.add_row(escape(finding.check), status, text)
    return table


def _sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL; None for other databases, memory and bad URLs."""
    try:
        parsed = make_url(url)
    except Exception:
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def _password_hidden(url: str) -> str:
    """The URL with its password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url
