"""The SQL pieces `MarketplaceStore` builds its reads and writes from.

Who may see an item, which items a filter matches, an item's labels, and the reading of item
and version rows into values: each is one small function, kept apart from the store's methods
so that a method reads as the steps of its transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, exists, func, or_, select, true
from sqlalchemy.orm import Session
from sqlmodel import col

from server.shapes.item_kind import ItemKind
from server.shapes.marketplace_values import (
    ItemDetails,
    ItemFilter,
    ItemVersion,
    LabelKind,
    MarketplaceItem,
    Reader,
    UnknownItem,
    Visibility,
)
from server.store.marketplace_tables import (
    MarketplaceItemRow,
    MarketplaceLabelRow,
    MarketplaceVersionRow,
)
from server.store.tables import UserRow

_ITEM = MarketplaceItemRow
_ITEM_COLUMNS = (
    col(_ITEM.id),
    col(_ITEM.name),
    col(_ITEM.kind),
    col(_ITEM.owner_id),
    col(UserRow.name),
    col(_ITEM.latest_version),
    col(_ITEM.summary),
    col(_ITEM.description),
    col(_ITEM.visibility),
    col(_ITEM.star_count),
    col(_ITEM.submit_count),
    col(_ITEM.created_at),
    col(_ITEM.updated_at),
)


# --- helpers -----------------------------------------------------------------------------------


def _kind_words(kind: str) -> str:
    return "job template" if kind == ItemKind.JOB_TEMPLATE.value else f"{kind} component"


def _next_number(taken: dict[str, str]) -> str:
    """The next whole-number version: one above the highest number taken so far."""
    numbers = [int(v) for v in taken if v.isdigit()]
    return str(max(numbers, default=0) + 1)


def _lock_item(session: Session, key: str) -> MarketplaceItemRow:
    row = session.scalar(select(_ITEM).where(col(_ITEM.id) == key).with_for_update())
    if row is None:
        raise UnknownItem(f"no marketplace item has id {key!r}")
    return row


def _write_labels(session: Session, key: str, details: ItemDetails) -> None:
    _insert_labels(session, key, LabelKind.TAG, details.tags)
    _insert_labels(session, key, LabelKind.CATEGORY, details.categories)
    if details.visibility is Visibility.GROUPS:
        _insert_labels(session, key, LabelKind.GROUP, details.groups)


def _insert_labels(session: Session, key: str, kind: LabelKind, values: Sequence[str]) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            continue
        seen.add(value)
        session.add(
            MarketplaceLabelRow(item_id=key, kind=kind.value, value=value, position=len(seen))
        )
    session.flush()


def _visible_to(reader: Reader) -> ColumnElement[bool]:
    if reader.admin:
        return true()
    shared = exists().where(
        col(MarketplaceLabelRow.item_id) == col(_ITEM.id),
        col(MarketplaceLabelRow.kind) == LabelKind.GROUP.value,
        col(MarketplaceLabelRow.value).in_(sorted(reader.groups)),
    )
    return or_(
        col(_ITEM.visibility) == Visibility.PUBLIC.value,
        col(_ITEM.owner_id) == reader.user_id,
        and_(col(_ITEM.visibility) == Visibility.GROUPS.value, shared),
    )


def _has_label(kind: LabelKind, value: str) -> ColumnElement[bool]:
    return exists().where(
        col(MarketplaceLabelRow.item_id) == col(_ITEM.id),
        col(MarketplaceLabelRow.kind) == kind.value,
        func.lower(col(MarketplaceLabelRow.value)) == value.lower(),
    )


def _matching(where: ItemFilter) -> list[ColumnElement[bool]]:
    clauses: list[ColumnElement[bool]] = []
    if where.kind is not None:
        clauses.append(col(_ITEM.kind) == ItemKind(where.kind).value)
    if where.tag is not None:
        clauses.append(_has_label(LabelKind.TAG, where.tag))
    if where.category is not None:
        clauses.append(_has_label(LabelKind.CATEGORY, where.category))
    if where.owner is not None:
        clauses.append(col(UserRow.name) == where.owner)
    if where.name is not None:
        clauses.append(col(_ITEM.name) == where.name)
    if where.search:
        pattern = "%" + _escape_like(where.search.strip()) + "%"
        clauses.append(
            or_(
                col(_ITEM.name).ilike(pattern, escape="\\"),
                col(_ITEM.summary).ilike(pattern, escape="\\"),
                col(_ITEM.description).ilike(pattern, escape="\\"),
            )
        )
    return clauses


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _items_query() -> Select[*tuple[Any, ...]]:
    return select(*_ITEM_COLUMNS).join(UserRow, col(UserRow.id) == col(_ITEM.owner_id))


def _load_item(session: Session, key: str) -> MarketplaceItem:
    found = _items(session, _items_query().where(col(_ITEM.id) == key))
    if key not in found:
        raise UnknownItem(f"no marketplace item has id {key!r}")
    return found[key]


def _items(session: Session, query: Select[*tuple[Any, ...]]) -> dict[str, MarketplaceItem]:
    """The items the query selects, in its order, with their labels (one more query)."""
    rows = session.execute(query).all()
    labels: dict[str, dict[str, list[str]]] = {row[0]: {} for row in rows}
    if labels:
        found = session.execute(
            select(
                col(MarketplaceLabelRow.item_id),
                col(MarketplaceLabelRow.kind),
                col(MarketplaceLabelRow.value),
            )
            .where(col(MarketplaceLabelRow.item_id).in_(list(labels)))
            .order_by(
                col(MarketplaceLabelRow.item_id),
                col(MarketplaceLabelRow.kind),
                col(MarketplaceLabelRow.position),
            )
        )
        for item_id, kind, value in found:
            labels[item_id].setdefault(kind, []).append(value)
    return {row[0]: _item(row, labels[row[0]]) for row in rows}


def _item(row: Sequence[Any], labels: dict[str, list[str]]) -> MarketplaceItem:
    (key, name, kind, owner_id, owner, version, summary, description, visibility) = row[:9]
    stars, submits, created, updated = row[9:]
    return MarketplaceItem(
        key=key,
        name=name,
        kind=ItemKind(kind),
        owner_id=owner_id,
        owner=owner,
        version=version,
        summary=summary,
        description=description,
        tags=tuple(labels.get(LabelKind.TAG.value, ())),
        categories=tuple(labels.get(LabelKind.CATEGORY.value, ())),
        visibility=Visibility(visibility),
        groups=tuple(labels.get(LabelKind.GROUP.value, ())),
        stars=stars,
        submits=submits,
        created_at=created,
        updated_at=updated,
    )


def _version(row: MarketplaceVersionRow) -> ItemVersion:
    return ItemVersion(
        item_key=row.item_id, version=row.version, content=row.content, created_at=row.created_at
    )
