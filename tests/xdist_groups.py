"""Keeps the tests of an `xdist_group` on one pytest-xdist worker under `--dist loadgroup`.

pytest-xdist's loadgroup scheduler reads a test's group from a `@<group>` suffix that each
worker adds to the test's node id while collecting. pytest 9.2 keeps node ids structured, and
the assignment pytest-xdist 3.8 makes (to the old `_nodeid` attribute) no longer changes them:
nothing fails, the groups are simply spread over the workers like any other test (pytest-xdist
issue 1386). `add_group_suffixes` adds the suffix the way pytest keeps ids now, for the tests
whose id does not end with it already, so it does nothing where pytest-xdist did it.
"""

from __future__ import annotations

import pytest


def group_suffix(item: pytest.Item) -> str | None:
    """`@<group>` as pytest-xdist spells it (several groups joined by `_`), or None."""
    names = {
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    }
    return "@" + "_".join(sorted(names)) if names else None


def add_group_suffixes(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a loadgroup worker, end each grouped test's node id with its group."""
    if not getattr(config.option, "loadgroup", False):  # set on the workers of a loadgroup run
        return
    for item in items:
        suffix = group_suffix(item)
        if suffix is None or item.nodeid.endswith(suffix):
            continue
        structured = getattr(item, "_id", None)
        if structured is None:  # an older pytest: pytest-xdist's own suffix applies there
            continue
        item._id = type(structured).parse(item.nodeid + suffix)
