"""The cluster's nodes as the cluster page shows them: what is allocated on each (the
backend's accounting, where it keeps one) and what its instances use now (the sampler's
latest round). Admins see every node; others the nodes that run instances of their own jobs.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

import strawberry

from server.api.context import Info
from server.api.usage_source import SIMULATED_GPUS
from server.app.usage_sampler import LiveUsage


@strawberry.type(
    description="A node's allocation and what its instances use now. Allocation and capacity "
    "are null where the backend keeps no accounting of them."
)
class NodeUsage:
    name: str
    cpu_capacity: int | None
    cpu_allocated: int | None = strawberry.field(
        description="Cores held by instances placed on it."
    )
    cpu_used_cores: float = strawberry.field(description="Cores its instances use now.")
    memory_capacity_bytes: float | None
    memory_allocated_bytes: float | None
    memory_used_bytes: float
    gpus: int | None = strawberry.field(description="GPUs the node has.")
    gpus_allocated: list[int] = strawberry.field(description="Indices held by instances.")
    gpus_real: bool = strawberry.field(description="False: the node's GPUs are simulated.")
    gpu_utilization: float | None = strawberry.field(
        description="Mean utilization of its instances' real GPUs (null when simulated or "
        "not measured)."
    )
    gpu_note: str | None = strawberry.field(description='"simulated: no utilization", or null.')
    instances: int = strawberry.field(description="Instances measured on it now.")


async def nodes_usage(info: Info) -> list[NodeUsage]:
    context = info.context
    runtime = context.runtime
    viewer = context.viewer
    latest = dict(runtime.usage.latest) if runtime.usage is not None else {}
    store = context.store
    accounting = getattr(runtime.backend, "cluster", None)
    usage_of_cluster = getattr(accounting, "usage", None)

    def read() -> tuple[dict[str, list[LiveUsage]], set[str], Any]:
        job_ids = {key.job_id for key in latest}
        by_instance = {(k.job_id, k.attempt, k.role, k.index): u for k, u in latest.items()}
        jobs = store.jobs_by_ids(job_ids)
        instances = store.instances_for_jobs(job_ids)
        nodes: dict[str, list[LiveUsage]] = defaultdict(list)
        own: set[str] = set()
        for job_id, found in instances.items():
            for i in found:
                live = by_instance.get((job_id, i.attempt, i.role, i.index))
                if live is None or i.node is None:
                    continue
                nodes[i.node].append(live)
                job = jobs.get(job_id)
                if job is not None and job.owner_id == viewer.id:
                    own.add(i.node)
        allocation = usage_of_cluster() if callable(usage_of_cluster) else None
        return nodes, own, allocation

    measured, own, allocation = await asyncio.to_thread(read)
    result = []
    accounted = {n.name: n for n in (allocation.nodes if allocation is not None else ())}
    for name in sorted(set(accounted) | set(measured)):
        if not viewer.admin and name not in own:
            continue
        result.append(_node(name, accounted.get(name), measured.get(name, [])))
    return result


def _node(name: str, accounted: Any, live: list[LiveUsage]) -> NodeUsage:
    gpu_values = [u.sample.gpu_utilization for u in live if u.sample.gpu_utilization is not None]
    real = bool(accounted.real_gpus) if accounted is not None else bool(gpu_values)
    gpus_used = list(accounted.gpus_used) if accounted is not None else []
    return NodeUsage(
        name=name,
        cpu_capacity=accounted.capacity.cpu if accounted is not None else None,
        cpu_allocated=accounted.used.cpu if accounted is not None else None,
        cpu_used_cores=sum(u.sample.cpu_cores for u in live),
        memory_capacity_bytes=(
            float(accounted.capacity.memory_mb << 20) if accounted is not None else None
        ),
        memory_allocated_bytes=(
            float(accounted.used.memory_mb << 20) if accounted is not None else None
        ),
        memory_used_bytes=float(sum(u.sample.memory_bytes for u in live)),
        gpus=accounted.capacity.gpu if accounted is not None else None,
        gpus_allocated=gpus_used,
        gpus_real=real,
        gpu_utilization=sum(gpu_values) / len(gpu_values) if gpu_values else None,
        gpu_note=SIMULATED_GPUS if accounted is not None and gpus_used and not real else None,
        instances=len(live),
    )
