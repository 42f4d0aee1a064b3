"""Many marketplace items in a store, quickly: the first published as the service publishes
one (the protocol engine reads it, the store writes its item, version and labels), the rest
inserted in bulk as copies of those rows, each with its own key, name, tags, stars and time.

    from bench.items import store_items
    store_items(store, user, 5000)
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import insert, select  # noqa: E402

from server.marketplace.service import ItemFields, MarketplaceService  # noqa: E402
from server.shapes.marketplace_values import LabelKind  # noqa: E402
from server.shapes.values import User  # noqa: E402
from server.store import Store  # noqa: E402
from server.store.marketplace_tables import (  # noqa: E402
    MarketplaceItemRow,
    MarketplaceLabelRow,
    MarketplaceVersionRow,
)

BATCH = 1000
T0 = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
TAGS = ("vision", "nlp", "tabular", "audio", "speech", "gpu", "cpu-only", "tutorial")
CONTENT = """\
protocolVersion: 2
name: bench-item-00000
type: job
version: 1
contributor: Bench Lab
description: |
  Trains a small model on one of the benchmark datasets.

  Shows how a **parameter server** and its workers find each other.
parameters:
  epochs: 4
prerequisites:
  - name: image
    type: dockerimage
    uri: paigraph/busybox:test
taskRoles:
  worker:
    instances: 2
    dockerImage: image
    resourcePerInstance: {cpu: 1, memoryMB: 256, gpu: 0}
    commands:
      - echo training for <% $parameters.epochs %> epochs
"""


def item_name(n: int) -> str:
    return f"bench-item-{n:05d}"


def store_items(store: Store, owner: User, count: int) -> None:
    """`count` public job templates of `owner`, item n updated n minutes before item 0."""
    published = MarketplaceService(store).publish(owner, CONTENT, ItemFields(tags=["vision"]))
    assert published.item is not None, published.errors
    items_t = MarketplaceItemRow.__table__
    versions_t = MarketplaceVersionRow.__table__
    labels_t = MarketplaceLabelRow.__table__
    with store.engine.connect() as conn:
        item = dict(conn.execute(select(items_t)).mappings().one())
        version = dict(conn.execute(select(versions_t)).mappings().one())
    version.pop("id")
    for start in range(1, count, BATCH):
        items, versions, labels = [], [], []
        for n in range(start, min(start + BATCH, count)):
            key, name, at = f"{n:012x}", item_name(n), T0 - timedelta(minutes=n)
            items.append(
                {
                    **item,
                    "id": key,
                    "name": name,
                    "summary": f"Trains a small model on dataset {n}",
                    "star_count": n % 17,
                    "submit_count": n % 29,
                    "created_at": at,
                    "updated_at": at,
                }
            )
            content = version["content"].replace(item_name(0), name)
            versions.append({**version, "item_id": key, "content": content, "created_at": at})
            tags = dict.fromkeys((TAGS[n % len(TAGS)], TAGS[(n // 3) % len(TAGS)]))
            labels += [
                {"item_id": key, "kind": LabelKind.TAG.value, "value": tag, "position": position}
                for position, tag in enumerate(tags)
            ]
        with store.engine.begin() as conn:
            conn.execute(insert(items_t), items)
            conn.execute(insert(versions_t), versions)
            conn.execute(insert(labels_t), labels)
