"""`paigraph run`: one job on the local simulator, in the foreground.

A live table and every instance's output while the job runs, a clean stop on Ctrl-C, and
nothing left behind when it returns but the logs `paigraph logs --local` reads (docs/cli.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import uuid
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.text import Text

from backends.base import BackendError, InstanceKey
from backends.docker import DockerBackend, run_owner
from server.cli.job_table import InstanceRow, job_table, styled_state
from server.cli.run_logs import keep_logs
from server.cli.run_output import OutputStreamer
from server.jobs import JobMachine, JobState
from server.jobs.launch import NotRunnable
from server.jobs.runner import JobRunner
from server.jobs.simulated import simulation_warnings
from server.protocol.model import JobSpec
from simulator.containers import EngineError
from simulator.settings import SettingsError, load_settings

EXIT_SUCCEEDED = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
FAILED_LOG_LINES = 40


def run_in_foreground(
    spec: JobSpec, console: Console, *, config: Path | None = None, quiet: bool = False
) -> int:
    """Run `spec` to its end; returns the process exit status."""
    return asyncio.run(_run(spec, console, config, quiet))


async def _run(spec: JobSpec, console: Console, config: Path | None, quiet: bool) -> int:
    try:
        settings = load_settings(config)
    except SettingsError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        return EXIT_FAILED
    job_id = f"{spec.name}-{uuid.uuid4().hex[:6]}"
    try:
        backend = DockerBackend(
            settings, owner=run_owner(), progress=lambda m: console.print(f"[dim]{escape(m)}[/dim]")
        )
    except (EngineError, BackendError) as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        return EXIT_FAILED
    view = _View(console)
    output = None if quiet else OutputStreamer(backend, console)

    def changed(machine: JobMachine) -> None:
        view.update(machine)
        if output is not None:
            output.update(machine)

    try:
        runner = JobRunner(spec, backend, job_id=job_id, on_change=changed)
    except NotRunnable as exc:
        console.print(f"[red]REFUSED[/red] {escape(exc.path)}: {escape(exc.message)}")
        return EXIT_FAILED
    for warning in simulation_warnings(spec, runner.request(1), backend):
        where = warning.path or "(document)"
        console.print(f"[yellow]warning[/yellow] {escape(where)}: {escape(warning.message)}")
    interrupted = _on_interrupt(runner, console)
    reading: asyncio.Task[None] | None = None
    try:
        await backend.start()
        reading = asyncio.create_task(_feed_events(backend, runner), name="job events")
        with view:
            record = await runner.run()
            reading.cancel()
            if output is not None:
                await output.finish()
        if output is None:
            await _show_failed_logs(backend, runner.machine, console)
        await _keep_logs(backend, runner.machine, spec.name, settings.state_dir, console)
    finally:
        if reading is not None:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
        await backend.close()
        shutil.rmtree(backend.attempts_dir, ignore_errors=True)
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().remove_signal_handler(sig)
    state = styled_state(record.state)
    console.print(f"job {escape(spec.name)}: {state} {escape(record.reason)}")
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_SUCCEEDED if record.state is JobState.SUCCEEDED else EXIT_FAILED


async def _keep_logs(
    backend: DockerBackend, machine: JobMachine, name: str, state_dir: Path, console: Console
) -> None:
    """Keep the instances' logs past the run, and say how to read them again."""
    if not machine.instances or all(v.node is None for v in machine.instances):
        return  # nothing ever ran
    try:
        await keep_logs(backend, machine, name, state_dir)
    except OSError as exc:
        console.print(f"[yellow]warning:[/yellow] the logs could not be kept: {escape(str(exc))}")
        return
    first = machine.instances[0]
    console.print(
        f"[dim]logs kept: paigraph logs --local {escape(name)} {escape(first.role)} "
        f"{first.index}[/dim]"
    )


async def _feed_events(backend: DockerBackend, runner: JobRunner) -> None:
    """Hand the runner the backend's events while it runs (it reads no stream of its own)."""
    async for event in backend.events():
        runner.feed(event)


def _on_interrupt(runner: JobRunner, console: Console) -> list[int]:
    """Ctrl-C (or SIGTERM) stops the job cleanly; returns a list that fills when it happened."""
    hits: list[int] = []

    def handle(signum: int) -> None:
        hits.append(signum)
        if len(hits) == 1:
            console.print("[magenta]stopping the job (Ctrl-C again does not hurry it)[/magenta]")
            runner.request_stop("interrupted from the keyboard")
        else:
            console.print("[magenta]still stopping: waiting for the containers to end[/magenta]")

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, handle, sig)
    return hits


async def _show_failed_logs(backend: DockerBackend, machine: JobMachine, console: Console) -> None:
    for view in machine.instances:
        if view.state is not JobState.FAILED:
            continue
        key = InstanceKey(
            job_id=machine.job_id, attempt=view.attempt, role=view.role, index=view.index
        )
        try:
            text = "".join([c.data async for c in backend.logs(key, tail=FAILED_LOG_LINES)])
        except BackendError:
            continue
        console.rule(f"log of {escape(view.name)} (last {FAILED_LOG_LINES} lines)", style="red")
        console.print(Text(text.rstrip("\n") or "(empty)"))
    if any(v.state is JobState.FAILED for v in machine.instances):
        console.rule(style="red")


class _View:
    """The live table, or state lines when the console is not a terminal."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live: Live | None = None
        self.machine: JobMachine | None = None
        self.shown = 0

    def __enter__(self) -> _View:
        if self.console.is_terminal:
            self.live = Live(console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.update(self.render())
            self.live.__exit__(None, None, None)
        elif self.machine is not None:
            self.console.print(self.render())

    def update(self, machine: JobMachine) -> None:
        self.machine = machine
        if self.live is not None:
            self.live.update(self.render())
            return
        for change in machine.transitions[self.shown :]:
            who = f"{change.role}-{change.index}" if change.role is not None else "job"
            self.console.print(f"{who}: {change.to_state} {escape(change.reason)}")
        self.shown = len(machine.transitions)

    def render(self) -> Group:
        machine = self.machine
        assert machine is not None
        rows = (
            InstanceRow(
                view.name,
                view.state,
                view.node,
                view.host_ip,
                view.ports,
                view.exit_code,
                view.exit_reason,
            )
            for view in machine.instances
        )
        title = f"job [bold]{escape(machine.job_id)}[/bold]  attempt {machine.attempt}"
        return job_table(title, machine.state, machine.reason, rows)
