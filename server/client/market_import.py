"""`paigraph market import`'s work: publishing a set of files, one report for them all.

Kept apart from the command (`market_commands.py`) so that tests and other callers can import
files, or derive a version, without the command line around it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape

from server.client.market_client import MarketClient
from server.marketplace.fixed_variables import fix_variables


@dataclass
class ImportReport:
    new_items: int = 0
    new_versions: int = 0
    unchanged: int = 0
    rejected: list[str] = field(default_factory=list)
    variables_used: set[str] = field(default_factory=set)

    @property
    def published(self) -> int:
        return self.new_items + self.new_versions


def derived_version(version: str, content: str) -> str:
    """A version for content whose own version is taken by other content: the same version
    with the content's hash as build metadata, so importing it again finds it unchanged."""
    return f"{version}+{hashlib.sha256(content.encode()).hexdigest()[:8]}"


def import_files(
    market: MarketClient,
    files: list[Path],
    base: dict[str, Any],
    announce: Callable[[str], None],
    step: Callable[[], None] = lambda: None,
    variables: dict[str, str] | None = None,
) -> ImportReport:
    """Publish each file, with the template `variables` it declares filled in; report rejected
    ones with their errors and go on."""
    report = ImportReport()
    for path in files:
        escaped_path = escape(str(path))
        try:
            content = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            report.rejected.append(str(path))
            announce(f"[red]REJECTED[/red]    {escaped_path}: cannot read it: {escape(str(exc))}")
            step()
            continue
        fixed = fix_variables(content, variables or {})
        content = fixed.content
        report.variables_used |= fixed.used
        result = market.publish({**base, "content": content})
        if [e["code"] for e in result["errors"]] == ["version-exists"]:
            version = content_version(content)
            if version is not None:
                retry = {**base, "content": content, "version": derived_version(version, content)}
                result = market.publish(retry)
        if result["errors"]:
            report.rejected.append(str(path))
            announce(f"[red]REJECTED[/red]    {escaped_path}")
            for e in result["errors"]:
                where = escape(".".join(e["path"]) or "(document)")
                code = escape(f"[{e['code']}]")
                announce(f"    {where}: {escape(e['message'])} [dim]{code}[/dim]")
            step()
            continue
        item, outcome = result["item"], result["outcome"]
        label = {
            "NEW_ITEM": "[green]NEW ITEM[/green]   ",
            "NEW_VERSION": "[green]NEW VERSION[/green]",
            "UNCHANGED": "[dim]UNCHANGED[/dim]  ",
        }[outcome]
        if outcome == "NEW_ITEM":
            report.new_items += 1
        elif outcome == "NEW_VERSION":
            report.new_versions += 1
        else:
            report.unchanged += 1
        announce(
            f"{label} {escape(item['name'])} {escape(item['version'])} "
            f"[dim]{item['type'].lower()} {item['id']}[/dim]  {escaped_path}"
        )
        step()
    return report


def content_version(content: str) -> str | None:
    """The version the content declares (as the protocol engine reads it)."""
    from server.protocol import parse_document

    result = parse_document(content)
    found = result.spec or result.component
    return str(found.version) if found is not None and found.version is not None else None
