"""How a job looks in the terminal: a title line and a table of its instances.

Shared by `paigraph run` (which reads the state machine) and `paigraph submit --watch` /
`status` (which read the GraphQL API), so both show a job the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

STATE_STYLE: dict[str, str] = {
    "WAITING": "yellow",
    "STARTING": "cyan",
    "RUNNING": "blue",
    "STOPPING": "magenta",
    "SUCCEEDED": "green",
    "FAILED": "red",
    "STOPPED": "magenta",
}
COLUMNS = ("instance", "state", "node", "ip", "ports", "exit", "reason")


@dataclass(frozen=True)
class InstanceRow:
    name: str
    state: str
    node: str | None
    host_ip: str | None
    ports: Mapping[str, list[int]]
    exit_code: int | None
    reason: str | None


def styled_state(state: str) -> str:
    """The state as rich markup in its colour."""
    style = STATE_STYLE.get(str(state), "white")
    return f"[{style}]{state}[/{style}]"


def job_table(title: str, state: str, reason: str, rows: Iterable[InstanceRow]) -> Group:
    """`title` (markup allowed), the job's state and reason, then one row per instance."""
    heading = Text.from_markup(f"{title}  {styled_state(state)}  {escape(reason)}")
    table = Table(box=None, pad_edge=False)
    for column in COLUMNS:
        table.add_column(column)
    for row in rows:
        table.add_row(
            escape(row.name),
            Text(str(row.state), style=STATE_STYLE.get(str(row.state), "white")),
            row.node or "",
            row.host_ip or "",
            " ".join(f"{label}:{','.join(map(str, ports))}" for label, ports in row.ports.items()),
            "" if row.exit_code is None else str(row.exit_code),
            escape(row.reason or ""),
        )
    return Group(heading, table)
