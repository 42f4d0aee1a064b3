"""`paigraph submit | status | logs | top | stop`: a running server's jobs from the terminal."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.text import Text

from server.cli.job_table import InstanceRow, job_table
from server.cli.output import console
from server.client.remote import DEFAULT_URL, FINAL_STATES, Client, RemoteError
from server.client.usage_table import usage_table

out = console()
err = console(stderr=True)

UrlOption = Annotated[
    str, typer.Option("--url", envvar="PAIGRAPH_URL", metavar="URL", help="The paigraph server.")
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="PAIGRAPH_TOKEN",
        metavar="TOKEN",
        show_default=False,
        help="Your token (paigraph users add prints one); none on a fresh loopback server.",
    ),
]


def register(app: typer.Typer, parse_params: Any) -> None:
    """Add the remote commands to the `paigraph` command."""

    @app.command()
    def submit(
        file: Annotated[Path, typer.Argument(help="A job config in any dialect.")],
        param: Annotated[
            list[str] | None,
            typer.Option(
                "--param", "-p", metavar="KEY=VALUE", help="Override a parameter: key=value."
            ),
        ] = None,
        watch: Annotated[
            bool, typer.Option("--watch", "-w", help="Follow the job until it ends.")
        ] = False,
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
    ) -> None:
        """Submit a job to the server; print its id."""
        try:
            config = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            err.print(f"[red]error:[/red] cannot read {escape(str(file))}: {escape(str(exc))}")
            raise typer.Exit(2) from None
        client = _client(url, token)
        result = _call(lambda: client.submit(config, parse_params(param or [])))
        if result["errors"]:
            err.print(f"[red]REFUSED[/red] {escape(str(file))}")
            for e in result["errors"]:
                where = ".".join(e["path"]) or "(document)"
                err.print(
                    f"  {escape(where)}: {escape(e['message'])} [dim][{escape(e['code'])}][/dim]"
                )
            raise typer.Exit(1)
        warned = result.get("warnings") or []
        for line in warning_lines(warned):
            err.print(line)  # stdout stays the job's id alone, for scripts
        job = result["job"]
        out.print(job["id"])
        if watch:  # the table shows only the warnings that come later (of its launch)
            raise typer.Exit(_watch(client, job, said=warned))

    @app.command()
    def status(
        job: Annotated[str, typer.Argument(help="The job's id or name.")],
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
    ) -> None:
        """Show a job: its state and every instance."""
        client = _client(url, token)
        out.print(render(_call(lambda: client.job(job))))

    @app.command()
    def logs(
        job: Annotated[str, typer.Argument(help="The job's id or name.")],
        role: Annotated[str, typer.Argument(help="The task role.")],
        index: Annotated[int, typer.Argument(help="The instance's index.")],
        follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep following.")] = False,
        local: Annotated[
            bool,
            typer.Option(
                "--local",
                help="Read the logs `paigraph run` kept of a job it ran on this machine "
                "(its last runs, under the simulator's state directory), not the server's.",
            ),
        ] = False,
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
    ) -> None:
        """Print an instance's output (kept after it ended)."""
        if local:
            raise typer.Exit(_local_log(job, role, index))
        client = _client(url, token)
        found = _call(lambda: client.job(job))

        def stream() -> None:
            last = "\n"
            for data in client.task_logs(found["id"], role, index, follow):
                sys.stdout.write(data)
                sys.stdout.flush()
                last = data[-1:] or last
            if last != "\n":  # the next prompt starts on a line of its own
                sys.stdout.write("\n")

        _call(stream)

    @app.command()
    def top(
        job: Annotated[str, typer.Argument(help="The job's id or name.")],
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
    ) -> None:
        """Show what each running instance of a job uses, live, like `docker stats`: until
        Ctrl-C or the job ends."""
        client = _client(url, token)
        found = _call(lambda: client.job(job))
        title = f"job [bold]{escape(found['name'])}[/bold] ({found['id']})"
        if found["state"] in FINAL_STATES:
            out.print(f"{title} has ended ({found['state']}): nothing runs")
            return
        try:
            _call(lambda: _top(client, found["id"], title))
        except KeyboardInterrupt:
            return

    @app.command()
    def stop(
        job: Annotated[str | None, typer.Argument(help="The job's id or name.")] = None,
        every: Annotated[
            bool,
            typer.Option(
                "--all",
                help="Stop every job not ended yet: your own, or everyone's for an admin.",
            ),
        ] = False,
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
    ) -> None:
        """Stop a job (its owner or an admin), or with --all every running job."""
        if (job is None) == (not every):
            err.print("[red]error:[/red] name one job, or give --all (not both)")
            raise typer.Exit(2)
        client = _client(url, token)
        if every:
            raise typer.Exit(_stop_all(client))
        assert job is not None  # checked above: one job, or --all
        found = _call(lambda: client.job(job))
        raise typer.Exit(0 if _stop_one(client, found) else 1)


def _local_log(job: str, role: str, index: int) -> int:
    """Print a log `paigraph run` kept; 1 with what is kept when there is no such log."""
    from server.cli.run_logs import find_run, kept_jobs, log_name
    from simulator.settings import SettingsError, load_settings

    try:
        state_dir = load_settings().state_dir
    except SettingsError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        return 2
    folder = find_run(state_dir, job)
    if folder is None:
        kept = ", ".join(kept_jobs(state_dir)) or "none yet"
        err.print(
            f"[red]error:[/red] no logs of a local run of {escape(job)!r} in {state_dir} "
            f"(jobs kept: {escape(kept)})"
        )
        return 1
    path = folder / log_name(role, index)
    if not path.is_file():
        have = ", ".join(sorted(p.name.removesuffix(".log") for p in folder.glob("*.log")))
        err.print(
            f"[red]error:[/red] job {escape(job)!r} has no instance {escape(role)} {index} "
            f"(its instances: {escape(have)})"
        )
        return 1
    with path.open(encoding="utf-8", errors="replace") as kept_log:
        for chunk in iter(lambda: kept_log.read(1 << 16), ""):
            sys.stdout.write(chunk)
    sys.stdout.flush()
    return 0


def _stop_one(client: Client, job: dict[str, Any]) -> bool:
    """Ask the server to stop `job`; False (said why) when it refused."""
    result = _call(lambda: client.stop(job["id"]))
    for e in result["errors"]:
        err.print(f"[red]error:[/red] {escape(job['name'])}: {escape(e['message'])}")
    if result["errors"]:
        return False
    out.print(f"stopping {escape(job['name'])} ({job['id']})")
    return True


def _stop_all(client: Client) -> int:
    """Stop every live job the viewer may stop: an admin's are everyone's, a user's their own."""
    viewer = _call(client.viewer)
    jobs = _call(lambda: client.live_jobs(None if viewer["admin"] else viewer["name"]))
    whose = "anyone's" if viewer["admin"] else "yours"
    if not jobs:
        out.print(f"no running job to stop ({whose})")
        return 0
    stopped = sum(_stop_one(client, job) for job in jobs)
    out.print(f"{stopped} of {len(jobs)} running job{'s' * (len(jobs) != 1)} ({whose}) stopping")
    return 0 if stopped == len(jobs) else 1


def render(job: dict[str, Any], said: list[dict[str, Any]] | None = None) -> Group:
    """A job as a title line and a table of its instances, then its warnings but those
    already `said`."""
    rows = (
        InstanceRow(
            f"{role['name']}-{instance['index']}",
            instance["state"],
            instance.get("node"),
            instance.get("hostIp"),
            {p["label"]: p["ports"] for p in instance["ports"]},
            instance.get("exitCode"),
            instance.get("exitReason"),
        )
        for role in job["taskRoles"]
        for instance in role["instances"]
    )
    title = f"job [bold]{escape(job['name'])}[/bold] ({job['id']})  attempt {job['attempt']}"
    table = job_table(title, job["state"], job.get("stateReason") or "", rows)
    warnings = warning_lines([w for w in job.get("warnings") or [] if w not in (said or [])])
    return Group(table, *warnings) if warnings else table


def warning_lines(warnings: list[dict[str, Any]]) -> list[str]:
    """Warnings as `validate` prints them: path, what will not happen, code."""
    lines = []
    for w in warnings:
        where = escape(".".join(w["path"]) or "(document)")
        code = escape(f"[{w['code']}]")
        what = escape(w["message"])
        lines.append(f"  [yellow]warning[/yellow] {where}: {what} [dim]{code}[/dim]")
    return lines


def _watch(client: Client, job: dict[str, Any], said: list[dict[str, Any]]) -> int:
    """Follow the job's events, redrawing its table (without the warnings already `said`);
    the exit status follows its final state."""
    with Live(render(job, said), console=out, refresh_per_second=4) as live:
        for _event in client.job_events(job["id"]):
            job = client.job(job["id"])
            live.update(render(job, said))
            if job["state"] in FINAL_STATES:
                break
        job = client.job(job["id"])
        live.update(render(job, said))
    if not out.is_terminal:  # rich ends a terminal's last frame with a newline, not a pipe's
        out.line()
    return 0 if job["state"] == "SUCCEEDED" else 1


def _top(client: Client, job_id: str, title: str) -> None:
    """Redraw the job's usage table every round on a terminal; elsewhere print one table per
    round, for a log or the next program."""
    waiting = usage_table(title, [], "waiting for the next measurement ...")
    rounds = client.job_usage(job_id)
    if not out.is_terminal:
        for found in rounds:
            out.print(usage_table(f"{title}  {found['at']}", found["instances"], found["source"]))
        out.print(f"{title} has ended")
        return
    with Live(waiting, console=out, refresh_per_second=4) as live:
        for found in rounds:
            live.update(usage_table(title, found["instances"], found["source"]))
        live.update(Group(live.renderable, Text.from_markup(f"{title} has ended")))


def _client(url: str, token: str | None) -> Client:
    """A client of the server at `url` with `token` (an empty token is none)."""
    return Client(url, token or None)


def _call(action: Any) -> Any:
    try:
        return action()
    except RemoteError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None
