"""`paigraph exec` and `paigraph shell`: a way into a running instance, through the server."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer
from rich.markup import escape

from server.cli.output import console
from server.client.remote import DEFAULT_URL, RemoteError
from server.client.remote_commands import TokenOption, UrlOption, _client

err = console(stderr=True)
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it

JobArgument = Annotated[str, typer.Argument(help="The job's id or name.")]
RoleArgument = Annotated[str, typer.Argument(help="The task role.")]
IndexArgument = Annotated[int, typer.Argument(help="The instance's index.", min=0)]


def register(app: typer.Typer) -> None:
    """Add `exec` and `shell` to the `paigraph` command."""

    @app.command("exec")
    def exec_command(
        job: JobArgument,
        role: RoleArgument,
        index: IndexArgument,
        command: Annotated[
            list[str], typer.Argument(help="The command and its arguments, after `--`.")
        ],
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
    ) -> None:
        """Run a command in a running instance (yours, or anyone's for an admin): its output
        and stdin pass through, and its exit code is this command's (255 when it could not
        run). Example: paigraph exec myjob worker 0 -- ls -l"""
        raise typer.Exit(_run(url, token, job, role, index, command, tty_mode=False))

    @app.command()
    def shell(
        job: JobArgument,
        role: RoleArgument,
        index: IndexArgument,
        url: UrlOption = DEFAULT_URL,
        token: TokenOption = None,
    ) -> None:
        """Open an interactive shell in a running instance (bash where the image has it, else
        sh), on a terminal that follows this one's size; Ctrl-C goes to the instance."""
        from server.client.exec_client import shell_command

        command = shell_command(os.environ.get("TERM"))
        raise typer.Exit(_run(url, token, job, role, index, command, tty_mode=True))


def _run(
    url: str, token: str | None, job: str, role: str, index: int, command: list[str], **how: Any
) -> int:
    from server.client.exec_client import CLIENT_ERROR, ExecClient, std_streams

    client = _client(url, token)
    try:
        found = client.job(job)
        _check_instance(found, role, index)
        stdin, stdout, stderr = std_streams()
        return ExecClient(client).run(
            found["id"], role, index, command, stdin=stdin, stdout=stdout, stderr=stderr, **how
        )
    except RemoteError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        return CLIENT_ERROR
    except KeyboardInterrupt:  # exec only: a shell's terminal is raw, Ctrl-C goes in
        err.print("interrupted: the connection is closed (the command may still run there)")
        return INTERRUPTED


def _check_instance(job: dict[str, Any], role: str, index: int) -> None:
    """RemoteError naming what the job has when it has no such instance."""
    roles = {r["name"]: r["instanceCount"] for r in job["taskRoles"]}
    if role not in roles:
        raise RemoteError(
            f"job {job['name']!r} has no task role {role!r} (its roles: {', '.join(roles)})"
        )
    if index >= roles[role]:
        raise RemoteError(
            f"task role {role!r} of job {job['name']!r} has {roles[role]} instance(s): "
            f"indexes 0 to {roles[role] - 1}"
        )
