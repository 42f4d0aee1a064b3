"""The `paigraph` command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from server.cli.args import open_store_or_exit, parse_params
from server.cli.help import Typer
from server.cli.output import console
from server.cli.user_commands import register as register_user_commands
from server.client.exec_commands import register as register_exec_commands
from server.client.fs_commands import register as register_fs_commands
from server.client.market_commands import register as register_market_commands
from server.client.remote_commands import register as register_remote_commands

if TYPE_CHECKING:
    from server.protocol import Issue, ParseResult
    from server.protocol.model import JobSpec
    from server.store import Store

app = Typer(
    help="paigraph: multi-role batch jobs in the OpenPAI style, served over GraphQL.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = console()
err = console(stderr=True)


def main() -> None:
    app()


def package_version() -> str:
    """paigraph's version as installed (pyproject.toml's), or `unknown` when it runs from a
    checkout that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("paigraph")
    except PackageNotFoundError:
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"paigraph {package_version()}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """paigraph: multi-role batch jobs in the OpenPAI style, served over GraphQL."""


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        err.print(
            f"[red]error:[/red] cannot read {escape(str(path))}: {escape(exc.strerror or str(exc))}"
        )
        raise typer.Exit(2) from None


def _issue_json(issue: Issue) -> dict[str, Any]:
    return {"path": issue.path, "code": issue.code, "message": issue.message}


def _print_issues(console: Console, result: ParseResult) -> None:
    labelled = [("[red]error[/red]  ", i) for i in result.errors]
    labelled += [("[yellow]warning[/yellow]", i) for i in result.warnings]
    for label, issue in labelled:
        where = escape(issue.path or "(document)")
        code = escape(f"[{issue.code}]")
        console.print(f"  {label} {where}: {escape(issue.message)} [dim]{code}[/dim]")


def _describe_ok(result: ParseResult) -> str:
    from server.protocol import Kind

    if result.kind is Kind.COMPONENT and result.component is not None:
        return f"{result.summary()} '{result.component.name}'"
    spec = result.spec
    assert spec is not None
    roles = ", ".join(f"{r.name} ×{r.instances}" for r in spec.task_roles)
    return f"{result.summary()} '{spec.name}' (task roles: {roles})"


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="Job configs or components (YAML or JSON).")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON report for machines.")
    ] = False,
) -> None:
    """Check job configs and components; exit 0 when all are valid, 1 when any is not."""
    from server.protocol import parse_document

    reports = []
    all_ok = True
    for path in files:
        result = parse_document(_read(path))
        all_ok &= result.ok
        if as_json:
            reports.append(
                {
                    "file": str(path),
                    "valid": result.ok,
                    "kind": result.kind.value if result.kind else None,
                    "dialect": result.dialect.value if result.dialect else None,
                    "type": result.component.type.value if result.component else None,
                    "errors": [_issue_json(i) for i in result.errors],
                    "warnings": [_issue_json(i) for i in result.warnings],
                }
            )
            continue
        if result.ok:
            out.print(f"[green]OK[/green]      {escape(str(path))}: {escape(_describe_ok(result))}")
        else:
            out.print(f"[red]INVALID[/red] {escape(str(path))}: {escape(result.summary())}")
        _print_issues(out, result)
    if as_json:
        out.print_json(json.dumps(reports))
    raise typer.Exit(0 if all_ok else 1)


def _unknown_parameters(raw: bytes, values: dict[str, Any]) -> list[Issue]:
    """An error for each value given for a parameter the job does not declare (a typo would
    otherwise be ignored silently), as `market use` reports it."""
    from server.protocol import Issue, parse_job

    spec = parse_job(raw).spec
    if spec is None or not values:
        return []
    declared = list(spec.parameters)
    known = ", ".join(declared) if declared else "it declares none"
    return [
        Issue(
            f"parameters.{name}",
            "unknown-parameter",
            f"job {spec.name!r} has no parameter {name!r} (its parameters: {known})",
        )
        for name in values
        if name not in declared
    ]


def _resolved(file: Path, params: list[str] | None) -> JobSpec:
    """The job in `file` with its parameters rendered; exit 1 with every error when invalid."""
    from server.protocol import resolve_job

    raw, values = _read(file), parse_params(params or [])
    result = resolve_job(raw, values)
    result.issues.extend(_unknown_parameters(raw, values) if result.spec is not None else [])
    if result.errors:
        result.spec = None
    if result.spec is None:
        err.print(f"[red]INVALID[/red] {escape(str(file))}: {escape(result.summary())}")
        _print_issues(err, result)
        raise typer.Exit(1)
    _print_issues(err, result)
    return result.spec


@app.command()
def resolve(
    file: Annotated[Path, typer.Argument(help="A job config in any dialect.")],
    param: Annotated[
        list[str] | None,
        typer.Option("--param", "-p", metavar="KEY=VALUE", help="Override a parameter: key=value."),
    ] = None,
    manifests: Annotated[
        bool,
        typer.Option(
            "--manifests",
            help="Print instead the Kubernetes objects the kubernetes backend would create for "
            "the job's first attempt, as a YAML stream (settings from PAIGRAPH_K8S_*).",
        ),
    ] = False,
) -> None:
    """Print the job as canonical OpenPAI protocol v2 YAML, with parameters rendered."""
    from server.protocol import to_v2_yaml

    spec = _resolved(file, param)
    typer.echo(_manifests(spec) if manifests else to_v2_yaml(spec), nl=False)


def _manifests(spec: JobSpec) -> str:
    """The job's first attempt as the kubernetes backend would create it; exit 1 (2 for bad
    settings) with the reason when it cannot run there."""
    from backends.base import LaunchRefused
    from backends.kubernetes_manifests import manifest_stream
    from backends.kubernetes_settings import SettingsError, load_settings
    from server.jobs.launch import NotRunnable, launch_request
    from server.jobs.submission import new_job_id

    try:
        settings = load_settings()
    except SettingsError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    job_id = new_job_id(spec.name).rsplit("-", 1)[0] + "-xxxxxxxx"  # the server draws the suffix
    try:
        request = launch_request(spec, job_id=job_id, default_fs=settings.default_fs_uri)
        return manifest_stream(request, settings)
    except NotRunnable as exc:
        err.print(f"[red]error:[/red] {escape(exc.path)}: {escape(exc.message)}")
    except LaunchRefused as exc:
        err.print(
            f"[red]error:[/red] the kubernetes backend cannot run this job: {escape(str(exc))}"
        )
    raise typer.Exit(1)


@app.command()
def run(
    file: Annotated[Path, typer.Argument(help="A job config in any dialect.")],
    param: Annotated[
        list[str] | None,
        typer.Option("--param", "-p", metavar="KEY=VALUE", help="Override a parameter: key=value."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar="PAIGRAPH_SIMULATOR_CONFIG",
            help="Simulator settings file (nodes, virtual clusters, port range).",
        ),
    ] = None,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="Show the table only, not what the instances print."),
    ] = False,
) -> None:
    """Run one job on the local simulator in the foreground, showing what every instance
    prints; exit 0 SUCCEEDED, 1 FAILED. The logs stay for `paigraph logs --local`."""
    from server.cli.foreground import run_in_foreground

    spec = _resolved(file, param)
    raise typer.Exit(run_in_foreground(spec, out, config=config, quiet=quiet))


_DB_HELP = (
    "Database URL: sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DB "
    "(default: a SQLite file in the user's data directory)."
)
DbOption = Annotated[
    str | None, typer.Option("--db", envvar="PAIGRAPH_DB", metavar="URL", help=_DB_HELP)
]


@app.command()
def serve(
    host: Annotated[
        str, typer.Option(envvar="PAIGRAPH_HOST", help="The address to listen on.")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(envvar="PAIGRAPH_PORT", help="The port to listen on.")
    ] = 8000,
    db: DbOption = None,
    backend: Annotated[
        str,
        typer.Option(
            envvar="PAIGRAPH_BACKEND",
            help="Where jobs run: docker (the local simulator) or kubernetes (a cluster).",
        ),
    ] = "docker",
    namespace: Annotated[
        str | None,
        typer.Option(
            envvar="PAIGRAPH_K8S_NAMESPACE",
            help="kubernetes: the namespace of the jobs' pods (default: the context's).",
        ),
    ] = None,
    kubeconfig: Annotated[
        str | None,
        typer.Option(
            envvar="PAIGRAPH_KUBECONFIG",
            help="kubernetes: the kubeconfig file (default: in-cluster, else ~/.kube/config).",
        ),
    ] = None,
    executor: Annotated[
        str,
        typer.Option(
            envvar="PAIGRAPH_EXECUTOR",
            help="The GraphQL executor: fast (completes plain fields in place) or standard "
            "(graphql-core's own; the same answers, slower on large pages).",
        ),
    ] = "fast",
    job_visibility: Annotated[
        str,
        typer.Option(
            envvar="PAIGRAPH_JOB_VISIBILITY",
            help="Who reads which jobs (their config, events, logs): all (every signed-in "
            "user reads every job, secrets masked, as in OpenPAI) or own (users read their "
            "own jobs, admins every job).",
        ),
    ] = "all",
) -> None:
    """Run the GraphQL service (GraphiQL in the browser at /graphql).

    On a loopback host with no user in the database, requests act as the local admin; once
    `paigraph users add` made a user, every request needs a token.
    """
    from server.api.job_access import job_visibility_setting
    from server.api.schema import executor_setting
    from server.app.asgi import BACKENDS, BackendUnavailable, create_app, make_backend
    from server.app.serving import AnnouncingServer, CannotListen, listening_socket, server_config
    from server.metrics import metrics_settings

    try:
        executor = executor_setting(executor)
        job_visibility = job_visibility_setting(job_visibility)
        metrics = metrics_settings()
    except ValueError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None

    try:
        sock = listening_socket(host, port, "--port or PAIGRAPH_PORT")
    except CannotListen as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None
    with sock:
        open_store_or_exit(db).close()  # brings the schema up to date before anything is served
        try:
            chosen = make_backend(
                backend,
                namespace=namespace,
                kubeconfig=kubeconfig,
                serving=f"{_address(host, port)}/graphql",
            )
        except BackendUnavailable as exc:
            err.print(f"[red]error:[/red] {escape(str(exc))}")
            raise typer.Exit(2 if backend not in BACKENDS else 1) from None
        app = create_app(
            db_url=db,
            host=host,
            backend=chosen,
            on_stop=lambda store: _say_what_keeps_running(store, backend),
            executor=executor,
            job_visibility=job_visibility,
            metrics=metrics,
        )
        config = server_config(app, host=host, port=port, log_level="info")

        def announce() -> None:
            err.print(f"paigraph serving GraphQL on {_address(host, port)}/graphql")

        AnnouncingServer(config, announce).run(sockets=[sock])


def _address(host: str, port: int) -> str:
    """The URL of host:port, an IPv6 address in brackets."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _say_what_keeps_running(store: Store, backend: str) -> None:
    """As the server stops: the jobs it leaves running, and what to do about them."""
    from server.app.shutdown import farewell, still_running

    try:
        left = still_running(store)
    except Exception as exc:  # the database went away: say so rather than fail the shutdown
        err.print(f"paigraph stopped; the jobs left running cannot be counted: {escape(str(exc))}")
        return
    err.print(escape(farewell(left, backend)))


users_app = Typer(help="Manage users and their tokens.", no_args_is_help=True)
app.add_typer(users_app, name="users")


@users_app.command("add")
def users_add(
    name: Annotated[str, typer.Argument(help="The new user's name.")],
    admin: Annotated[bool, typer.Option("--admin", help="Make the user an administrator.")] = False,
    vc: Annotated[
        list[str] | None,
        typer.Option("--vc", help="A virtual cluster the user may submit to (repeatable)."),
    ] = None,
    db: DbOption = None,
) -> None:
    """Add a user to the database directly; print the new token alone on standard output.

    Everyone may submit to the virtual cluster `default`; `--vc` grants others."""
    from server.shapes.store_errors import StoreError

    store = open_store_or_exit(db)
    try:
        user, token = store.create_user(name, admin=admin)
        for cluster in vc or []:
            store.add_membership(user.id, cluster)
    except StoreError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None
    finally:
        store.close()
    typer.echo(token)


register_user_commands(users_app)
register_remote_commands(app, parse_params)
register_exec_commands(app)
register_fs_commands(app)


@app.command()
def doctor(
    db: DbOption = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar="PAIGRAPH_SIMULATOR_CONFIG",
            help="Simulator settings file (port range, state directory, ...).",
        ),
    ] = None,
    image: Annotated[
        list[str] | None,
        typer.Option("--image", help="Also check that this image is on the engine (repeatable)."),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option(
            "--url", envvar="PAIGRAPH_URL", metavar="URL", help="The paigraph server to ask."
        ),
    ] = None,
) -> None:
    """Check the Docker engine, the port range, the state directory, the database, the
    images the examples need and the running server's health; say what to do about each
    problem. Exit 0 when all is well."""
    from server.cli.doctor import diagnose, report

    findings = diagnose(db=db, config=config, images=image or [], url=url)
    out.print(report(findings))
    problems = sum(not finding.ok for finding in findings)
    if problems:
        out.print(f"[red]{problems} problem{'s' if problems > 1 else ''}[/red]: see To do.")
    else:
        out.print("[green]All checks passed.[/green]")
    raise typer.Exit(1 if problems else 0)


register_market_commands(app)


@app.command()
def schema() -> None:
    """Print the GraphQL schema (SDL); schema.graphql in the repository is this output."""
    from server.api.schema import STANDARD, schema_for

    typer.echo(schema_for(STANDARD).as_str())


if __name__ == "__main__":
    main()
