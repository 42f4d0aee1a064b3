"""The outline the three dialect readers share: each mapping of a document (the job, a task
role, a prerequisite) is read by a table of steps applied in order by one loop.

The table's order is the order of a document's errors and warnings, so a reader's behaviour is
its table and a field is added, moved or given a rule in one line. Steps several dialects share
live here too.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from server.protocol.fields import Fields, describe
from server.protocol.issues import Issues, join
from server.protocol.launch_checks import image_issues
from server.protocol.model import TaskRole
from server.protocol.rules import MAX_RETRIES, RolePaths


@dataclass(slots=True)
class Place:
    """One mapping being read: the reader, the mapping, its path, and what earlier steps read
    (later steps may depend on it: a default taken from another field)."""

    f: Fields
    obj: dict[str, Any]
    path: str
    values: dict[str, Any]

    @property
    def issues(self) -> Issues:
        return self.f.issues

    def at(self, key: str | int) -> str:
        return join(self.path, key)


Reader = Callable[[Place], Any]
Rule = Callable[[Any, Place], Any]


# A step: where its value is kept in `Place.values` (None: a check only), how it is read, and
# the rule that checks the value read and returns the value kept (None: kept as read). A plain
# tuple, the cheapest thing for the loop to unpack.
Step = tuple[str | None, Reader, Rule | None]


def step(key: str | None, read: Reader, rule: Rule | None = None) -> Step:
    return (key, read, rule)


Table = Sequence[Step]


def read_table(
    table: Table, f: Fields, obj: dict[str, Any], path: str, values: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Apply `table` to `obj` at `path`; the values read, by key (added to `values` if given)."""
    place = Place(f, obj, path, {} if values is None else values)
    run(table, place)
    return place.values


def run(table: Table, place: Place) -> None:
    """Apply `table` to the place, keeping the values it reads in `place.values`."""
    kept = place.values
    for key, read, rule in table:
        value = read(place)
        if rule is not None:
            value = rule(value, place)
        if key is not None:
            kept[key] = value


def within(place: Place, obj: dict[str, Any], path: str, table: Table) -> None:
    """Apply `table` to a mapping inside the place (at `path`), its values joining the
    place's; the place is lent for it rather than a new one made (one less object per
    mapping read keeps the garbage collector out of the way)."""
    outer_obj, outer_path = place.obj, place.path
    place.obj, place.path = obj, path
    try:
        run(table, place)
    finally:
        place.obj, place.path = outer_obj, outer_path


def check(read: Reader) -> Step:
    """A step that only reports (its value is not kept)."""
    return step(None, read)


def nested(field: str, read_mapping: Reader, table: Table, *, key: str | None = None) -> Step:
    """Read the mapping under `field` (kept as `key`, else as `field`), then `table` on it at
    the field's path; the values it reads join the enclosing place's."""

    def read(place: Place) -> Any:
        obj = read_mapping(place)
        within(place, obj, place.at(field), table)
        return obj

    return step(field if key is None else key, read)


# -- readers -------------------------------------------------------------------------------


# The readers below answer the common cases (a value of the right type, an optional field left
# out) themselves, as the Fields method would, and call it for everything else: most fields of
# most documents then cost one call, not two.
_ABSENT = object()


def text(key: str, **options: Any) -> Reader:
    if options.get("pattern") is not None or options.get("max_length") is not None:
        return lambda p: p.f.string(p.obj, key, p.path, **options)
    optional = not options.get("required", False)

    def read(p: Place) -> Any:
        value = p.obj.get(key)
        if value.__class__ is str or (value is None and optional):
            return value
        return p.f.string(p.obj, key, p.path, **options)

    return read


def integer(key: str, **options: Any) -> Reader:
    optional = not options.get("required", False)
    default = options.get("default")

    def read(p: Place) -> Any:
        value = p.obj.get(key, _ABSENT)
        if value.__class__ is int:
            return value
        if value is _ABSENT and optional:
            return default
        return p.f.integer(p.obj, key, p.path, **options)

    return read


def boolean(key: str) -> Reader:
    def read(p: Place) -> Any:
        value = p.obj.get(key)
        if value is None or value.__class__ is bool:
            return value
        return p.f.boolean(p.obj, key, p.path)

    return read


def strings(key: str, **options: Any) -> Reader:
    optional = not options.get("required", False)

    def read(p: Place) -> Any:
        if optional and p.obj.get(key) is None:
            return None
        return p.f.string_list(p.obj, key, p.path, **options)

    return read


def string_map(key: str) -> Reader:
    def read(p: Place) -> Any:
        if p.obj.get(key) is None:
            return {}
        return p.f.string_map(p.obj, key, p.path)

    return read


def mapping(key: str) -> Callable[[Place], dict[str, Any]]:
    """A mapping field; left out or null reads as empty, anything else not a mapping is an
    error (and reads as empty)."""

    def read(p: Place) -> dict[str, Any]:
        value = p.obj.get(key)
        if value is None:
            return {}
        return p.f.as_mapping(value, p.at(key)) or {}

    return read


def loose_mapping(key: str) -> Callable[[Place], dict[str, Any]]:
    """A mapping field where any empty value (null, 0, '', []) reads as an empty mapping."""

    def read(p: Place) -> dict[str, Any]:
        value = p.obj.get(key) or {}
        return p.f.as_mapping(value, p.at(key)) or {}

    return read


def required(*keys: str) -> Step:
    def read(p: Place) -> None:
        obj = p.obj
        for key in keys:
            if key not in obj:  # only then spell out the paths
                p.f.required(obj, p.path, keys)
                return

    return check(read)


def known(allowed: Collection[str], hints: dict[str, str] | None = None) -> Step:
    members = frozenset(allowed)

    def read(p: Place) -> None:
        if not members.issuperset(p.obj):  # only then look for the keys to report
            p.f.known_keys(p.obj, p.path, allowed, hints=hints)

    return check(read)


# -- steps and rules several dialects share ------------------------------------------------


def _job_type(p: Place) -> None:
    if "type" in p.obj and p.obj["type"] != "job":
        p.issues.error(p.at("type"), "enum", f"must be 'job', got {describe(p.obj['type'])}")


JOB_TYPE = check(_job_type)


def protocol_version_2(*, detail: bool = True) -> Step:
    """`protocolVersion`, when given, must be 2 (or "2")."""

    def read(p: Place) -> None:
        value = p.obj.get("protocolVersion", 2)
        if value not in (2, "2"):
            message = f"must be 2, got {describe(value)}" if detail else "must be 2"
            p.issues.error(p.at("protocolVersion"), "enum", message)

    return check(read)


def retry_range(retry: int | None, p: Place) -> int | None:
    """v1 and draft retry counts: -2 and -1 mean retry without limit."""
    if retry is not None and not -2 <= retry <= MAX_RETRIES:
        p.issues.error(
            p.at("retryCount"),
            "range",
            f"must be -2 (always retry), -1 (retry failures without limit) or 0 to "
            f"{MAX_RETRIES}, got {retry}",
        )
    return retry


def _kill_all_obsolete(p: Place) -> None:
    if "killAllOnCompletedTaskNumber" in p.obj:
        p.issues.warn(
            p.at("killAllOnCompletedTaskNumber"),
            "obsolete",
            "killAllOnCompletedTaskNumber is obsolete and ignored; use minSucceededTaskCount",
        )


KILL_ALL_OBSOLETE = check(_kill_all_obsolete)


def image_name(key: str) -> Rule:
    """An image name read from `key`: not blank, and a reference a registry can take."""

    def rule(image: str | None, p: Place) -> str | None:
        if image is not None and not image.strip():
            p.issues.error(p.at(key), "empty", "the image name must not be empty")
        elif image is not None:
            p.issues.items.extend(image_issues(image, p.at(key)))
        return image

    return rule


# -- task roles ----------------------------------------------------------------------------

RoleRead = tuple[TaskRole, RolePaths, bool]  # the role, where its fields were, shm defaulted


def read_roles(
    entries: Iterable[tuple[Any, str, Any]],
    read: Callable[[Any, str, Any], RoleRead | None],
    accept: Callable[[TaskRole, RolePaths, bool], TaskRole],
    issues: Issues,
    what: str,
) -> list[TaskRole]:
    """Read each (key, path, raw) task role with `read`; a role that cannot be read leaves at
    least one error at its path, a role read is checked and kept by `accept`."""
    roles: list[TaskRole] = []
    for key, path, raw in entries:
        before = issues.error_count()
        found = read(key, path, raw)
        if found is None:
            issues.ensure_error(before, path, what)
            continue
        roles.append(accept(*found))
    return roles


def null_means(key: str, meaning: Any) -> Rule:
    """An explicit null under `key` reads as `meaning` (v1 and draft: null disables a rule)."""

    def rule(value: Any, p: Place) -> Any:
        if key in p.obj and p.obj[key] is None:
            return meaning
        return value

    return rule


def all_read(*keys: str) -> Callable[[dict[str, Any]], bool]:
    """Whether none of `keys` read as None (a field that could not be read)."""
    values_of = itemgetter(*keys)
    return lambda values: None not in values_of(values)
