"""Errors and warnings found in a job config, each tied to the place it was found.

Every problem carries a dotted path into the document as the user wrote it
(``taskRoles.worker.resourcePerInstance.cpu``, ``tasks[1].resource.portList[0].label``),
a stable machine-readable code, and a sentence a person understands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

_SEGMENT = re.compile(r"[^.\[\]]+")


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Issue:
    path: str
    code: str
    message: str
    severity: Severity = Severity.ERROR

    def path_parts(self) -> list[str]:
        """The path split into its segments, as the GraphQL `UserError.path` wants it."""
        return _SEGMENT.findall(self.path)

    def __str__(self) -> str:
        where = self.path or "(document)"
        return f"{where}: {self.message} [{self.code}]"


def join(base: str, key: str | int) -> str:
    """Extend a path with a mapping key or a list index."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else key


@dataclass
class Issues:
    """Collects every problem in one pass so users see all of them at once."""

    items: list[Issue] = field(default_factory=list)

    def error(self, path: str, code: str, message: str) -> None:
        self.items.append(Issue(path, code, message))

    def warn(self, path: str, code: str, message: str) -> None:
        self.items.append(Issue(path, code, message, Severity.WARNING))

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.items if i.severity is Severity.ERROR]

    @property
    def warnings(self) -> list[Issue]:
        return [i for i in self.items if i.severity is Severity.WARNING]

    def error_count(self) -> int:
        return sum(i.severity is Severity.ERROR for i in self.items)

    def ensure_error(self, since: int, path: str, what: str) -> None:
        """A part that could not be read must leave at least one error behind."""
        if self.error_count() == since:
            self.error(path, "invalid", f"{what} could not be read")

    def forget_required(self, since: int, path: str, keys: list[str]) -> None:
        """Drop the `required` errors of `keys` under `path` found since item `since`: another
        error already says where those fields were written instead."""
        gone = {join(path, key) for key in keys}
        kept = self.items[since:]
        self.items[since:] = [i for i in kept if not (i.code == "required" and i.path in gone)]

    def has_errors(self) -> bool:
        return any(i.severity is Severity.ERROR for i in self.items)
