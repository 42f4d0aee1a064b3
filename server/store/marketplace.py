"""Marketplace items, their versions, labels and stars; admin-defined storages.

Visibility is applied in SQL when listing (`_visible_to`) and by `Reader.may_see` for one item
in hand; the two say the same thing. Writes that read first (publishing a version, starring)
lock the item row (FOR UPDATE; SQLite holds its write lock from BEGIN), so concurrent
publishers get distinct versions and concurrent stars count exactly.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence

from sqlalchemy import ColumnElement, delete, func, select, true, tuple_
from sqlalchemy import update as sql_update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import aliased
from sqlmodel import col

from server.shapes.item_kind import ItemKind
from server.shapes.marketplace_values import (
    EVERYONE_GROUP,
    ItemCursor,
    ItemDetails,
    ItemFilter,
    ItemPage,
    ItemSort,
    ItemVersion,
    KindMismatch,
    LabelKind,
    MarketplaceItem,
    NameTaken,
    NotItemOwner,
    PublishResult,
    Reader,
    Storage,
    StorageExists,
    VersionExists,
    Visibility,
)
from server.shapes.store_errors import InvalidValue
from server.store.columns import utcnow
from server.store.db import Repository
from server.store.marketplace_queries import (
    _ITEM,
    _insert_labels,
    _items,
    _items_query,
    _kind_words,
    _load_item,
    _lock_item,
    _matching,
    _next_number,
    _version,
    _visible_to,
    _write_labels,
)
from server.store.marketplace_tables import (
    MarketplaceItemRow,
    MarketplaceLabelRow,
    MarketplaceStarRow,
    MarketplaceVersionRow,
    StorageGrantRow,
    StorageRow,
)
from server.store.tables import MembershipRow, UserRow, VirtualClusterRow

MAX_PAGE = 100
_KEY_TRIES = 3
_SORT_COLUMN = {
    ItemSort.RECENT: col(_ITEM.updated_at),
    ItemSort.STARS: col(_ITEM.star_count),
    ItemSort.SUBMITS: col(_ITEM.submit_count),
}


def new_item_key() -> str:
    return secrets.token_hex(6)


class MarketplaceStore(Repository):
    # --- who reads ---

    def reader_for(self, user_id: int, *, admin: bool = False) -> Reader:
        """The reader a user is: their groups are the virtual clusters they belong to, and
        `default`, which everyone belongs to."""
        with self._read() as session:
            names = session.scalars(
                select(col(VirtualClusterRow.name))
                .join(
                    MembershipRow,
                    col(MembershipRow.virtual_cluster_id) == col(VirtualClusterRow.id),
                )
                .where(col(MembershipRow.user_id) == user_id)
            )
            return Reader(user_id=user_id, admin=admin, groups=frozenset({EVERYONE_GROUP, *names}))

    # --- publishing and changing ---

    def publish_item(
        self,
        *,
        actor: Reader,
        name: str,
        kind: ItemKind,
        version: str | None,
        content: str,
        details: ItemDetails,
    ) -> PublishResult:
        """Publish `content` as a new item `name` (owned by the actor, with `details`), or as a new
        version of the item of that name (its owner or an admin only; `details` then ignored).

        `version` None takes the next free number, or the version that already holds the same
        content (`unchanged`). Raises NameTaken, NotItemOwner, KindMismatch, VersionExists.
        """
        for _ in range(_KEY_TRIES):
            try:
                return self._publish(actor, name, kind, version, content, details)
            except IntegrityError:
                continue  # another publisher took the name or the key in between: look again
        raise RuntimeError(f"publishing {name!r} kept colliding with concurrent publishers")

    def _publish(
        self,
        actor: Reader,
        name: str,
        kind: ItemKind,
        version: str | None,
        content: str,
        details: ItemDetails,
    ) -> PublishResult:
        now = utcnow()
        with self._write() as session:
            row = session.scalar(select(_ITEM).where(col(_ITEM.name) == name).with_for_update())
            if row is None:
                key = new_item_key()
                chosen = version or "1"
                session.add(
                    MarketplaceItemRow(
                        id=key,
                        name=name,
                        kind=kind.value,
                        owner_id=actor.user_id,
                        latest_version=chosen,
                        summary=details.summary,
                        description=details.description,
                        visibility=details.visibility.value,
                        created_at=now,
                        updated_at=now,
                    )
                )
                session.flush()
                session.add(
                    MarketplaceVersionRow(
                        item_id=key, version=chosen, content=content, created_at=now
                    )
                )
                _write_labels(session, key, details)
                return PublishResult(_load_item(session, key), True, False, chosen)
            if not (actor.admin or row.owner_id == actor.user_id):
                raise NameTaken(f"the name {name!r} is taken; publish under another name")
            if row.kind != kind.value:
                raise KindMismatch(
                    f"item {name!r} is a {_kind_words(row.kind)}; a new version must be one too, "
                    f"not a {_kind_words(kind.value)}"
                )
            rows = session.execute(
                select(col(MarketplaceVersionRow.version), col(MarketplaceVersionRow.content))
                .where(col(MarketplaceVersionRow.item_id) == row.id)
                .order_by(col(MarketplaceVersionRow.id))
            )
            taken = {found: text for found, text in rows}
            if version is None:
                same = [v for v, text in taken.items() if text == content]
                if same:  # published before: the latest such version
                    found = row.latest_version if row.latest_version in same else same[-1]
                    return PublishResult(_load_item(session, row.id), False, True, found)
                version = _next_number(taken)
            elif version in taken:
                if taken[version] == content:
                    return PublishResult(_load_item(session, row.id), False, True, version)
                raise VersionExists(
                    f"version {version!r} of item {name!r} is published already with other "
                    "content; publish the change as another version"
                )
            session.add(
                MarketplaceVersionRow(
                    item_id=row.id, version=version, content=content, created_at=now
                )
            )
            row.latest_version = version
            row.updated_at = now
            session.add(row)
            session.flush()
            return PublishResult(_load_item(session, row.id), False, False, version)

    def update_item(
        self,
        key: str,
        *,
        actor: Reader,
        summary: str | None = None,
        description: str | None = None,
        tags: Sequence[str] | None = None,
        categories: Sequence[str] | None = None,
        visibility: Visibility | None = None,
        groups: Sequence[str] | None = None,
    ) -> MarketplaceItem:
        """Change what is given (None: unchanged; an empty summary or description clears it).
        Visibility other than GROUPS drops the item's groups. Raises UnknownItem, NotItemOwner."""
        with self._write() as session:
            row = _lock_item(session, key)
            if not (actor.admin or row.owner_id == actor.user_id):
                raise NotItemOwner(
                    f"item {row.name!r} belongs to another user; only its owner or an admin may "
                    "change it"
                )
            if summary is not None:
                row.summary = summary or None
            if description is not None:
                row.description = description or None
            if visibility is not None:
                row.visibility = visibility.value
            row.updated_at = utcnow()
            session.add(row)
            session.flush()
            replace: dict[LabelKind, Sequence[str]] = {}
            if tags is not None:
                replace[LabelKind.TAG] = tags
            if categories is not None:
                replace[LabelKind.CATEGORY] = categories
            if groups is not None:
                replace[LabelKind.GROUP] = groups
            if row.visibility != Visibility.GROUPS.value:
                replace[LabelKind.GROUP] = ()
            for kind, values in replace.items():
                session.execute(
                    delete(MarketplaceLabelRow).where(
                        col(MarketplaceLabelRow.item_id) == key,
                        col(MarketplaceLabelRow.kind) == kind.value,
                    )
                )
                _insert_labels(session, key, kind, values)
            return _load_item(session, key)

    def delete_item(self, key: str, *, actor: Reader) -> MarketplaceItem:
        """Delete the item with every version, label and star; what it was is returned."""
        with self._write() as session:
            row = _lock_item(session, key)
            if not (actor.admin or row.owner_id == actor.user_id):
                raise NotItemOwner(
                    f"item {row.name!r} belongs to another user; only its owner or an admin may "
                    "delete it"
                )
            item = _load_item(session, key)
            session.execute(delete(MarketplaceItemRow).where(col(MarketplaceItemRow.id) == key))
            return item

    def set_star(self, key: str, user_id: int, starred: bool) -> MarketplaceItem:
        """Star or unstar the item for the user; doing it twice changes nothing."""
        with self._write() as session:
            _lock_item(session, key)
            found = session.get(MarketplaceStarRow, (key, user_id))
            change = 0
            if starred and found is None:
                session.add(MarketplaceStarRow(item_id=key, user_id=user_id, created_at=utcnow()))
                change = 1
            elif not starred and found is not None:
                session.delete(found)
                change = -1
            if change:
                session.execute(
                    sql_update(MarketplaceItemRow)
                    .where(col(MarketplaceItemRow.id) == key)
                    .values(star_count=col(MarketplaceItemRow.star_count) + change)
                )
            session.flush()
            return _load_item(session, key)

    def count_submit(self, key: str) -> None:
        """A job was submitted from the item."""
        with self._write() as session:
            session.execute(
                sql_update(MarketplaceItemRow)
                .where(col(MarketplaceItemRow.id) == key)
                .values(submit_count=col(MarketplaceItemRow.submit_count) + 1)
            )

    # --- reading ---

    def get_item(self, key: str) -> MarketplaceItem | None:
        return self.items_by_keys([key]).get(key)

    def items_by_keys(self, keys: Iterable[str]) -> dict[str, MarketplaceItem]:
        """Many items in one query (plus one for their labels); unknown keys are left out."""
        wanted = set(keys)
        if not wanted:
            return {}
        with self._read() as session:
            return _items(session, _items_query().where(col(_ITEM.id).in_(wanted)))

    def item_named(self, name: str) -> MarketplaceItem | None:
        with self._read() as session:
            found = _items(session, _items_query().where(col(_ITEM.name) == name))
            return next(iter(found.values()), None)

    def item_version(self, key: str, version: str | None = None) -> ItemVersion | None:
        """One version of the item: `version`, or the latest when None."""
        with self._read() as session:
            if version is None:
                version = session.scalar(
                    select(col(_ITEM.latest_version)).where(col(_ITEM.id) == key)
                )
                if version is None:
                    return None
            row = session.scalar(
                select(MarketplaceVersionRow).where(
                    col(MarketplaceVersionRow.item_id) == key,
                    col(MarketplaceVersionRow.version) == version,
                )
            )
            return _version(row) if row is not None else None

    def item_versions(self, keys: Iterable[str]) -> dict[str, list[ItemVersion]]:
        """Every version of many items, newest first; every key is in the answer."""
        wanted = set(keys)
        result: dict[str, list[ItemVersion]] = {key: [] for key in wanted}
        if not wanted:
            return result
        with self._read() as session:
            rows = session.scalars(
                select(MarketplaceVersionRow)
                .where(col(MarketplaceVersionRow.item_id).in_(wanted))
                .order_by(col(MarketplaceVersionRow.id).desc())
            )
            for row in rows:
                result[row.item_id].append(_version(row))
        return result

    def starred_keys(self, user_id: int, keys: Iterable[str]) -> set[str]:
        """Which of these items the user has starred."""
        wanted = set(keys)
        if not wanted:
            return set()
        with self._read() as session:
            found = session.scalars(
                select(col(MarketplaceStarRow.item_id)).where(
                    col(MarketplaceStarRow.user_id) == user_id,
                    col(MarketplaceStarRow.item_id).in_(wanted),
                )
            )
            return set(found)

    def list_items(
        self,
        reader: Reader,
        where: ItemFilter | None = None,
        *,
        sort: ItemSort = ItemSort.RECENT,
        first: int = 50,
        after: ItemCursor | None = None,
    ) -> ItemPage:
        """The items the reader may see that match `where`, `first` (0 to 100) after the
        cursor, ordered by `sort` (highest first; the key breaks ties)."""
        if not 0 <= first <= MAX_PAGE:
            raise InvalidValue(f"first must be between 0 and {MAX_PAGE}, got {first}")
        if after is not None and after.sort is not sort:
            raise InvalidValue(
                f"the cursor belongs to a list sorted by {after.sort.name}, not {sort.name}"
            )
        where = where or ItemFilter()
        query = _items_query().where(_visible_to(reader), *_matching(where))
        column = _SORT_COLUMN[sort]
        if after is not None:
            query = query.where(tuple_(column, col(_ITEM.id)) < tuple_(after.value, after.key))
        query = query.order_by(col(column).desc(), col(_ITEM.id).desc()).limit(first + 1)
        with self._read() as session:
            items = list(_items(session, query).values())
        return ItemPage(items=items[:first], has_next=len(items) > first, sort=sort)

    def count_items(self, reader: Reader, where: ItemFilter | None = None) -> int:
        """How many items the reader may see match `where` (what a list's pages add up to)."""
        query = (
            select(func.count())
            .select_from(_ITEM)
            .join(UserRow, col(UserRow.id) == col(_ITEM.owner_id))
            .where(_visible_to(reader), *_matching(where or ItemFilter()))
        )
        with self._read() as session:
            return int(session.scalar(query) or 0)

    def tags_in_use(self, reader: Reader, kind: ItemKind | None = None) -> list[tuple[str, int]]:
        """Each tag of the items the reader may see (of `kind`, if given) with how many carry
        it, most used first; tags differing only in case count as one, spelt as most items
        spell it."""
        label = aliased(MarketplaceLabelRow)  # the visibility rule reads labels of its own
        query = (
            select(col(label.value), func.count())
            .join(_ITEM, col(_ITEM.id) == col(label.item_id))
            .where(col(label.kind) == LabelKind.TAG.value, _visible_to(reader))
            .group_by(col(label.value))
        )
        if kind is not None:
            query = query.where(col(_ITEM.kind) == ItemKind(kind).value)
        merged: dict[str, tuple[str, int, int]] = {}  # lower -> (spelling, its count, total)
        with self._read() as session:
            for value, count in session.execute(query):
                spelling, best, total = merged.get(value.lower(), (value, 0, 0))
                if count > best or (count == best and value < spelling):
                    spelling, best = value, count
                merged[value.lower()] = (spelling, best, total + count)
        found = [(spelling, total) for spelling, _, total in merged.values()]
        return sorted(found, key=lambda pair: (-pair[1], pair[0].lower()))

    # --- storages ---

    def add_storage(
        self,
        name: str,
        source: str,
        *,
        is_volume: bool,
        read_only: bool,
        users: Sequence[str] = (),
        groups: Sequence[str] = (),
    ) -> Storage:
        """Define a storage; raises StorageExists for a taken name."""
        try:
            with self._write() as session:
                if session.scalar(select(col(StorageRow.id)).where(col(StorageRow.name) == name)):
                    raise StorageExists(f"a storage named {name!r} exists already")
                row = StorageRow(
                    name=name,
                    source=source,
                    is_volume=is_volume,
                    read_only=read_only,
                    created_at=utcnow(),
                )
                session.add(row)
                session.flush()
                assert row.id is not None
                grants = {("user", u) for u in users} | {("group", g) for g in groups}
                for kind, subject in sorted(grants):
                    session.add(StorageGrantRow(storage_id=row.id, kind=kind, subject=subject))
        except IntegrityError:
            raise StorageExists(f"a storage named {name!r} exists already") from None
        found = self.get_storage(name)
        assert found is not None
        return found

    def get_storage(self, name: str) -> Storage | None:
        found = self._storages(col(StorageRow.name) == name)
        return found[0] if found else None

    def list_storages(self) -> list[Storage]:
        """Every storage, by name."""
        return self._storages(true())

    def _storages(self, where: ColumnElement[bool]) -> list[Storage]:
        with self._read() as session:
            rows = list(
                session.scalars(select(StorageRow).where(where).order_by(col(StorageRow.name)))
            )
            grants: dict[int, list[tuple[str, str]]] = {row.id or 0: [] for row in rows}
            if grants:
                found = session.execute(
                    select(
                        col(StorageGrantRow.storage_id),
                        col(StorageGrantRow.kind),
                        col(StorageGrantRow.subject),
                    )
                    .where(col(StorageGrantRow.storage_id).in_(list(grants)))
                    .order_by(col(StorageGrantRow.subject))
                )
                for storage_id, kind, subject in found:
                    grants[storage_id].append((kind, subject))
        return [
            Storage(
                name=row.name,
                source=row.source,
                is_volume=row.is_volume,
                read_only=row.read_only,
                users=tuple(s for k, s in grants[row.id or 0] if k == "user"),
                groups=tuple(s for k, s in grants[row.id or 0] if k == "group"),
                created_at=row.created_at,
            )
            for row in rows
        ]


def storage_allows(storage: Storage, user_name: str, reader: Reader) -> bool:
    """Admins may use every storage; others when it names them or one of their groups."""
    if reader.admin or user_name in storage.users:
        return True
    return bool(reader.groups & set(storage.groups))
