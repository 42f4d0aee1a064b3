"""A container's counters read straight from the kernel, with no call to the Docker engine.

Reading its cgroup files (v1 or v2) and its init process's network devices is far cheaper than
the engine's stats API, but works only where this process sees the host's /sys/fs/cgroup and
process table, which `CgroupReader.find` checks per container (docs/metrics.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_ROOT = Path("/proc")
_NO_LIMIT = 1 << 60  # v1 says "no limit" with a page-rounded 2**63 - 1


@dataclass(frozen=True)
class Counters:
    """Totals since the container started (cpu, network) and memory now."""

    cpu_seconds: float
    memory_bytes: int
    memory_limit_bytes: int | None
    network_rx_bytes: int
    network_tx_bytes: int


@dataclass(frozen=True)
class CgroupFiles:
    """Where one container's figures are: v2 has one directory, v1 one per controller."""

    pid: int
    cpu_dir: Path
    memory_dir: Path
    v2: bool


class CgroupReader:
    """Reads containers' counters under `root` (the cgroup mount) and `proc`."""

    def __init__(self, root: Path = CGROUP_ROOT, proc: Path = PROC_ROOT) -> None:
        self.root = root
        self.proc = proc

    def find(self, container_id: str, pid: int) -> CgroupFiles | None:
        """The files of the container whose init process is `pid` (as the engine reports it),
        or None when this process cannot see them (another pid namespace, another host)."""
        try:
            lines = (self.proc / str(pid) / "cgroup").read_text().splitlines()
        except OSError:
            return None
        paths: dict[str, str] = {}
        for line in lines:
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path.lstrip("/")
        if not any(container_id in p for p in paths.values()):
            return None
        if (self.root / "cgroup.controllers").exists() and "" in paths:
            directory = self.root / paths[""]
            files = CgroupFiles(pid, directory, directory, v2=True)
            needed = [directory / "cpu.stat", directory / "memory.current"]
        elif "cpuacct" in paths and "memory" in paths:
            cpu = _v1_mount(self.root, "cpuacct") / paths["cpuacct"]
            memory = self.root / "memory" / paths["memory"]
            files = CgroupFiles(pid, cpu, memory, v2=False)
            needed = [cpu / "cpuacct.usage", memory / "memory.usage_in_bytes"]
        else:
            return None
        return files if all(p.exists() for p in needed) else None

    def read(self, files: CgroupFiles) -> Counters | None:
        """The container's counters now; None once it is gone."""
        try:
            if files.v2:
                cpu = _key_values(files.cpu_dir / "cpu.stat")["usage_usec"] / 1e6
                charged = int((files.memory_dir / "memory.current").read_text())
                limit_text = (files.memory_dir / "memory.max").read_text().strip()
                limit = None if limit_text == "max" else int(limit_text)
                inactive = _key_values(files.memory_dir / "memory.stat").get("inactive_file", 0)
            else:
                cpu = int((files.cpu_dir / "cpuacct.usage").read_text()) / 1e9
                charged = int((files.memory_dir / "memory.usage_in_bytes").read_text())
                limit = int((files.memory_dir / "memory.limit_in_bytes").read_text())
                limit = None if limit >= _NO_LIMIT else limit
                stat = _key_values(files.memory_dir / "memory.stat")
                inactive = stat.get("total_inactive_file", 0)
            rx, tx = network_totals((self.proc / str(files.pid) / "net" / "dev").read_text())
        except (OSError, ValueError, KeyError):
            return None
        return Counters(cpu, max(charged - inactive, 0), limit, rx, tx)


def _v1_mount(root: Path, controller: str) -> Path:
    """v1 mounts cpuacct alone or joined with cpu ("cpu,cpuacct")."""
    for name in (controller, "cpu,cpuacct", "cpuacct,cpu"):
        if (root / name).is_dir():
            return root / name
    return root / controller


def _key_values(path: Path) -> dict[str, int]:
    values = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            values[key] = int(value)
    return values


def network_totals(net_dev: str) -> tuple[int, int]:
    """Bytes received and sent over every interface but loopback, from /proc/<pid>/net/dev."""
    rx = tx = 0
    for line in net_dev.splitlines()[2:]:
        name, _, figures = line.partition(":")
        fields = figures.split()
        if name.strip() == "lo" or len(fields) < 9:
            continue
        rx += int(fields[0])
        tx += int(fields[8])
    return rx, tx
