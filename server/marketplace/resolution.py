"""One resolution of a job's references: what it loaded, made and found wrong.

`ReferenceResolver.resolve` (`references.py`) makes one `_Resolution` per job and runs it; the
walk over roles, `require` lists and components, with its bookkeeping, lives here so that the
resolver's module reads as its public interface.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from server.marketplace.components import (
    Code,
    Source,
    Unresolvable,
    fill_variables,
    load_source,
    read_component,
    size_of,
    variables_check,
)
from server.marketplace.document_paths import DocumentPaths
from server.marketplace.fetch import FetchSession
from server.marketplace.lookup import Viewer
from server.marketplace.reference_values import (
    _ROLE_SLOTS,
    REFERENCE_PREREQUISITES,
    ResolvedReferences,
)
from server.marketplace.storages import (
    StorageAsk,
    StorageMerger,
    job_storages,
    required_storages,
)
from server.protocol.issues import Issue, Severity, join
from server.protocol.model import (
    JobSpec,
    Prerequisite,
    PrerequisiteOrigin,
    PrerequisiteType,
    Requirement,
    TaskRole,
)
from server.protocol.rules import is_reference

if TYPE_CHECKING:
    from server.marketplace.references import ReferenceResolver


@dataclass(frozen=True)
class _Link:
    key: str  # Source.key, or local:<name>
    label: str


@dataclass
class _Resolution:
    """The state of one resolution: what was loaded, made, and found wrong."""

    resolver: ReferenceResolver
    spec: JobSpec
    viewer: Viewer
    session: FetchSession
    issues: list[Issue] = field(default_factory=list)
    prerequisites: list[Prerequisite] = field(default_factory=list)
    local: dict[str, int] = field(default_factory=dict)  # name -> index of the first so named
    taken: set[str] = field(default_factory=set)
    sources: dict[str, Source | Unresolvable] = field(default_factory=dict)
    components: dict[str, Prerequisite | Unresolvable] = field(default_factory=dict)
    made: dict[tuple[str, str], str] = field(default_factory=dict)  # (key, values) -> name
    needs: dict[str, list[str]] = field(default_factory=dict)  # name -> what it requires
    asked_at: dict[str, str] = field(default_factory=dict)  # resolved name -> reference path
    local_done: set[int] = field(default_factory=set)
    item_ids: set[str] = field(default_factory=set)
    loaded_bytes: int = 0
    stopped: bool = False  # a limit was hit: the error is reported, the rest is skipped
    _reported: set[Issue] = field(default_factory=set)
    paths: DocumentPaths = field(init=False)

    def __post_init__(self) -> None:
        self.paths = DocumentPaths(self.spec)
        self.prerequisites = list(self.spec.prerequisites)
        for index, p in enumerate(self.prerequisites):
            self.local.setdefault(p.name, index)
        self.taken = {p.name for p in self.prerequisites}

    # --- the whole job ---------------------------------------------------------------------

    def run(self) -> ResolvedReferences:
        for index in range(len(self.prerequisites)):
            self._local(index, ())
        aliases = self._aliases()
        merger = StorageMerger(self.resolver.storages, self.viewer, self.issues)
        for_all_roles = job_storages(self.spec.extras, self.issues)
        roles = [
            self._role(index, role, aliases, merger, for_all_roles)
            for index, role in enumerate(self.spec.task_roles)
        ]
        item_ids = frozenset(self.item_ids)
        if any(i.severity is Severity.ERROR for i in self.issues):
            return ResolvedReferences(spec=None, issues=self.issues, item_ids=item_ids)
        extras = {k: v for k, v in self.spec.extras.items() if k != REFERENCE_PREREQUISITES}
        spec = self.spec.model_copy(
            update={"prerequisites": self.prerequisites, "task_roles": roles, "extras": extras}
        )
        return ResolvedReferences(spec=spec, issues=self.issues, item_ids=item_ids)

    def _role(
        self,
        index: int,
        role: TaskRole,
        aliases: dict[str, list[str]],
        merger: StorageMerger,
        for_all_roles: list[StorageAsk],
    ) -> TaskRole:
        paths = self.paths.role(index, role.name)
        update: dict[str, Any] = {}
        required_first: list[str] = []  # what the role's image / data / script / output need
        for attr, types in _ROLE_SLOTS:
            value: str | None = getattr(role, attr)
            if value is None:
                continue
            name: str | None = value
            if is_reference(value):
                path = getattr(paths, attr)
                name = self._reference(value, None, path, (), types)
                if name is None:
                    continue
                update[attr] = name
            assert name is not None
            required_first += self._closure(name)[:-1]
        listed: list[str] = []
        for k, value in enumerate(role.prerequisites):
            if is_reference(value):
                name = self._reference(value, None, paths.prerequisite(k), (), None)
                listed += self._closure(name) if name is not None else []
            elif value in aliases:
                for name in aliases[value]:
                    listed += self._closure(name)
            else:
                listed += self._closure(value)
        update["prerequisites"] = _unique([*required_first, *listed])
        used = _unique(
            [
                *update["prerequisites"],
                *(update.get(attr, getattr(role, attr)) for attr, _ in _ROLE_SLOTS),
            ]
        )
        asks = [*for_all_roles]
        for name in used:
            asks += self._storage_asks(name)
        output_name = update.get("output", role.output)
        output = next(
            (
                p
                for p in self.prerequisites
                if p.name == output_name
                and p.type in (PrerequisiteType.OUTPUT, PrerequisiteType.STORAGE)
            ),
            None,
        )
        update["storages"] = merger.mounts(
            asks, (output, paths.output) if output is not None else None
        )
        return role.model_copy(update=update)

    def _storage_asks(self, name: str | None) -> list[StorageAsk]:
        asks: list[StorageAsk] = []
        for index, p in enumerate(self.prerequisites):
            if p.name != name or not p.require_storages:
                continue
            if index < len(self.spec.prerequisites):
                asks += required_storages(p, self.paths.prerequisite(index), local=True)
            else:
                asks += required_storages(p, self.asked_at.get(p.name, ""), local=False)
        return asks

    def _aliases(self) -> dict[str, list[str]]:
        """Seed 004's `extras.reference_prerequisites`: name -> the prerequisites it stands for."""
        raw = self.spec.extras.get(REFERENCE_PREREQUISITES)
        base = f"extras.{REFERENCE_PREREQUISITES}"
        if raw is None:
            return {}
        if not isinstance(raw, list):
            self._error(base, "type", "must be a list of {name, require} mappings")
            return {}
        aliases: dict[str, list[str]] = {}
        for i, entry in enumerate(raw):
            path = join(base, i)
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                self._error(path, "type", "must be a mapping with a `name` and a `require` list")
                continue
            name = entry["name"]
            if name in self.local:
                self._error(
                    join(path, "name"),
                    "duplicate",
                    f"{name!r} is also the name of one of the job's prerequisites; give the "
                    "reference another name",
                )
                continue
            requires = entry.get("require")
            if not isinstance(requires, list) or not requires:
                self._error(
                    join(path, "require"),
                    "required",
                    "must list what the name stands for, e.g. "
                    "[{name: marketplace://name/<item>, template_variables: {...}}]",
                )
                continue
            names: list[str] = []
            for j, item in enumerate(requires):
                item_path = join(join(path, "require"), j)
                requirement = _requirement_of(item)
                if requirement is None:
                    self._error(
                        item_path,
                        "type",
                        "must be a reference or a mapping with `name` and `template_variables`",
                    )
                    continue
                resolved = self._requirement(requirement, item_path, ())
                if resolved is not None:
                    names.append(resolved)
            aliases[name] = names
        return aliases

    # --- one prerequisite --------------------------------------------------------------------

    def _requirement(
        self, requirement: Requirement, path: str, chain: tuple[_Link, ...]
    ) -> str | None:
        """The name of the prerequisite a `require` entry stands for, resolved."""
        if is_reference(requirement.name):
            return self._reference(
                requirement.name, requirement.template_variables, path, chain, None
            )
        index = self.local.get(requirement.name)
        if index is None:
            self._error(
                path,
                Code.UNKNOWN_PREREQUISITE,
                f"{_where(chain)}Prerequisite {requirement.name} does not exist: require a "
                "marketplace:// or http(s):// reference, or a prerequisite of the job",
            )
            return None
        local = self.prerequisites[index]
        if requirement.template_variables or local.template_variables:
            return self._use(
                _Link(f"local:{local.name}", local.name),
                self.spec.prerequisites[index],
                None,
                requirement.template_variables,
                path,
                chain,
                None,
            )
        return local.name if self._local(index, chain, path) else None

    def _local(self, index: int, chain: tuple[_Link, ...], path: str | None = None) -> bool:
        """Resolve the `require` list of the job's own prerequisite `index` (once); `path` is
        where it is required from, if it is."""
        p = self.prerequisites[index]
        link = _Link(f"local:{p.name}", p.name)
        if self._cycle(link, chain, path or self.paths.prerequisite(index)):
            return False
        if index in self.local_done:
            return True
        base = join(self.paths.prerequisite(index), "require")
        children: list[str] = []
        ok = True
        for j, requirement in enumerate(p.require):
            name = self._requirement(requirement, join(base, j), (*chain, link))
            ok = ok and name is not None
            if name is not None:
                children.append(name)
        self.local_done.add(index)
        if p.require:
            self.prerequisites[index] = p.model_copy(
                update={"require": [Requirement(name=c) for c in children]}
            )
        self.needs[p.name] = _unique([*self.needs.get(p.name, []), *children])
        return ok

    def _reference(
        self,
        reference: str,
        values: dict[str, Any] | None,
        path: str,
        chain: tuple[_Link, ...],
        expect: Sequence[PrerequisiteType] | None,
    ) -> str | None:
        """Resolve a marketplace:// or http(s):// reference; `values` None means the place it
        is written cannot give template variables (a task role)."""
        if self.stopped:
            return None
        limits = self.resolver.limits
        if len(chain) >= limits.max_depth:
            self._error(
                path,
                Code.TOO_DEEP,
                f"{_where(chain)}the require chain is deeper than {limits.max_depth} levels "
                f"at {reference}",
            )
            return None
        try:
            source = self._source(reference)
            component = self._component(source)
        except Unresolvable as exc:
            self._error(path, exc.code, f"{_where(chain)}{exc.message}")
            return None
        if source.origin.item_id is not None:
            self.item_ids.add(source.origin.item_id)
        link = _Link(source.key, source.label)
        return self._use(link, component, source.origin, values, path, chain, expect)

    def _use(
        self,
        link: _Link,
        component: Prerequisite,
        origin: PrerequisiteOrigin | None,
        values: dict[str, Any] | None,
        path: str,
        chain: tuple[_Link, ...],
        expect: Sequence[PrerequisiteType] | None,
    ) -> str | None:
        """Fill the component's variables, resolve what it requires, and add it (once for the
        same component and values) under a name no other prerequisite has."""
        if self._cycle(link, chain, path):
            return None
        where = _where(chain)
        given = values or {}
        if not self._variables_given(link, component, values, path, where):
            return None
        declared = {k: v for k, v in given.items() if k in component.template_variables}
        made_key = (link.key, json.dumps(declared, sort_keys=True, default=str))
        if made_key in self.made:
            name = self.made[made_key]
            return name if self._has_type(name, component, expect, path, where) else None
        if not self._has_type(link.label, component, expect, path, where):
            return None
        filled = fill_variables(component, declared) if component.template_variables else component
        if not self._mounts_absolute(link, filled, path, where):
            return None
        children = self._children(filled, path, (*chain, link))
        if children is None:
            return None
        name = self._free_name(filled.name)
        made = filled.model_copy(
            update={
                "name": name,
                "require": [Requirement(name=c) for c in children],
                "template_variables": [],
                "origin": (
                    origin.model_copy(update={"template_variables": declared}) if origin else None
                ),
            }
        )
        self.prerequisites.append(made)
        self.made[made_key] = name
        self.needs[name] = children
        self.asked_at[name] = path
        return name

    def _variables_given(
        self,
        link: _Link,
        component: Prerequisite,
        values: dict[str, Any] | None,
        path: str,
        where: str,
    ) -> bool:
        """Whether every template variable of the component has a value (an error names the
        missing ones); values for variables it does not declare are warned about."""
        missing, unknown = variables_check(component, values or {})
        if missing:
            names = ", ".join(repr(v) for v in missing)
            plural = "s" if len(missing) > 1 else ""
            hint = (
                "; a task role cannot give template variables: name it under "
                "extras.reference_prerequisites with `require: [{name: <reference>, "
                "template_variables: {...}}]` and list that name instead"
                if values is None
                else "; give it under `template_variables` of this require entry"
            )
            self._error(
                path,
                Code.MISSING_VARIABLE,
                f"{where}{link.label} needs a value for template variable{plural} {names}{hint}",
            )
            return False
        for name in unknown:
            self._warn(
                path,
                Code.UNKNOWN_VARIABLE,
                f"{where}{link.label} declares no template variable {name!r}; the value is unused",
            )
        return True

    def _mounts_absolute(self, link: _Link, filled: Prerequisite, path: str, where: str) -> bool:
        """Whether every storage the filled component requires mounts at an absolute path (an
        error names the first that does not)."""
        for storage in filled.require_storages:
            if storage.mount_path is not None and not storage.mount_path.startswith("/"):
                self._error(
                    path,
                    Code.INVALID,
                    f"{where}{link.label}: requireStorages {storage.name!r} has mountPath "
                    f"{storage.mount_path!r}, which is not an absolute path",
                )
                return False
        return True

    def _children(
        self, filled: Prerequisite, path: str, chain: tuple[_Link, ...]
    ) -> list[str] | None:
        """The names of what the filled component requires, each resolved (and added) in
        turn; None once one of them cannot be."""
        children: list[str] = []
        for requirement in filled.require:
            child = self._requirement(requirement, path, chain)
            if child is None:
                return None
            children.append(child)
        return children

    def _source(self, reference: str) -> Source:
        """The reference's text, loaded once per resolution and counted against the limits."""
        found = self.sources.get(reference)
        if found is None:
            limits = self.resolver.limits
            if len(self.sources) >= limits.max_components:
                self.stopped = True
                raise Unresolvable(
                    Code.TOO_MANY,
                    f"the job needs more than {limits.max_components} components; "
                    f"stopped at {reference}",
                )
            try:
                found = load_source(reference, self.resolver.items, self.viewer, self.session)
            except Unresolvable as exc:
                found = exc
            else:
                self.loaded_bytes += size_of(found.text)
                if self.loaded_bytes > limits.max_total_bytes:
                    self.stopped = True
                    found = Unresolvable(
                        Code.TOO_LARGE,
                        f"the components the job needs are over {limits.max_total_bytes} "
                        f"bytes together; stopped at {reference}",
                    )
            self.sources[reference] = found
        if isinstance(found, Unresolvable):
            raise found
        return found

    def _component(self, source: Source) -> Prerequisite:
        found = self.components.get(source.key)
        if found is None:
            try:
                found = read_component(source)
            except Unresolvable as exc:
                found = exc
            self.components[source.key] = found
        if isinstance(found, Unresolvable):
            raise found
        return found

    # --- small pieces ------------------------------------------------------------------------

    def _has_type(
        self,
        label: str,
        component: Prerequisite,
        expect: Sequence[PrerequisiteType] | None,
        path: str,
        where: str,
    ) -> bool:
        if expect is None or component.type in expect:
            return True
        wanted = " or ".join(t.value for t in expect)
        self._error(
            path,
            Code.WRONG_TYPE,
            f"{where}{label} is a {component.type.value} component; this place needs a "
            f"{wanted} component",
        )
        return False

    def _cycle(self, link: _Link, chain: tuple[_Link, ...], path: str) -> bool:
        keys = [c.key for c in chain]
        if link.key not in keys:
            return False
        loop = [c.label for c in chain[keys.index(link.key) :]] + [link.label]
        self._error(path, Code.CYCLE, f"require cycle: {' -> '.join(loop)}")
        return True

    def _free_name(self, wanted: str) -> str:
        name, n = wanted, 1
        while name in self.taken:
            n += 1
            name = f"{wanted}-{n}"
        self.taken.add(name)
        return name

    def _closure(self, name: str) -> list[str]:
        """`name` after everything it requires, each once, dependencies first."""
        out: list[str] = []
        seen: set[str] = set()

        def visit(current: str) -> None:
            if current in seen:
                return
            seen.add(current)
            for child in self.needs.get(current, []):
                visit(child)
            out.append(current)

        visit(name)
        return out

    def _error(self, path: str, code: str, message: str) -> None:
        self._add(Issue(path, str(code), message))

    def _warn(self, path: str, code: str, message: str) -> None:
        self._add(Issue(path, str(code), message, Severity.WARNING))

    def _add(self, issue: Issue) -> None:
        if issue not in self._reported:
            self._reported.add(issue)
            self.issues.append(issue)


def _where(chain: tuple[_Link, ...]) -> str:
    """The chain a problem was found in, as a message prefix ('' at the job itself)."""
    return f"in {' -> '.join(link.label for link in chain)}: " if chain else ""


def _unique(names: Sequence[str | None]) -> list[str]:
    out: list[str] = []
    for name in names:
        if name is not None and name not in out:
            out.append(name)
    return out


def _requirement_of(item: Any) -> Requirement | None:
    if isinstance(item, str):
        return Requirement(name=item)
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        return None
    values = item.get("template_variables") or {}
    if not isinstance(values, dict):
        return None
    return Requirement(name=item["name"], template_variables=values)
