"""The marketplace operations `paigraph market ...` uses, as GraphQL over a `Client`.

The queries and the client that runs them, kept apart from the commands (`market_commands.py`)
that print what they return.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from server.api.ids import BadId, parse_global_id
from server.client.remote import Client, RemoteError, answer_object

ITEM_FIELDS = """
  id name version latestVersion type summary description tags categories visibility groups
  stars submits createdAt updatedAt viewerHasStarred owner { name }
"""
ERRORS = "errors { path code message }"
LIST = f"""
query($first: Int, $after: String, $filter: MarketplaceItemFilter, $sort: MarketplaceItemSort!) {{
  marketplaceItems(first: $first, after: $after, filter: $filter, sort: $sort) {{
    edges {{ node {{ {ITEM_FIELDS} }} }} pageInfo {{ hasNextPage endCursor }}
  }}
}}"""
SHOW = f"""
query($id: ID!, $version: String) {{
  marketplaceItem(id: $id, version: $version) {{
    {ITEM_FIELDS} content templateVariables parameters
    versions {{ version createdAt latest }}
    taskRoles {{ name instanceCount commands dockerImage {{ name uri }} }}
  }}
}}"""
PUBLISH = f"""
mutation($input: PublishMarketplaceItemInput!) {{
  publishMarketplaceItem(input: $input) {{
    outcome item {{ {ITEM_FIELDS} }} {ERRORS} warnings {{ path code message }}
  }}
}}"""
USE = f"""
mutation($input: UseMarketplaceItemInput!) {{
  useMarketplaceItem(input: $input) {{
    config job {{ id name state }} item {{ id name version submits }} {ERRORS}
  }}
}}"""
STAR = f"""
mutation($id: ID!, $star: Boolean!) {{
  starMarketplaceItem(input: {{id: $id, star: $star}}) {{ item {{ {ITEM_FIELDS} }} {ERRORS} }}
}}"""


class MarketClient:
    """The marketplace operations the commands use, on a `Client`."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def items(
        self, where: dict[str, Any], sort: str, *, page: int = 50
    ) -> Iterator[tuple[dict[str, Any], bool]]:
        """Every matching item, page after page; with each, whether more follow it."""
        after = None
        while True:
            variables = {"first": page, "after": after, "filter": where, "sort": sort.upper()}
            found = self.client.execute(LIST, variables)["marketplaceItems"]
            edges = found["edges"]
            for n, edge in enumerate(edges):
                more = n < len(edges) - 1 or found["pageInfo"]["hasNextPage"]
                yield edge["node"], more
            if not found["pageInfo"]["hasNextPage"]:
                return
            after = found["pageInfo"]["endCursor"]

    def item_id(self, reference: str) -> str:
        """The ID of the item `reference` names: an item ID, or a name."""
        if _is_item_id(reference):
            return reference
        for item, _ in self.items({"name": reference}, "recent", page=1):
            return str(item["id"])
        raise RemoteError(f"no marketplace item {reference!r} (or it is not shared with you)")

    def item(self, reference: str, version: str | None = None) -> dict[str, Any]:
        found = self.client.execute(SHOW, {"id": self.item_id(reference), "version": version})
        if found["marketplaceItem"] is None:
            raise RemoteError(f"no marketplace item {reference!r} (or it is not shared with you)")
        return answer_object(found, "marketplaceItem")

    def publish(self, values: dict[str, Any]) -> dict[str, Any]:
        return answer_object(
            self.client.execute(PUBLISH, {"input": values}), "publishMarketplaceItem"
        )

    def use(self, values: dict[str, Any]) -> dict[str, Any]:
        return answer_object(self.client.execute(USE, {"input": values}), "useMarketplaceItem")

    def star(self, item_id: str, star: bool) -> dict[str, Any]:
        found = self.client.execute(STAR, {"id": item_id, "star": star})
        return answer_object(found, "starMarketplaceItem")


def _is_item_id(reference: str) -> bool:
    try:
        return parse_global_id(reference)[0] == "MarketplaceItem"
    except BadId:
        return False
