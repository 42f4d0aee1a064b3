"""Each pytest-xdist worker's share of what tests running side by side on one machine would
otherwise race for: host ports and the names of Docker objects and databases.

pytest-xdist names its workers gw0, gw1, ... in PYTEST_XDIST_WORKER and says how many there are
in PYTEST_XDIST_WORKER_COUNT; a run without xdist is one worker, "main", with every share whole.
Host ports are laid out so that no two uses meet:

* SPARE_PORTS (10000-12999): ports the tests themselves hold or probe (the doctor's and the port
  allocator's tests);
* SERVER_PORTS (13000-14999): the ports test servers, registries and databases listen on
  (`tests.servers.free_port`);
* SIMULATOR_PORTS (15000-32767): the ports the simulator publishes instances on;
* Linux's ephemeral ports (32768 on) are left to outgoing connections and to what binds port 0.

Each worker takes one slice of each, so a worker's jobs never publish a port another worker's
test holds, two workers' simulators never pick the same port, and a port chosen for a server
cannot be taken by an outgoing connection or the other worker before the server listens on it.
"""

from __future__ import annotations

import os
import uuid

SPARE_PORTS = range(10000, 13000)
SERVER_PORTS = range(13000, 15000)
SIMULATOR_PORTS = range(15000, 32768)


def worker_name() -> str:
    """gw0, gw1, ... under pytest-xdist, else main."""
    return os.environ.get("PYTEST_XDIST_WORKER") or "main"


def worker_index() -> int:
    name = worker_name()
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


def worker_count() -> int:
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    return max(int(count), 1) if count.isdigit() else 1


def share(whole: range) -> range:
    """This worker's slice of `whole`: the workers' slices are disjoint and cover it."""
    count = worker_count()
    index = min(worker_index(), count - 1)
    size = len(whole) // count
    start = whole.start + index * size
    stop = whole.stop if index == count - 1 else start + size
    return range(start, stop)


def simulator_port_range() -> str:
    """This worker's simulator port range as the `port_range` setting spells it (end
    exclusive)."""
    ports = share(SIMULATOR_PORTS)
    return f"{ports.start}-{ports.stop}"


def unique_name(kind: str) -> str:
    """A name no other test and no other worker uses: `kind`, the worker and a random part
    (the worker is there so that leftovers say which run left them)."""
    return f"{kind}-{worker_name()}-{uuid.uuid4().hex[:8]}"
