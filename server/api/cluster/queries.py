"""The cluster's Query fields: its nodes with their capacity and use, and the virtual clusters
the backend offers."""

from __future__ import annotations

import strawberry

from server.api.cluster import types as cluster_view
from server.api.cluster.types import Cluster, VirtualCluster
from server.api.context import Info


@strawberry.type
class Query:
    @strawberry.field(description="The virtual clusters the backend offers and the viewer's.")
    async def virtual_clusters(self, info: Info) -> list[VirtualCluster]:
        return await cluster_view.virtual_clusters(info)

    @strawberry.field(description="The backend's nodes and their capacity.")
    async def cluster(self, info: Info) -> Cluster:
        return await cluster_view.cluster(info)
