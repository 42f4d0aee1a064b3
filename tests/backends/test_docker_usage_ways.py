"""Both ways the Docker backend measures a container, on a real container: its cgroup files
and Docker's streaming stats API tell the same memory, and the stream way works where the
cgroup files are not visible. Also the cgroup v2 layout (this machine runs v1), read from a
directory laid out as the kernel lays it out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from backends.base import InstanceKey
from backends.cgroup_usage import CgroupReader
from backends.docker_usage import DockerUsage, Watched
from backends.usage import UsageSample
from tests.simulated import IMAGE
from tests.waiting import until

MB = 1 << 20
KEY = InstanceKey(job_id="ways", attempt=1, role="main", index=0)


@pytest.fixture
def filled() -> Iterator[str]:
    """A running container holding 100 MB in its /dev/shm, limited to 256 MB."""
    client = docker.from_env()
    container = client.containers.run(
        IMAGE,
        ["sh", "-c", "dd if=/dev/zero of=/dev/shm/fill bs=1M count=100 && sleep 600"],
        detach=True,
        mem_limit="256m",
        shm_size="128m",
        labels={"paigraph.test": "usage-ways"},
    )
    try:
        yield container.id
    finally:
        container.remove(force=True)


def sampled(meter: DockerUsage, container_id: str) -> UsageSample:
    def full() -> UsageSample | None:
        found = meter.sample([Watched(KEY, container_id)])
        return found[0] if found and found[0].memory_bytes > 90 * MB else None

    return until(full, f"a {meter.method} sample of the filled container", timeout=60, every=1)


@pytest.mark.docker
def test_cgroup_files_and_the_stats_stream_tell_the_same_memory(filled: str) -> None:
    api = docker.from_env().api
    by_files = DockerUsage(api, "cgroup")
    by_stream = DockerUsage(api, "stream")
    try:
        from_files = sampled(by_files, filled)
        from_stream = sampled(by_stream, filled)
    finally:
        by_stream.close()

    assert "cgroup" in by_files.source() and "stream" in by_stream.source()
    for found in (from_files, from_stream):
        assert 90 * MB < found.memory_bytes < 160 * MB
        assert found.memory_limit_bytes == 256 * MB
        assert 0 <= found.cpu_cores < 0.5  # asleep
        assert found.gpu_utilization is None
    assert abs(from_files.memory_bytes - from_stream.memory_bytes) < 8 * MB


@pytest.mark.docker
def test_where_the_cgroup_files_are_not_visible_the_stream_measures(
    filled: str, tmp_path: Path
) -> None:
    elsewhere = CgroupReader(root=tmp_path / "cgroup", proc=tmp_path / "proc")  # sees nothing
    meter = DockerUsage(docker.from_env().api, "auto", cgroups=elsewhere)
    try:
        found = sampled(meter, filled)
    finally:
        meter.close()
    assert found.memory_limit_bytes == 256 * MB
    assert meter.source() == "Docker's streaming stats API"


def test_the_cgroup_v2_layout_is_read(tmp_path: Path) -> None:
    container = "c0ffee" * 10
    group = tmp_path / "cgroup" / "system.slice" / f"docker-{container}.scope"
    group.mkdir(parents=True)
    (tmp_path / "cgroup" / "cgroup.controllers").write_text("cpu memory io\n")
    (group / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
    (group / "memory.current").write_text(f"{300 * MB}\n")
    (group / "memory.max").write_text(f"{512 * MB}\n")
    (group / "memory.stat").write_text(f"anon {200 * MB}\ninactive_file {100 * MB}\n")
    proc = tmp_path / "proc" / "4242"
    (proc / "net").mkdir(parents=True)
    (proc / "cgroup").write_text(f"0::/system.slice/docker-{container}.scope\n")
    (proc / "net" / "dev").write_text(
        "Inter-|   Receive                            |  Transmit\n"
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets\n"
        "    lo:    999       9    0    0    0     0          0         0      999       9 0 0\n"
        "  eth0:   1200      12    0    0    0     0          0         0      3400      30 0 0\n"
    )
    reader = CgroupReader(root=tmp_path / "cgroup", proc=tmp_path / "proc")

    files = reader.find(container, 4242)
    assert files is not None and files.v2
    counters = reader.read(files)
    assert counters is not None
    assert counters.cpu_seconds == 2.5
    assert counters.memory_bytes == 200 * MB  # the inactive file cache is not counted
    assert counters.memory_limit_bytes == 512 * MB
    assert (counters.network_rx_bytes, counters.network_tx_bytes) == (1200, 3400)

    (group / "memory.max").write_text("max\n")
    unlimited = reader.read(files)
    assert unlimited is not None and unlimited.memory_limit_bytes is None
    assert reader.find("another" * 9, 4242) is None  # a process of another container
