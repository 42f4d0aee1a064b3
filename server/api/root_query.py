"""The Query fields about the graph as a whole rather than one domain: the server's version,
and `node`, which finds an object of any domain by its global ID.

`node` asks each domain for the types it owns (a MarketplaceItem of the marketplace, a Job or
User of the jobs), so this module imports the domains, and none of them imports it: like
`schema.py`, it sits above them.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import strawberry

from server.api.context import Info
from server.api.graph_types import Node
from server.api.ids import parse_global_id
from server.api.jobs.queries import job_or_user
from server.api.marketplace.types import marketplace_loaders
from server.marketplace.items import API_TYPE


def _version() -> str:
    try:
        return version("paigraph")
    except PackageNotFoundError:
        return "0+unknown"


@strawberry.type
class Query:
    @strawberry.field(description="The running paigraph version.")
    def version(self) -> str:
        return _version()

    @strawberry.field(
        description="The object with this global ID (a Job, a User or a MarketplaceItem), if any."
    )
    async def node(self, info: Info, id: strawberry.ID) -> Node | None:
        type_name, key = parse_global_id(id)
        if type_name == API_TYPE:
            return await marketplace_loaders(info).visible(key)
        return await job_or_user(info, id)
