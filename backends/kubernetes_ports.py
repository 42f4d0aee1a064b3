"""The ports of each instance on Kubernetes, known before any pod exists.

Every instance's environment names its peers' ports, so the ports are decided when the
attempt's objects are built, never by the cluster: laid out from the range's start on the pod
network, hashed as OpenPAI does with `host_network` (docs/kubernetes.md, Settings).
"""

from __future__ import annotations

import hashlib

from backends.base import RoleLaunch
from backends.kubernetes_settings import PortRange
from backends.runtime_env import port_requests


def hashed_port(pod: str, label: str, i: int, port_range: PortRange) -> int:
    """OpenPAI's `generate_hashed_ports_num` for one port."""
    digest = hashlib.md5(f"[{pod}][{label}][{i}]".encode()).hexdigest()
    value = int(digest[0:12], 16) + int(digest[12:24], 16) + int(digest[24:32], 16)
    return value % (port_range.end - port_range.start) + port_range.start


def instance_ports(
    role: RoleLaunch, index: int, pod: str, port_range: PortRange, *, host_network: bool
) -> dict[str, list[int]]:
    """label -> ports of instance `index` of `role`, whose first pod is called `pod`."""
    wanted = port_requests(role)
    if host_network:
        return {
            p.label: (
                [p.begin_at + index * p.count + i for i in range(p.count)]
                if p.begin_at
                else [hashed_port(pod, p.label, i, port_range) for i in range(p.count)]
            )
            for p in wanted
        }
    fixed = {p.begin_at + i for p in wanted if p.begin_at for i in range(p.count)}
    ports: dict[str, list[int]] = {}
    cursor = port_range.start
    for p in wanted:
        if p.begin_at:
            ports[p.label] = [p.begin_at + i for i in range(p.count)]
            continue
        chosen: list[int] = []
        while len(chosen) < p.count:
            if cursor not in fixed:
                chosen.append(cursor)
            cursor += 1
        ports[p.label] = chosen
    return ports


def duplicates(ports: dict[str, list[int]]) -> list[int]:
    """Ports given more than once to one instance (possible only when hashed)."""
    seen: set[int] = set()
    twice: list[int] = []
    for group in ports.values():
        for port in group:
            if port in seen and port not in twice:
                twice.append(port)
            seen.add(port)
    return twice
