"""What the cluster offers: nodes and virtual clusters with their capacity, as far as the
backend tells. The Backend interface has no such call; a backend that keeps an accounting of
its capacity (the simulator's `cluster.usage()`) is read, any other shows names only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

import strawberry

from server.api.cluster.node_usage import NodeUsage
from server.api.context import Info, Runtime
from server.api.usage_source import source_of


class _Amount(Protocol):
    cpu: int
    memory_mb: int
    gpu: int


class _NodeUsage(Protocol):
    name: str
    capacity: Any
    used: Any
    free: Any
    instances: int


class _VcUsage(Protocol):
    name: str
    quota: Any
    used: Any
    free: Any
    instances: int


class _Usage(Protocol):
    nodes: Sequence[_NodeUsage]
    vcs: Sequence[_VcUsage]


@strawberry.type(description="An amount of each schedulable resource.")
class Capacity:
    cpu: int
    memory_mb: int = strawberry.field(name="memoryMB")
    gpu: int

    @classmethod
    def of(cls, amount: _Amount) -> Capacity:
        return cls(cpu=amount.cpu, memory_mb=amount.memory_mb, gpu=amount.gpu)


@strawberry.type
class ClusterNode:
    name: str
    capacity: Capacity
    used: Capacity
    free: Capacity
    instances: int = strawberry.field(description="Task instances placed on the node now.")


@strawberry.type(description="A share of the cluster that jobs are submitted to.")
class VirtualCluster:
    name: str
    can_submit: bool = strawberry.field(
        description="Whether the viewer may submit to it: admins to any, others to those "
        "they are members of."
    )
    quota: Capacity | None = strawberry.field(description="Null when the backend does not say.")
    used: Capacity | None
    free: Capacity | None
    instances: int | None = strawberry.field(description="Task instances it runs now.")


@strawberry.type
class Cluster:
    backend: str | None = strawberry.field(
        description="The backend jobs run on (`docker`: the local simulator); null when this "
        "server runs none and only shows stored jobs."
    )
    nodes: list[ClusterNode] = strawberry.field(
        description="The backend's nodes with capacity and use; empty when it does not say."
    )

    @strawberry.field(
        description="Each node's allocation and what its instances use now (measured every "
        "few seconds). Admins see every node; others the nodes running their own jobs."
    )
    async def usage(self, info: Info) -> list[NodeUsage]:
        from server.api.cluster.node_usage import nodes_usage

        return await nodes_usage(info)

    @strawberry.field(description="How the use of instances is measured, or why it is not.")
    def usage_source(self, info: Info) -> str:
        return source_of(info.context.runtime)


async def _usage(runtime: Runtime) -> _Usage | None:
    accounting = getattr(runtime.backend, "cluster", None)
    usage = getattr(accounting, "usage", None)
    if not callable(usage):
        return None
    return await asyncio.to_thread(usage)


async def cluster(info: Info) -> Cluster:
    runtime = info.context.runtime
    usage = await _usage(runtime)
    nodes = [
        ClusterNode(
            name=n.name,
            capacity=Capacity.of(n.capacity),
            used=Capacity.of(n.used),
            free=Capacity.of(n.free),
            instances=n.instances,
        )
        for n in (usage.nodes if usage else ())
    ]
    return Cluster(backend=runtime.backend_name, nodes=nodes)


async def virtual_clusters(info: Info) -> list[VirtualCluster]:
    context = info.context
    viewer = context.viewer
    usage = await _usage(context.runtime)
    memberships = set(await asyncio.to_thread(context.store.user_vcs, viewer.id))
    result = [
        VirtualCluster(
            name=vc.name,
            can_submit=viewer.admin or vc.name in memberships,
            quota=Capacity.of(vc.quota),
            used=Capacity.of(vc.used),
            free=Capacity.of(vc.free),
            instances=vc.instances,
        )
        for vc in (usage.vcs if usage else ())
    ]
    known = {vc.name for vc in result}
    result += [
        VirtualCluster(name=name, can_submit=True, quota=None, used=None, free=None, instances=None)
        for name in sorted(memberships - known)
    ]
    return result
