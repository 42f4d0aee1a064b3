"""Protocol v2's `deployments`: commands run before and after a task role's own, by name."""

from __future__ import annotations

from typing import Any

from server.protocol.fields import Fields
from server.protocol.ignored import unread_warnings
from server.protocol.issues import Issues, join
from server.protocol.model import Deployment
from server.protocol.v2_names import V2_NAME, V2_NAME_RULE

DEPLOYMENT_KEYS = ("name", "taskRoles")
DEPLOYMENT_ROLE_KEYS = ("preCommands", "postCommands")


def read_deployments(doc: dict[str, Any], f: Fields) -> list[Deployment]:
    raw = doc.get("deployments")
    if raw is None:
        return []
    out: list[Deployment] = []
    names: set[str] = set()
    for i, item in enumerate(f.as_list(raw, "deployments", min_items=1) or []):
        path = f"deployments[{i}]"
        obj = f.as_mapping(item, path)
        if obj is None:
            continue
        unread_warnings(obj, path, DEPLOYMENT_KEYS, f.issues)
        name = f.string(
            obj, "name", path, required=True, pattern=V2_NAME, rule=V2_NAME_RULE, max_length=255
        )
        pre: dict[str, list[str]] = {}
        post: dict[str, list[str]] = {}
        roles_path = join(path, "taskRoles")
        f.required(obj, path, ("taskRoles",))
        roles = f.as_mapping(obj["taskRoles"], roles_path) if "taskRoles" in obj else None
        if roles is not None and not roles:
            f.issues.error(roles_path, "min-items", "must name at least one task role")
        for role_name, entry in (roles or {}).items():
            entry_path = join(roles_path, str(role_name))
            entry_obj = f.as_mapping(entry, entry_path)
            if entry_obj is None:
                continue
            f.known_keys(entry_obj, entry_path, DEPLOYMENT_ROLE_KEYS)
            before = f.string_list(entry_obj, "preCommands", entry_path, min_items=1)
            after = f.string_list(entry_obj, "postCommands", entry_path, min_items=1)
            if before:
                pre[str(role_name)] = before
            if after:
                post[str(role_name)] = after
        if name is None:
            continue
        if name in names:
            f.issues.error(f"{path}.name", "duplicate", f"Duplicate deployments {name}.")
            continue
        names.add(name)
        out.append(Deployment(name=name, pre_commands=pre, post_commands=post))
    return out


def check_deployment_roles(
    deployments: list[Deployment], role_names: set[str], issues: Issues
) -> None:
    for d_index, deployment in enumerate(deployments):
        # in the order written (a set's order changes from one process to the next)
        for role_name in dict.fromkeys([*deployment.pre_commands, *deployment.post_commands]):
            if role_name not in role_names:
                issues.error(
                    f"deployments[{d_index}].taskRoles.{role_name}",
                    "unknown-role",
                    f"deployment {deployment.name!r} names task role {role_name!r}, which the job "
                    "does not have",
                )
