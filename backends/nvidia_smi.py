"""GPU figures of the host's real NVIDIA GPUs, read with `nvidia-smi --query-gpu`.

The parsing is apart from running the program so it can be checked on recorded output: no
GPU is needed to test it. A GPU whose figure nvidia-smi cannot give ("[N/A]", "[Not
Supported]") is left out rather than shown as idle.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

QUERY = ["--query-gpu=index,utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class GpuUse:
    index: int
    utilization: float  # 0.0 to 1.0
    memory_bytes: int


def parse_query(output: str) -> dict[int, GpuUse]:
    """Each GPU of `nvidia-smi --query-gpu=index,utilization.gpu,memory.used
    --format=csv,noheader,nounits` output by index (utilization in percent, memory in MiB)."""
    found: dict[int, GpuUse] = {}
    for line in output.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 3:
            continue
        try:
            index, percent, mib = int(fields[0]), float(fields[1]), float(fields[2])
        except ValueError:
            continue  # "[N/A]", "[Not Supported]", a warning line
        found[index] = GpuUse(index, max(0.0, min(percent, 100.0)) / 100.0, int(mib * (1 << 20)))
    return found


def query_gpus(program: str = "nvidia-smi") -> dict[int, GpuUse]:
    """The host's GPUs as nvidia-smi reports them now; empty when it is missing or fails."""
    path = shutil.which(program)
    if path is None:
        return {}
    try:
        done = subprocess.run(
            [path, *QUERY], capture_output=True, text=True, timeout=_TIMEOUT_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_query(done.stdout) if done.returncode == 0 else {}


def instance_gpu_use(
    gpus: dict[int, GpuUse], indices: tuple[int, ...]
) -> tuple[float | None, int | None]:
    """(mean utilization, summed memory) of an instance's GPUs; (None, None) when nvidia-smi
    told nothing of any of them."""
    seen = [gpus[i] for i in indices if i in gpus]
    if not seen:
        return None, None
    return sum(g.utilization for g in seen) / len(seen), sum(g.memory_bytes for g in seen)
