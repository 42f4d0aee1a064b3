"""What Kubernetes instances use, read from the cluster's metrics API (metrics.k8s.io
PodMetrics) as the fake API server (tests/fake_kube_api.py) serves it, and what is said when
the cluster serves none."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.base import EventKind
from backends.kubernetes_usage import NO_METRICS_API, SOURCE, quantity
from backends.usage import SamplesUsage
from tests.backends import test_kubernetes_fake_cluster
from tests.backends.test_kubernetes_fake_cluster import (
    Events,
    backend_on,
    key,
    pod_of,
    ps_worker,
)
from tests.fake_kube_api import FakeKubeAPI

pytestmark = pytest.mark.anyio
MI = 1 << 20
api = test_kubernetes_fake_cluster.api  # the fake API server, checked against the deployed Role


async def test_running_pods_are_measured_from_the_metrics_api_and_others_not(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    request = ps_worker()
    async with backend_on(api, tmp_path) as backend:
        assert isinstance(backend, SamplesUsage)
        events = Events(backend)
        await backend.launch(request)
        api.wait_for_pods(3)
        for host in ("ps-0", "worker-0", "worker-1"):
            api.schedule(pod_of(api, host))
        for host in ("ps-0", "worker-0"):
            api.run(pod_of(api, host))
        await events.until(lambda: len(events.of(EventKind.STARTED)) == 2)

        assert await backend.sample_usage() == []
        assert backend.usage_source() == NO_METRICS_API

        api.pod_metrics(pod_of(api, "ps-0"), "250m", "100Mi")
        api.pod_metrics(pod_of(api, "worker-0"), "1500000000n", "64Mi")
        api.pod_metrics(pod_of(api, "worker-0"), "500m", "1Gi", container="sidecar")
        api.pod_metrics(pod_of(api, "worker-1"), "1", "1Mi")  # not running: not measured
        samples = {s.key: s for s in await backend.sample_usage()}

        assert backend.usage_source() == SOURCE
        assert set(samples) == {key(request, "ps", 0), key(request, "worker", 0)}
        ps, worker = samples[key(request, "ps", 0)], samples[key(request, "worker", 0)]
        assert (ps.cpu_cores, ps.memory_bytes) == (0.25, 100 * MI)
        assert ps.memory_limit_bytes == 256 * MI  # what the role asked for
        assert (worker.cpu_cores, worker.memory_bytes) == (2.0, 64 * MI + 1024 * MI)
        assert worker.network_rx_bytes == 0 and worker.gpu_utilization is None
        events.close()


def test_quantities_are_read_as_kubernetes_writes_them() -> None:
    assert quantity("250m") == 0.25
    assert quantity("12345n") == pytest.approx(12345e-9)
    assert quantity("3") == 3
    assert quantity("100Mi") == 100 * MI
    assert quantity("1.5G") == 1.5e9
    assert quantity("2Ki") == 2048
    with pytest.raises(ValueError, match="'12 cores' is not a Kubernetes quantity"):
        quantity("12 cores")
