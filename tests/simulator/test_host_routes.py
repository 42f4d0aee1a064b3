"""Job networks keep off the subnets the host already routes: another Docker engine's bridges
(a second engine on the machine, as the engine restart test starts) or a VPN's networks."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from simulator.host_routes import host_routes

# /proc/net/route as Linux writes it: addresses and masks in little-endian hex
ROUTES = """\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
docker0\t0000D50A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
br-3e2152ccf74a\t0001DE0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
tun0\t0000100A\t00000000\t0001\t0\t0\t0\t0000F0FF\t0\t0\t0
"""


def test_the_routes_of_the_host_are_read_without_the_default_one(tmp_path: Path) -> None:
    table = tmp_path / "route"
    table.write_text(ROUTES)
    assert host_routes(table) == [
        ipaddress.IPv4Network("10.213.0.0/24"),
        ipaddress.IPv4Network("10.222.1.0/24"),
        ipaddress.IPv4Network("10.16.0.0/12"),
    ]


def test_no_route_table_means_no_routes(tmp_path: Path) -> None:
    assert host_routes(tmp_path / "missing") == []
