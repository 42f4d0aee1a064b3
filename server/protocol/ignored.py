"""Fields paigraph accepts and does not act on: one warning each, saying what will not happen.

OpenPAI's formats carry settings for things paigraph's backends do not have (HiveD, InfiniBand,
Azure RDMA, GPU models) and open places (`extras`, a prerequisite's plugin fields) where anything
is allowed. Such a field is accepted, so that configs written for OpenPAI still validate, and
reported as a warning with its path and the code `ignored`, wherever errors are reported.
"""

from __future__ import annotations

from typing import Any

from server.protocol.issues import Issues, join

IGNORED = "ignored"
ANY_OTHER = "*"  # in a list of fields: any other key, in a place where any key is accepted
RUNTIME_PLUGIN = "com.microsoft.pai.runtimeplugin"

# Runtime plugins paigraph runs: `cmd` here (server.jobs.launch); `ssh` and `tensorboard`, which
# set up an instance's services, are the backends'. Every other plugin is ignored with a warning.
# (ssh, sshd and tensorboard are warned about by server.protocol.runtime_plugins, saying what
# paigraph does instead.)
RUNTIME_PLUGINS = frozenset({"cmd", "ssh", "sshd", "tensorboard"})
# Plugins a prerequisite may name: the cmd plugin (short or long), a runtime plugin by its long
# name (seed 004's form), and pvc_storage (seed 004).
PREREQUISITE_PLUGINS = frozenset(
    {"cmd", "pvc_storage", *(f"{RUNTIME_PLUGIN}.{name}" for name in RUNTIME_PLUGINS)}
)

# What a prerequisite may say about itself for people (the 2018 template store's `usage` of a
# script): kept and shown with it, never warned about.
DESCRIPTIVE_PREREQUISITE_FIELDS = frozenset({"usage"})

# extras keys paigraph reads (for a v2 job, and a v1 job's `extras` alike).
EXTRAS_HONOURED = {
    RUNTIME_PLUGIN: "runtime plugins: cmd, ssh and tensorboard run; others are ignored",
    "gangAllocation": "false starts instances one by one and retries each alone",
    "storages": "admin-defined storages mounted in every role",
    "reference_prerequisites": "seed 004's named marketplace references",
    "paigraph": "what v2 cannot say, written by `paigraph resolve`",
    "submitFrom": "where the job was written (the web portal); kept as a label",
}
_EXTRAS_IGNORED = {
    "hivedScheduler": (
        "`extras.hivedScheduler` is OpenPAI's HiveD scheduler (SKU types, priorities, affinity "
        "groups); paigraph places jobs itself and ignores it"
    ),
}


EXTRAS_FIELDS = frozenset({*EXTRAS_HONOURED, *_EXTRAS_IGNORED})


def unread_warnings(obj: dict[str, Any], path: str, known: tuple[str, ...], issues: Issues) -> None:
    """Warn about the keys of an open place (OpenPAI allows any key there) paigraph does not
    read."""
    for key in obj:
        if key not in known:
            issues.warn(
                join(path, str(key)),
                IGNORED,
                f"`{key}` is not a field paigraph reads here (it reads {', '.join(known)}); it "
                "has no effect",
            )


def extras_warnings(extras: dict[str, Any], issues: Issues, *, v1: bool = False) -> None:
    """Warn about every `extras` key paigraph does not read, and every runtime plugin it does
    not run. A v1 job's `extras.paigraph` is not read (only v2 documents carry one)."""
    for key, value in extras.items():
        path = join("extras", str(key))
        if key == "paigraph" and v1:
            issues.warn(
                path,
                IGNORED,
                "`extras.paigraph` is read in protocol v2 documents only; in a v1 job it has no "
                "effect",
            )
            _start_order_warnings(value, path, issues)
        elif key == RUNTIME_PLUGIN:
            _runtime_plugin_warnings(value, path, issues)
        elif key in _EXTRAS_IGNORED:
            issues.warn(path, IGNORED, _EXTRAS_IGNORED[key])
        elif key not in EXTRAS_HONOURED:
            issues.warn(
                path,
                IGNORED,
                f"`extras.{key}` is not a setting paigraph knows; it is kept with the job and has "
                "no effect",
            )


START_ORDER_FIELDS = ("dependsOn", "readiness", "dependencyTimeoutSeconds")


def start_order_elsewhere(key: str) -> str:
    """Why a start order field outside protocol v2 does nothing."""
    return (
        f"`{key}` (role start order) is read in protocol v2 documents only, under "
        "extras.paigraph.taskRoles.<role>; this job starts every role at once"
    )


def _start_order_warnings(ours: Any, path: str, issues: Issues) -> None:
    """A start order written where it is not read: a warning at each place, so nobody expects
    a role to wait that will not."""
    roles = ours.get("taskRoles") if isinstance(ours, dict) else None
    for name, entry in (roles or {}).items() if isinstance(roles, dict) else ():
        for key in START_ORDER_FIELDS:
            if isinstance(entry, dict) and key in entry:
                where = join(join(join(path, "taskRoles"), str(name)), key)
                issues.warn(where, IGNORED, start_order_elsewhere(key))


def _runtime_plugin_warnings(entries: Any, path: str, issues: Issues) -> None:
    if not isinstance(entries, list):
        issues.warn(
            path,
            IGNORED,
            "the runtime plugins must be a list of `{plugin: <name>, parameters: {...}}`; "
            "this value is ignored",
        )
        return
    for i, entry in enumerate(entries):
        name = entry.get("plugin") if isinstance(entry, dict) else None
        if not isinstance(name, str):  # a list, a number...: no plugin paigraph knows
            name = None
        if name == "cmd" and isinstance(entry, dict) and entry.get("failurePolicy") == "ignore":
            issues.warn(join(join(path, i), "failurePolicy"), IGNORED, _CMD_FAILURE_POLICY)
        if name in RUNTIME_PLUGINS:
            continue
        where = join(join(path, i), "plugin")
        if name == "teamwise_storage":
            issues.warn(
                where,
                IGNORED,
                "the teamwise_storage plugin is deprecated in OpenPAI and does nothing here; list "
                "the storages under `extras.storages` instead",
            )
        else:
            shown = f"`{name}`" if isinstance(name, str) else "an entry without a plugin name"
            issues.warn(
                where,
                IGNORED,
                f"runtime plugin {shown} is not one paigraph runs (it runs cmd, ssh and "
                "tensorboard); the job runs without it",
            )


_CMD_FAILURE_POLICY = (
    "`failurePolicy: ignore` lets an instance start without data or a script that cannot be "
    "fetched; a failing command of the cmd plugin still fails the instance"
)


def prerequisite_warnings(
    plugin: str | None,
    leftovers: dict[str, Any],
    failure_policy: str | None,
    path: str,
    issues: Issues,
) -> None:
    """A prerequisite's plugin that paigraph does not run, and fields no plugin reads."""
    if plugin is not None and plugin not in PREREQUISITE_PLUGINS:
        issues.warn(
            join(path, "plugin"),
            IGNORED,
            f"plugin `{plugin}` is not one paigraph runs (it runs cmd and pvc_storage); the "
            "prerequisite's callbacks and plugin fields have no effect",
        )
    if plugin is None:
        for key in leftovers:
            if key in DESCRIPTIVE_PREREQUISITE_FIELDS:
                continue
            issues.warn(
                join(path, str(key)),
                IGNORED,
                f"`{key}` is not a field of a prerequisite without a plugin; it has no effect",
            )
    if failure_policy == "ignore" and plugin in ("cmd", f"{RUNTIME_PLUGIN}.cmd"):
        issues.warn(join(path, "failurePolicy"), IGNORED, _CMD_FAILURE_POLICY)
