"""Errors and warnings, each tied to the place it was found: the one type for a problem the
user can fix, wherever it is found (protocol, marketplace, job service).

Every problem carries a dotted path into the input as the user wrote it
(``taskRoles.worker.resourcePerInstance.cpu``, ``tasks[1].resource.portList[0].label``),
a stable machine-readable code, and a sentence a person understands. The API shows it as
`UserError`, its path split into segments.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

_SEGMENT = re.compile(r"[^.\[\]]+")


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Issue:
    """Something the user can fix (a warning: something they should know): where, a stable
    code, and what to do."""

    path: str  # dotted, as written; "" for the whole input
    code: str
    message: str
    severity: Severity = Severity.ERROR
    # The path's segments; split from `path` unless given, as `at` does for segments that
    # may hold a `.` themselves (a parameter's name).
    segments: tuple[str, ...] = field(default=(), kw_only=True)

    def __post_init__(self) -> None:
        if not self.segments:
            object.__setattr__(self, "segments", tuple(_SEGMENT.findall(self.path)))

    @classmethod
    def at(
        cls,
        segments: Sequence[str],
        code: str,
        message: str,
        severity: Severity = Severity.ERROR,
    ) -> Issue:
        """An issue whose place is given as segments (input fields, list indices as text)."""
        return cls(".".join(segments), code, message, severity, segments=tuple(segments))

    def within(self, *prefix: str) -> Issue:
        """The same issue seen from a larger input, where what was checked sits at `prefix`."""
        path = ".".join(part for part in (*prefix, self.path) if part)
        return Issue(
            path, self.code, self.message, self.severity, segments=(*prefix, *self.segments)
        )

    def path_parts(self) -> list[str]:
        """The path's segments, as the GraphQL `UserError.path` wants them."""
        return list(self.segments)

    def __str__(self) -> str:
        where = self.path or "(document)"
        return f"{where}: {self.message} [{self.code}]"


class WithIssues:
    """A result that carries `issues`: its errors and its warnings, told apart by severity."""

    issues: Sequence[Issue]

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity is Severity.ERROR]

    @property
    def warnings(self) -> list[Issue]:
        return [i for i in self.issues if i.severity is Severity.WARNING]


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
