"""The Submit page's server side against a real `paigraph serve` whose simulated cluster has
no GPUs: convertJob converts the seeds' jobs whatever the cluster could run, resolveJob lists
every reason the cluster refuses one at its own field, and publishing a draft-dialect
template warns what using it converts."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.browser_support import Api, Site
from tests.corpus import seed_job
from tests.servers import served

pytestmark = pytest.mark.docker

CONVERT = """mutation($c: String!) { convertJob(input: {config: $c}) {
  config dialect errors { path code message } notes { path code message } } }"""
RESOLVE = """mutation($c: String!) { resolveJob(input: {config: $c}) {
  job { name } errors { path code message } } }"""
PUBLISH = """mutation($input: PublishMarketplaceItemInput!) {
  publishMarketplaceItem(input: $input) {
  item { id } errors { path message } warnings { path code message } } }"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A server on a simulated cluster that has no GPUs at all, said so in its settings."""
    folder = tmp_path_factory.mktemp("no-gpus")
    settings = folder / "simulator.yaml"
    settings.write_text("gpus_per_node: 0\nuse_host_gpus: false\n")
    with served("sqlite", folder) as server:
        server.settings["PAIGRAPH_SIMULATOR_CONFIG"] = str(settings)
        server.start()
        yield Site(server)


def refusals(api: Api, config: str) -> list[tuple[str, str]]:
    answer = api(RESOLVE, c=config)["resolveJob"]
    assert answer["job"] is None
    return [(".".join(e["path"]), e["message"]) for e in answer["errors"]]


@pytest.mark.shared("seeds")
def test_the_seed_job_converts_and_every_refusal_is_listed_at_its_field(site: Site) -> None:
    api = site.api(site.alice)
    draft = seed_job("000", "tensorflow_cifar10")
    converted = api(CONVERT, c=draft)["convertJob"]
    assert converted["dialect"] == "draft" and converted["errors"] == []
    config = converted["config"]
    found = refusals(api, config)
    # its hdfs storage is simulated now: on a cluster without GPUs, the GPUs are all it lacks
    assert [path for path, _ in found] == ["taskRoles.worker.resourcePerInstance.gpu"]
    assert "asks 4 gpus, but the cluster has no gpus" in found[0][1]
    # the same job as the seed writes it: the same refusal, in its own dialect's place
    assert [path for path, _ in refusals(api, draft)] == [
        "tasks.0.resource.resourcePerInstance.gpu"
    ]
    # fixing it leaves nothing to refuse
    doc = yaml.safe_load(config)
    doc["taskRoles"]["worker"]["resourcePerInstance"]["gpu"] = 0
    fixed = api(RESOLVE, c=yaml.safe_dump(doc, sort_keys=False))["resolveJob"]
    assert fixed["errors"] == [] and fixed["job"]["name"] == "tensorflow_cifar10"


@pytest.mark.shared("seeds")
def test_the_seed_v1_json_lists_its_virtual_cluster_and_the_rest(site: Site) -> None:
    api = site.api(site.alice)
    converted = api(CONVERT, c=seed_job("003", "tensorflow-distributed-jobguid", "js"))
    config = converted["convertJob"]["config"]
    paths = [path for path, _ in refusals(api, config)]
    assert paths[0] == "defaults.virtualCluster"
    assert "taskRoles.worker.resourcePerInstance.gpu" in paths


def test_publishing_a_draft_template_warns_what_using_it_converts(site: Site) -> None:
    api = site.api(site.bob)
    draft = textwrap.dedent(
        """\
        protocol_version: v2
        name: counted_template
        type: job
        version: 1.0.0
        parameters: {workers: 2}
        prerequisites:
          - {protocol_version: v2, name: box, type: dockerimage, uri: paigraph/busybox:test}
        tasks:
          - role: worker
            resource:
              instances: $$workers$$
              resourcePerInstance: {cpu: 1, memoryMB: 128, gpu: 0}
            command: [echo $$workers$$ workers]
        """
    )
    payload: dict[str, Any] = api(PUBLISH, input={"content": draft})["publishMarketplaceItem"]
    assert payload["errors"] == [] and payload["item"]
    messages = [w["message"] for w in payload["warnings"]]
    assert "written in the draft protocol (tasks list)" in messages[0]
    assert any("taskRoles.worker.instances" in m and "'workers'" in m for m in messages)
    v2 = textwrap.dedent(
        """\
        protocolVersion: 2
        name: plain_template
        type: job
        prerequisites: [{name: box, type: dockerimage, uri: paigraph/busybox:test}]
        taskRoles:
          main:
            dockerImage: box
            resourcePerInstance: {cpu: 1, memoryMB: 128, gpu: 0}
            commands: [echo plain]
        """
    )
    plain = api(PUBLISH, input={"content": v2})["publishMarketplaceItem"]
    assert plain["errors"] == [] and plain["warnings"] == []
