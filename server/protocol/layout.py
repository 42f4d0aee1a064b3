"""Mistakes of layout: fields indented at the wrong level, and the field a typo meant.

A role's fields dedented by one level land among the task roles, where every one of them reads
as a role of its own and each gives several errors none of which names the mistake. These
helpers recognise the common cases so that the reader reports one error that says what
happened, and suggest the nearest known name for an unknown field.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from typing import Any


def misplaced_fields(roles: Mapping[str, Any], role_keys: Collection[str]) -> list[str]:
    """The keys of a task-role map that are fields of a role rather than roles: a role's name
    with a value that is no role (a role is a mapping holding some role field)."""
    return [
        str(key)
        for key, value in roles.items()
        if key in role_keys and not (isinstance(value, dict) and any(k in role_keys for k in value))
    ]


def owner_role(roles: Mapping[str, Any], misplaced: Collection[str]) -> str | None:
    """The role the misplaced fields most likely belong to: the last real role before the
    first of them (the one they were dedented out of), else the first real role."""
    names = [str(key) for key in roles]
    real = [name for name in names if name not in misplaced]
    if not real:
        return None
    first = min(names.index(name) for name in misplaced)
    before = [name for name in real if names.index(name) < first]
    return before[-1] if before else real[0]


def misplaced_message(fields: list[str], level: str, owner: str | None) -> str:
    """`resourcePerInstance` and `commands` are at the level of task roles: indent them under
    `worker`?"""
    named = " and ".join(
        [", ".join(f"`{f}`" for f in fields[:-1]), f"`{fields[-1]}`"]
        if len(fields) > 1
        else [f"`{fields[0]}`"]
    )
    verb, them = ("are", "them") if len(fields) > 1 else ("is", "it")
    where = f"under `{owner}`" if owner else "under a task role (taskRoles: {worker: {...}})"
    return f"{named} {verb} at the level of {level}: indent {them} {where}?"


def nearest(key: str, known: Collection[str]) -> str | None:
    """The known field `key` most likely means (case and small typos forgiven), or None."""
    by_lower = {k.lower(): k for k in known}
    if key.lower() in by_lower:
        return by_lower[key.lower()]
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.75)
    return by_lower[close[0]] if close else None
