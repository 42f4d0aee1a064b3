"""What the instances of a `paigraph run` print, shown while they run.

Like `docker compose up`: every line is prefixed by the instance's name (`worker-1 | `) in a
colour of its own, fixed by its place in the job so that it stays the same across attempts.
Each instance's log is followed from its first byte; an instance that runs again (a task retry
or a new attempt) is followed again from where its output stopped.
"""

from __future__ import annotations

import asyncio
import contextlib

from rich.console import Console
from rich.text import Text

from backends.base import Backend, BackendError, InstanceKey
from server.jobs import JobMachine, JobState

COLOURS = ("cyan", "yellow", "green", "magenta", "blue", "bright_cyan", "bright_yellow",
           "bright_green", "bright_magenta", "bright_blue")  # fmt: skip
_SETTLE_SECONDS = 5.0  # at the end: how long the last output may take to be read
_LIVE = (JobState.STARTING, JobState.RUNNING)
_WITH_LOGS = (JobState.STARTING, JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED,
              JobState.STOPPING, JobState.STOPPED)  # fmt: skip


class OutputStreamer:
    """Follows the log of every instance that has one, printing whole lines as they come."""

    def __init__(self, backend: Backend, console: Console) -> None:
        self.backend = backend
        self.console = console
        self._tasks: dict[InstanceKey, asyncio.Task[None]] = {}
        self._offsets: dict[InstanceKey, int] = {}
        self._labels: dict[tuple[str, int], Text] = {}
        self._runs: dict[InstanceKey, int] = {}  # the task attempt each was last followed in

    def update(self, machine: JobMachine) -> None:
        """Start following each instance that has output and is not followed now: one whose
        follower ended is followed again while it runs, or when it runs again."""
        self._name_instances(machine)
        for view in machine.instances:
            if view.state not in _WITH_LOGS:
                continue
            key = InstanceKey(
                job_id=machine.job_id, attempt=view.attempt, role=view.role, index=view.index
            )
            task = self._tasks.get(key)
            again = view.state in _LIVE or self._runs.get(key) != view.task_attempt
            if task is None or (task.done() and again):
                self._runs[key] = view.task_attempt
                label = self._labels[(view.role, view.index)]
                self._tasks[key] = asyncio.create_task(self._follow(key, label))

    async def finish(self) -> None:
        """Let the followers print what is left (they end once their instance has ended);
        those still reading after a while are cancelled."""
        tasks = list(self._tasks.values())
        if tasks:
            _done, late = await asyncio.wait(tasks, timeout=_SETTLE_SECONDS)
            for task in late:
                task.cancel()
            for task in late:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _name_instances(self, machine: JobMachine) -> None:
        """Each instance's coloured, padded prefix, by its place in the job."""
        if len(self._labels) == len(machine.instances):
            return
        width = max(len(v.name) for v in machine.instances)
        for place, view in enumerate(machine.instances):
            style = COLOURS[place % len(COLOURS)]
            self._labels[(view.role, view.index)] = Text(f"{view.name:<{width}} | ", style=style)

    async def _follow(self, key: InstanceKey, label: Text) -> None:
        partial = ""
        try:
            async for chunk in self.backend.logs(
                key, offset=self._offsets.get(key, 0), follow=True
            ):
                self._offsets[key] = chunk.offset + len(chunk.data.encode("utf-8"))
                lines = (partial + chunk.data).split("\n")
                partial = lines.pop()
                for line in lines:
                    self._print(label, line)
        except BackendError:
            return  # no log yet: the next change tries again
        finally:
            if partial:
                self._print(label, partial)

    def _print(self, label: Text, line: str) -> None:
        self.console.print(Text.assemble(label, line.rstrip("\r")), soft_wrap=True)
