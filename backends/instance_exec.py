"""Running a command inside a running task instance, for `paigraph exec` and `paigraph shell`.

An `ExecSession` carries output chunks, stdin, terminal size and the exit code. Sessions are
blocking objects used from worker threads, because the Docker SDK and the Kubernetes client are
blocking and a session has one reader and one writer at a time.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from backends.base import InstanceKey

STDOUT = 1
STDERR = 2


class ExecRequest(BaseModel):
    """What to run: `command` as an argument vector (no shell around it), with or without a
    terminal of `rows` x `columns`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    command: list[str] = Field(min_length=1)
    tty: bool = False
    rows: int = Field(default=24, ge=1, le=1000)
    columns: int = Field(default=80, ge=1, le=1000)


class ExecSession(Protocol):
    """One command running in an instance."""

    def read(self) -> tuple[int, bytes] | None:
        """The next chunk of output as (STDOUT or STDERR, data); None once the output ended.
        With a terminal everything comes as STDOUT."""

    def write(self, data: bytes) -> None:
        """Send `data` to the command's stdin."""

    def close_stdin(self) -> None:
        """End the command's stdin (it reads end of file)."""

    def resize(self, rows: int, columns: int) -> None:
        """Resize the command's terminal (nothing without one)."""

    def exit_code(self) -> int:
        """The command's exit code, once `read` returned None."""

    def close(self) -> None:
        """Release the connection (the command may go on if it does not read its stdin)."""


@runtime_checkable
class ExecsInstances(Protocol):
    """A backend that can run a command in a running instance."""

    def exec_session(self, key: InstanceKey, request: ExecRequest) -> ExecSession:
        """Start `request` in the instance (blocking). UnknownInstance when the attempt has no
        such instance; BackendError, saying why, when it is not running or the command cannot
        start."""
