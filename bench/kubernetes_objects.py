"""How long building a job attempt's Kubernetes objects takes, and how big they get.

A ps/worker job of 1, then N workers: the CPU time of AttemptBuilder(...).objects() and the
size of the largest ConfigMap, Secret and Pod against the API's limits (1 MiB of data for a
ConfigMap or Secret, 1.5 MiB for any object). Prints figures; it asserts nothing.

    python bench/kubernetes_objects.py            # 100, 1000 and 5000 workers
    python bench/kubernetes_objects.py 1000 2000
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.base import LaunchRequest, PortRequest, ResourceRequest, RoleLaunch  # noqa: E402
from backends.kubernetes_manifests import AttemptBuilder  # noqa: E402
from backends.kubernetes_settings import KubernetesSettings  # noqa: E402


def job(workers: int) -> LaunchRequest:
    def role(name: str, instances: int) -> RoleLaunch:
        return RoleLaunch(
            name=name,
            instances=instances,
            image="busybox:1.36",
            resources=ResourceRequest(
                cpu=4, memory_mb=8192, gpu=1, shm_mb=1024, ports=[PortRequest(label="grpc")]
            ),
            commands=["python train.py --rank $PAI_TASK_INDEX"],
        )

    return LaunchRequest(
        job_id="bench-0a1b2c3d",
        job_name="bench",
        user="alice",
        roles=[role("ps", 1), role("worker", workers)],
        secrets={"token": "t"},
    )


def data_size(obj: dict) -> int:
    values = {**obj.get("data", {}), **obj.get("stringData", {})}
    return sum(len(k) + len(str(v).encode()) for k, v in values.items())


def measure(workers: int) -> None:
    settings = KubernetesSettings(state_dir=Path("/nonexistent"))
    request = job(workers)
    started = time.process_time()
    objects = AttemptBuilder(request, settings, "jobs").objects()
    seconds = time.process_time() - started
    maps = [o for o in objects.all() if o["kind"] in ("ConfigMap", "Secret")]
    largest = max(objects.all(), key=lambda o: len(json.dumps(o)))
    print(
        f"{workers + 1:>6} instances: {seconds:6.2f} s CPU, {len(objects.all())} objects; "
        f"largest ConfigMap/Secret data {max(data_size(o) for o in maps) / 1024:7.1f} KiB "
        f"(limit 1024), largest object {largest['kind']} "
        f"{len(json.dumps(largest)) / 1024:7.1f} KiB (limit 1536)"
    )


if __name__ == "__main__":
    for count in [int(a) for a in sys.argv[1:]] or [100, 1000, 5000]:
        measure(count - 1)
