"""An instance killed for its memory is told as such, even when Docker's flag misses it."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import docker
import pytest

from simulator.containers import ContainerInfo, Engine
from simulator.oom_kills import KILLED_EXIT_CODE, killed_for_memory
from tests.simulated import IMAGE

pytestmark = pytest.mark.docker


@dataclass(frozen=True)
class Containers:
    """Runs containers to their end under a label of this test's own."""

    engine: Engine
    labels: dict[str, str]

    def ended(self, command: str, kill: bool = False) -> ContainerInfo:
        container = self.engine.client.containers.run(
            IMAGE,
            ["/bin/sh", "-c", command],
            labels=self.labels,
            mem_limit="32m",
            memswap_limit="32m",
            detach=True,
        )
        if kill:
            container.kill()  # SIGKILL from outside: exit 137 with memory to spare
        container.wait(timeout=60)
        assert container.id is not None
        info = self.engine.inspect(container.id)
        assert info is not None
        return info


@pytest.fixture
def containers() -> Iterator[Containers]:
    engine = Engine()
    labels = {"paigraph-oom-kills-test": uuid.uuid4().hex[:8]}
    yield Containers(engine, labels)
    label = "=".join(*labels.items())
    for container in engine.client.containers.list(all=True, filters={"label": label}):
        container.remove(force=True)


def test_a_container_over_its_memory_is_killed_for_memory_even_without_dockers_flag(
    containers: Containers,
) -> None:
    info = containers.ended("dd if=/dev/zero of=/dev/null bs=200M count=1")
    assert info.exit_code == KILLED_EXIT_CODE
    api = containers.engine.api
    assert killed_for_memory(api, info)
    # the engine's own flag lost, as when containerd tells the exit first: the oom event tells it
    assert killed_for_memory(api, dataclasses.replace(info, oom_killed=False))


def test_a_container_killed_from_outside_or_failing_was_not_killed_for_memory(
    containers: Containers,
) -> None:
    killed = containers.ended("sleep 60", kill=True)
    assert (killed.exit_code, killed.oom_killed) == (KILLED_EXIT_CODE, False)
    assert not killed_for_memory(containers.engine.api, killed)
    failed = containers.ended("exit 3")
    assert not killed_for_memory(containers.engine.api, failed)


def test_an_engine_that_does_not_answer_leaves_dockers_flag_as_the_answer(
    containers: Containers,
) -> None:
    killed = containers.ended("sleep 60", kill=True)
    away = docker.APIClient(base_url="unix:///nonexistent/docker.sock", version="1.41")
    assert not killed_for_memory(away, killed)
    assert killed_for_memory(away, dataclasses.replace(killed, oom_killed=True))
