"""The networks this host routes to, read from the kernel's routing table: a job network
must not be given one of them."""

from __future__ import annotations

import ipaddress
from pathlib import Path

ROUTES_FILE = Path("/proc/net/route")


def host_routes(table: Path = ROUTES_FILE) -> list[ipaddress.IPv4Network]:
    """The IPv4 networks this host routes to (the default route left out): the bridges of
    every Docker engine on the host (not only the one asked), a VPN's networks. A job network
    on one of them would make the host route its traffic to the wrong place."""
    try:
        lines = table.read_text().splitlines()[1:]
    except OSError:  # not Linux, or no /proc: the engine's own list is all there is
        return []
    routes = []
    for line in lines:
        fields = line.split()
        if len(fields) < 8:
            continue
        try:
            destination = ipaddress.IPv4Address(int(fields[1], 16).to_bytes(4, "little"))
            mask = ipaddress.IPv4Address(int(fields[7], 16).to_bytes(4, "little"))
            network = ipaddress.IPv4Network(f"{destination}/{mask}", strict=False)
        except ValueError:
            continue
        if network.prefixlen > 0:
            routes.append(network)
    return routes
