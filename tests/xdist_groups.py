"""Keeps the tests of an `xdist_group` on one pytest-xdist worker under `--dist loadgroup`.

pytest-xdist's loadgroup scheduler reads a test's group from a `@<group>` suffix that each
worker adds to the test's node id while collecting. pytest 9.2 keeps node ids structured, and
the assignment pytest-xdist 3.8 makes (to the old `_nodeid` attribute) no longer changes them:
nothing fails, the groups are simply spread over the workers like any other test (pytest-xdist
issue 1386). `add_group_suffixes` adds the suffix the way pytest keeps ids now, for the tests
whose id does not end with it already, so it does nothing where pytest-xdist did it.

`group_modules_with_module_fixtures` puts the tests of a module that share a module-scoped
fixture (a started server, a built image, a browser) in one group of the module's own: spread
over two workers, each worker would make that fixture again, at the cost of a whole server start
or image build. A module already in a named group stays in it.
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


def uses_a_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture made once per module (its own or one it depends on)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        definitions and definitions[-1].scope == "module"
        for definitions in info.name2fixturedefs.values()
    )


def group_modules_with_module_fixtures(items: list[pytest.Item]) -> None:
    """Mark each test that uses a module fixture, and is in no group yet, with an xdist_group
    named after its module (before `add_group_suffixes`)."""
    for item in items:
        if group_suffix(item) is None and uses_a_module_fixture(item):
            module = item.nodeid.split("::", 1)[0].removesuffix(".py").replace("/", ".")
            item.add_marker(pytest.mark.xdist_group(module))


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
