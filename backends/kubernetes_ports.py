"""The ports of each instance on Kubernetes, known before any pod exists.

Every instance's environment names the ports of all its peers, so ports are decided when the
attempt's objects are built, never by the cluster:

- On the pod network every pod has an IP of its own, so ports cannot clash between pods. Each
  instance gets its labels laid out one after the other from the start of the port range, in
  the order of `port_requests` (a v1 `beginAt` is used as written).
- On the node's network (`host_network`) pods of one node share its ports. Ports are hashed
  into the range as OpenPAI does (md5 of `[<pod>][<label>][<i>]`, three slices of the digest
  summed, modulo the range), with the pod's first name in place of its UID, which does not
  exist before the pod is made; every attempt has new pod names, hence new ports. A `beginAt`
  range is laid out per instance (`beginAt + index * count`), OpenPAI's sequential scheme. Two
  instances on one node can still meet on a port; the init container then reports the port in
  use, and the attempt is retried (a transient failure, exit 253 in OpenPAI).
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
