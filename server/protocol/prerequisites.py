"""Reading one prerequisite (dockerimage, data, script, output, storage, or a plugin item).

Used for a job's `prerequisites` list in the draft and v2 dialects and for standalone
components published to the marketplace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from server.protocol.fields import Fields, describe
from server.protocol.ignored import (
    ANY_OTHER,
    DESCRIPTIVE_PREREQUISITE_FIELDS,
    prerequisite_warnings,
)
from server.protocol.issues import join
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
from server.protocol.outline import (
    Place,
    Table,
    check,
    image_name,
    known,
    mapping,
    protocol_version_2,
    run,
    step,
    text,
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
# The types a dialect allows, by how they are written (looked up once per prerequisite).
_TYPE_BY_VALUE = {
    dialect: {t.value: t for t in types} for dialect, types in _TYPES_BY_DIALECT.items()
}


def read_prerequisite(raw: Any, path: str, f: Fields, dialect: Dialect) -> Prerequisite | None:
    obj = f.as_mapping(raw, path)
    if obj is None:
        return None
    tables = _TABLES[dialect]
    place = Place(f, obj, path, {})
    run(tables.head, place)
    if place.values["type"] is PrerequisiteType.DOCKERIMAGE:
        run(tables.dockerimage, place)
        return _dockerimage(place.values)
    run(tables.with_plugin, place)
    return _with_plugin(obj, path, f, place.values)


def _dockerimage(values: dict[str, Any]) -> Prerequisite | None:
    if values["name"] is None or values["image"] is None:
        return None
    return Prerequisite(
        name=values["name"],
        type=values["type"],
        uri=[values["image"]],
        version=values["version"],
        contributor=values["contributor"],
        description=values["description"],
        auth=values["auth"],
    )


def _with_plugin(
    obj: dict[str, Any], path: str, f: Fields, values: dict[str, Any]
) -> Prerequisite | None:
    name, type_, uri = values["name"], values["type"], values["uri"]
    if name is None or type_ is None or uri is None:
        return None
    plugin, params, failure = values["plugin"], values["params"], values["failure"]
    leftovers = {k: v for k, v in obj.items() if k not in _COMMON_KEYS | _PLUGIN_KEYS}
    prerequisite_warnings(plugin, leftovers, failure, path, f.issues)
    leftovers.update({k: v for k, v in params.items() if k not in ("callbacks", "requireStorages")})
    variables, defaults = values["template_variables"]
    return Prerequisite(
        name=name,
        type=type_,
        uri=uri,
        # only a script's list changes where it lands (<name>/<repository name>)
        uri_list=type_ is PrerequisiteType.SCRIPT and isinstance(obj.get("uri"), list),
        version=values["version"],
        contributor=values["contributor"],
        description=values["description"],
        plugin=plugin,
        require=values["require"] or [],
        callbacks=values["callbacks"] or [],
        require_storages=values["storages"] or [],
        template_variables=variables or [],
        variable_defaults=defaults,
        failure_policy=failure,
        plugin_parameters=leftovers,
    )


def _storages(p: Place) -> list[StorageRequest] | None:
    """`requireStorages`, or a pvc_storage item's `plugin_params: {name, mountPath}` (which
    then leave the plugin parameters)."""
    params = p.values["params"]
    if p.values["plugin"] == PVC_STORAGE and "requireStorages" not in p.obj:
        p.values["params"] = {k: v for k, v in params.items() if k not in ("name", "mountPath")}
        return _read_pvc_storage(params, p.path, p.f)
    return _read_storages(p.obj if "requireStorages" in p.obj else params, p.path, p.f)


def _privileges(p: Place) -> None:
    own = {k: v for k, v in p.obj.items() if k not in _COMMON_KEYS | _PLUGIN_KEYS}
    check_options(own, p.path, p.issues)
    check_options(p.values["params"], p.at("plugin_params"), p.issues)


def _failure_policy(p: Place) -> str | None:
    failure = p.obj.get("failurePolicy")
    if failure is not None and failure not in ("fail", "ignore"):
        p.issues.error(
            p.at("failurePolicy"),
            "enum",
            f"must be 'fail' or 'ignore', got {describe(failure)}",
        )
        return None
    return failure


@dataclass(frozen=True)
class _Tables:
    head: Table  # every prerequisite
    dockerimage: Table  # then a dockerimage's
    with_plugin: Table  # or any other type's


def _tables(dialect: Dialect) -> _Tables:
    v2 = dialect is Dialect.V2
    head = (
        step(
            "name",
            text(
                "name",
                required=True,
                pattern=V2_NAME if v2 else DRAFT_NAME,
                rule=V2_NAME_RULE if v2 else DRAFT_NAME_RULE,
                max_length=255,
            ),
        ),
        step("type", lambda p: _read_type(p.obj, p.path, p.f, dialect)),
        *((protocol_version_2(),) if v2 else ()),
        step("version", text("version", allow_number=True)),
        step("contributor", text("contributor")),
        step("description", text("description")),
    )
    dockerimage = (
        known(
            _DOCKERIMAGE_KEYS if not v2 else _DOCKERIMAGE_KEYS - {"protocol_version"},
            hints=dict.fromkeys(
                _PLUGIN_KEYS, "a dockerimage prerequisite takes no plugin settings"
            ),
        ),
        step("image", text("uri", required=True), image_name("uri")),
        step("auth", lambda p: _read_auth(p.obj, p.path, p.f)),
    )
    with_plugin = (
        step("uri", lambda p: _read_uri(p.obj, p.path, p.f, dialect, p.values["type"])),
        step("plugin", text("plugin")),
        step("params", mapping("plugin_params")),
        step("callbacks", lambda p: _read_callbacks(p.obj, p.values["params"], p.path, p.f)),
        step("require", lambda p: _read_require(p.obj, p.path, p.f)),
        step("storages", _storages),
        step("template_variables", lambda p: _read_template_variables(p.obj, p.path, p.f)),
        check(_privileges),
        step("failure", _failure_policy),
    )
    return _Tables(head, dockerimage, with_plugin)


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
    by_value = _TYPE_BY_VALUE[dialect]
    if isinstance(raw, str) and raw in by_value:
        return by_value[raw]
    allowed = _TYPES_BY_DIALECT[dialect]
    choices = ", ".join(t.value for t in allowed)
    hint = " (a prerequisite cannot be a job)" if raw == "job" else ""
    f.issues.error(
        join(path, "type"), "enum", f"must be one of {choices}; got {describe(raw)}{hint}"
    )
    return None


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


_TABLES = {dialect: _tables(dialect) for dialect in _TYPES_BY_DIALECT}
