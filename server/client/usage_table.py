"""What a job's running instances use, as a terminal table like `docker stats`: CPU as a
percentage of one core, memory used against the limit, network rates, GPU figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

COLUMNS = ("instance", "cpu %", "mem usage / limit", "mem %", "net rx / tx", "gpu %", "gpu mem")


def size(value: float | None, per_second: bool = False) -> str:
    """Bytes as docker stats writes them (binary units: 12.5MiB)."""
    if value is None:
        return "-"
    unit = "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            break
        value /= 1024
    text = f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
    return text + ("/s" if per_second else "")


def usage_table(title: str, instances: Sequence[Mapping[str, Any]], note: str = "") -> Group:
    """`title` (markup allowed), then one row per instance as the jobUsage subscription gives
    it, then `note` (how it was measured, or why nothing shows)."""
    table = Table(box=None, pad_edge=False)
    for column in COLUMNS:
        table.add_column(column, justify="left" if column == "instance" else "right")
    for i in instances:
        limit = i.get("memoryLimitBytes")
        memory = float(i["memoryBytes"])
        gpu = i.get("gpuUtilization")
        table.add_row(
            escape(f"{i['taskRole']}-{i['index']}"),
            f"{i['cpuCores'] * 100:.1f}%",
            f"{size(memory)} / {size(limit)}",
            f"{memory / limit * 100:.1f}%" if limit else "-",
            f"{size(i.get('networkRxBytesPerSecond'), True)} / "
            f"{size(i.get('networkTxBytesPerSecond'), True)}",
            "-" if gpu is None else f"{gpu * 100:.0f}%",
            size(i.get("gpuMemoryBytes")),
        )
    parts: list[Any] = [Text.from_markup(title), table]
    if note:
        parts.append(Text(note, style="dim"))
    return Group(*parts)
