"""Reading one prerequisite (dockerimage, data, script, output, storage, or a plugin item).

Used for a job's `prerequisites` list in the draft and v2 dialects and for standalone
components published to the marketplace.
"""

from __future__ import annotations

import re
from typing import Any

from server.protocol.fields import Fields, describe
from server.protocol.ignored import (
    ANY_OTHER,
    DESCRIPTIVE_PREREQUISITE_FIELDS,
    prerequisite_warnings,
)
from server.protocol.issues import join
from server.protocol.launch_checks import image_issues
from server.protocol.model import (
    Callback,
    CallbackEvent,
    Dialect,
    DockerAuth,
    Prerequisite,
    PrerequisiteType,
    Requirement,
    StorageRequest,
)
from server.protocol.privileges import check_options
from server.protocol.v2_names import V2_NAME, V2_NAME_RULE

DRAFT_NAME = re.compile(r"[A-Za-z0-9\-._~]+")
DRAFT_NAME_RULE = "must match ^[A-Za-z0-9-._~]+$ (letters, digits and -._~)"

PVC_STORAGE = "pvc_storage"
"""Seed 004's storage plugin: `plugin_params: {name, mountPath}` mounts the storage `name` at
`mountPath`. It is read as the item's `requireStorages` (and written back as such), so that it is
checked, merged and mounted as those are."""

_COMMON_KEYS = {
    "protocolVersion",
    "protocol_version",
    "name",
    "version",
    "contributor",
    "description",
    "type",
    "uri",
}
_DOCKERIMAGE_KEYS = {*_COMMON_KEYS, "auth"}
_PLUGIN_KEYS = {
    "plugin",
    "plugin_params",
    "require",
    "callbacks",
    "requireStorages",
    "template_variables",
    "failurePolicy",
}

AUTH_KEYS = ("username", "password", "registryuri")
CALLBACK_KEYS = ("event", "commands")
REQUIRE_KEYS = ("name", "template_variables")
STORAGE_REQUEST_KEYS = ("name", "mountPath")
# Every field a prerequisite takes, by place ("" the prerequisite itself; "[]" a list's items).
FIELDS: dict[str, frozenset[str]] = {
    "": frozenset({*_DOCKERIMAGE_KEYS, *_PLUGIN_KEYS, *DESCRIPTIVE_PREREQUISITE_FIELDS, ANY_OTHER}),
    "auth": frozenset(AUTH_KEYS),
    "callbacks[]": frozenset(CALLBACK_KEYS),
    "require[]": frozenset(REQUIRE_KEYS),
    "requireStorages[]": frozenset(STORAGE_REQUEST_KEYS),
}

_TYPES_BY_DIALECT: dict[Dialect, tuple[PrerequisiteType, ...]] = {
    Dialect.V2: (
        PrerequisiteType.DOCKERIMAGE,
        PrerequisiteType.DATA,
        PrerequisiteType.SCRIPT,
        PrerequisiteType.OUTPUT,
        PrerequisiteType.STORAGE,
    ),
    Dialect.DRAFT: (
        PrerequisiteType.DOCKERIMAGE,
        PrerequisiteType.DATA,
        PrerequisiteType.SCRIPT,
        PrerequisiteType.STORAGE,
        PrerequisiteType.OUTPUT,
    ),
}
COMPONENT_TYPES = frozenset(t.value for t in _TYPES_BY_DIALECT[Dialect.DRAFT])


def read_prerequisite(raw: Any, path: str, f: Fields, dialect: Dialect) -> Prerequisite | None:
    obj = f.as_mapping(raw, path)
    if obj is None:
        return None
    v2 = dialect is Dialect.V2
    name = f.string(
        obj,
        "name",
        path,
        required=True,
        pattern=V2_NAME if v2 else DRAFT_NAME,
        rule=V2_NAME_RULE if v2 else DRAFT_NAME_RULE,
        max_length=255,
    )
    type_ = _read_type(obj, path, f, dialect)
    if v2:
        _check_protocol_version(obj, path, f)
    version = f.string(obj, "version", path, allow_number=True)
    contributor = f.string(obj, "contributor", path)
    description = f.string(obj, "description", path)
    if type_ is PrerequisiteType.DOCKERIMAGE:
        allowed = _DOCKERIMAGE_KEYS if not v2 else _DOCKERIMAGE_KEYS - {"protocol_version"}
        f.known_keys(
            obj,
            path,
            allowed,
            hints=dict.fromkeys(
                _PLUGIN_KEYS, "a dockerimage prerequisite takes no plugin settings"
            ),
        )
        image = f.string(obj, "uri", path, required=True)
        if image is not None and not image.strip():
            f.issues.error(join(path, "uri"), "empty", "the image name must not be empty")
        elif image is not None:
            f.issues.items.extend(image_issues(image, join(path, "uri")))
        auth = _read_auth(obj, path, f)
        if name is None or image is None:
            return None
        return Prerequisite(
            name=name,
            type=type_,
            uri=[image],
            version=version,
            contributor=contributor,
            description=description,
            auth=auth,
        )
    uri = _read_uri(obj, path, f, dialect, type_)
    plugin = f.string(obj, "plugin", path)
    params = obj.get("plugin_params")
    if params is not None and f.as_mapping(params, join(path, "plugin_params")) is None:
        params = None
    params = params or {}
    callbacks = _read_callbacks(obj, params, path, f)
    require = _read_require(obj, path, f)
    if plugin == PVC_STORAGE and "requireStorages" not in obj:
        storages = _read_pvc_storage(params, path, f)
        params = {k: v for k, v in params.items() if k not in ("name", "mountPath")}
    else:
        storages = _read_storages(obj if "requireStorages" in obj else params, path, f)
    variables, defaults = _read_template_variables(obj, path, f)
    check_options(
        {k: v for k, v in obj.items() if k not in _COMMON_KEYS | _PLUGIN_KEYS}, path, f.issues
    )
    check_options(params, join(path, "plugin_params"), f.issues)
    failure = obj.get("failurePolicy")
    if failure is not None and failure not in ("fail", "ignore"):
        f.issues.error(
            join(path, "failurePolicy"),
            "enum",
            f"must be 'fail' or 'ignore', got {describe(failure)}",
        )
        failure = None
    if name is None or type_ is None or uri is None:
        return None
    leftovers = {k: v for k, v in obj.items() if k not in _COMMON_KEYS | _PLUGIN_KEYS}
    prerequisite_warnings(plugin, leftovers, failure, path, f.issues)
    leftovers.update({k: v for k, v in params.items() if k not in ("callbacks", "requireStorages")})
    return Prerequisite(
        name=name,
        type=type_,
        uri=uri,
        # only a script's list changes where it lands (<name>/<repository name>)
        uri_list=type_ is PrerequisiteType.SCRIPT and isinstance(obj.get("uri"), list),
        version=version,
        contributor=contributor,
        description=description,
        plugin=plugin,
        require=require or [],
        callbacks=callbacks or [],
        require_storages=storages or [],
        template_variables=variables or [],
        variable_defaults=defaults,
        failure_policy=failure,
        plugin_parameters=leftovers,
    )


def read_prerequisite_list(
    items: list[tuple[Any, str]], f: Fields, dialect: Dialect
) -> list[Prerequisite]:
    """Read (raw, path) items; a name may repeat across types but not within one, as in OpenPAI."""
    out: list[Prerequisite] = []
    seen: set[tuple[str, str]] = set()
    for item, path in items:
        p = read_prerequisite(item, path, f, dialect)
        if p is None:
            continue
        if (p.type, p.name) in seen:
            f.issues.error(
                join(path, "name"), "duplicate", f"Duplicate {p.type} prerequisites {p.name}."
            )
            continue
        seen.add((p.type, p.name))
        out.append(p)
    return out


def _read_type(
    obj: dict[str, Any], path: str, f: Fields, dialect: Dialect
) -> PrerequisiteType | None:
    raw = obj.get("type")
    if raw is None:
        if "plugin" in obj:  # a seed-004 plugin item declares no type
            return PrerequisiteType.PLUGIN
        f.issues.error(join(path, "type"), "required", "`type` is required")
        return None
    allowed = _TYPES_BY_DIALECT[dialect]
    if isinstance(raw, str) and raw in {t.value for t in allowed}:
        return PrerequisiteType(raw)
    choices = ", ".join(t.value for t in allowed)
    hint = " (a prerequisite cannot be a job)" if raw == "job" else ""
    f.issues.error(
        join(path, "type"), "enum", f"must be one of {choices}; got {describe(raw)}{hint}"
    )
    return None


def _check_protocol_version(obj: dict[str, Any], path: str, f: Fields) -> None:
    if "protocolVersion" in obj and obj["protocolVersion"] not in (2, "2"):
        f.issues.error(
            join(path, "protocolVersion"),
            "enum",
            f"must be 2, got {describe(obj['protocolVersion'])}",
        )


def _read_uri(
    obj: dict[str, Any], path: str, f: Fields, dialect: Dialect, type_: PrerequisiteType | None
) -> list[str] | None:
    raw = obj.get("uri")
    where = join(path, "uri")
    if raw is None:
        return []
    if dialect is Dialect.V2 and type_ is PrerequisiteType.DATA and not isinstance(raw, list):
        f.issues.error(
            where, "type", f"a data prerequisite's uri must be a list, got {describe(raw)}"
        )
        return None
    if dialect is Dialect.V2 and type_ is PrerequisiteType.OUTPUT and not isinstance(raw, str):
        f.issues.error(
            where, "type", f"a {type_} prerequisite's uri must be a string, got {describe(raw)}"
        )
        return None
    if (
        dialect is Dialect.V2
        and type_ is PrerequisiteType.SCRIPT
        and not isinstance(raw, str | list)
    ):
        f.issues.error(
            where,
            "type",
            "a script prerequisite's uri must be a string (one repository) or a list of "
            f"repositories, got {describe(raw)}",
        )
        return None
    if isinstance(raw, str):
        return [raw]
    items = f.string_list(obj, "uri", path)
    return items


def _read_auth(obj: dict[str, Any], path: str, f: Fields) -> DockerAuth | None:
    raw = obj.get("auth")
    if raw is None:
        return None
    where = join(path, "auth")
    auth = f.as_mapping(raw, where)
    if auth is None:
        return None
    f.known_keys(auth, where, AUTH_KEYS)
    values = {k: f.string(auth, k, where) for k in AUTH_KEYS}
    return DockerAuth(**values)


def _read_callbacks(
    obj: dict[str, Any], params: dict[str, Any], path: str, f: Fields
) -> list[Callback] | None:
    source, where = (
        (obj, join(path, "callbacks"))
        if "callbacks" in obj
        else (params, join(join(path, "plugin_params"), "callbacks"))
    )
    raw = source.get("callbacks")
    if raw is None:
        return []
    items = f.as_list(raw, where)
    if items is None:
        return None
    out: list[Callback] = []
    events = ", ".join(e.value for e in CallbackEvent)
    for i, item in enumerate(items):
        item_path = join(where, i)
        cb = f.as_mapping(item, item_path)
        if cb is None:
            continue
        f.known_keys(cb, item_path, CALLBACK_KEYS)
        event = f.string(cb, "event", item_path, required=True)
        commands = f.string_list(cb, "commands", item_path, required=True, min_items=1)
        if event is not None and event not in {e.value for e in CallbackEvent}:
            f.issues.error(
                join(item_path, "event"), "enum", f"must be one of {events}; got {event!r}"
            )
            continue
        if event is not None and commands is not None:
            out.append(Callback(event=CallbackEvent(event), commands=commands))
    return out


def _read_require(obj: dict[str, Any], path: str, f: Fields) -> list[Requirement] | None:
    raw = obj.get("require")
    if raw is None:
        return []
    where = join(path, "require")
    items = f.as_list(raw, where)
    if items is None:
        return None
    out: list[Requirement] = []
    for i, item in enumerate(items):
        item_path = join(where, i)
        if isinstance(item, str):
            out.append(Requirement(name=item))
            continue
        entry = f.as_mapping(item, item_path, "a name or a mapping with `name`")
        if entry is None:
            continue
        f.known_keys(entry, item_path, REQUIRE_KEYS)
        name = f.string(entry, "name", item_path, required=True)
        values = entry.get("template_variables") or {}
        if f.as_mapping(values, join(item_path, "template_variables")) is None:
            continue
        if name is not None:
            out.append(Requirement(name=name, template_variables=values))
    return out


def _read_storages(obj: dict[str, Any], path: str, f: Fields) -> list[StorageRequest] | None:
    raw = obj.get("requireStorages")
    if raw is None:
        return []
    where = join(path, "requireStorages")
    items = f.as_list(raw, where)
    if items is None:
        return None
    out: list[StorageRequest] = []
    for i, item in enumerate(items):
        item_path = join(where, i)
        entry = f.as_mapping(item, item_path)
        if entry is None:
            continue
        f.known_keys(entry, item_path, STORAGE_REQUEST_KEYS)
        name = f.string(entry, "name", item_path, required=True)
        mount = f.string(entry, "mountPath", item_path)
        if mount is not None and not mount.startswith("/") and "{{" not in mount:
            f.issues.error(
                join(item_path, "mountPath"), "path", "mountPath must be an absolute path"
            )
        if name is not None:
            out.append(StorageRequest(name=name, mount_path=mount))
    return out


def _read_pvc_storage(params: dict[str, Any], path: str, f: Fields) -> list[StorageRequest] | None:
    """A pvc_storage item's `plugin_params: {name, mountPath}`, both required."""
    where = join(path, "plugin_params")
    name = f.string(params, "name", where, required=True)
    mount = f.string(params, "mountPath", where, required=True)
    if mount is not None and not mount.startswith("/") and "{{" not in mount:
        f.issues.error(join(where, "mountPath"), "path", "mountPath must be an absolute path")
        return None
    if name is None or mount is None:
        return None
    return [StorageRequest(name=name, mount_path=mount)]


def _read_template_variables(
    obj: dict[str, Any], path: str, f: Fields
) -> tuple[list[str] | None, dict[str, str]]:
    """The declared names (a name, or a mapping with `name` and an optional `default` and
    `description`), and the defaults given."""
    raw = obj.get("template_variables")
    if raw is None:
        return [], {}
    where = join(path, "template_variables")
    items = f.as_list(raw, where)
    if items is None:
        return None, {}
    names: list[str] = []
    defaults: dict[str, str] = {}
    for i, item in enumerate(items):
        if isinstance(item, str):
            names.append(item)
        elif isinstance(item, dict) and isinstance(item.get("name"), str):
            names.append(item["name"])
            default = item.get("default")
            if isinstance(default, str | int | float | bool):
                defaults[item["name"]] = _scalar_text(default)
            elif default is not None:
                f.issues.error(
                    join(join(where, i), "default"),
                    "type",
                    f"a default must be a string or a number, got {describe(default)}",
                )
            for key in item:
                if key not in ("name", "default", "description"):
                    f.issues.warn(
                        join(join(where, i), key),
                        "ignored",
                        f"a template variable has `name`, `default` and `description`; "
                        f"{key!r} has no effect",
                    )
        else:
            f.issues.error(
                join(where, i),
                "type",
                f"must be a variable name or a mapping with `name`, got {describe(item)}",
            )
    return names, defaults


def _scalar_text(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
