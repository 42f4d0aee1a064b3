"""The simulator's settings file: defaults, the ways to give it, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.fetch_policy import ALLOWED_NETWORKS_ENV, FetchPolicy
from simulator.settings import (
    CONFIG_ENV,
    STATE_ENV,
    Capacity,
    SettingsError,
    load_settings,
    settings_from_yaml,
)
from simulator.settings_example import example_settings_yaml


def test_defaults_are_a_small_gpu_cluster_one_vc_and_the_openpai_port_range(
    tmp_path: Path,
) -> None:
    s = load_settings(environ={"XDG_DATA_HOME": str(tmp_path)})
    assert [(n.name, n.cpu, n.memory_mb, n.gpu) for n in s.cluster_nodes] == [
        (f"node-{i}", 32, 262144, 8) for i in range(4)
    ]
    assert [(v.name, v.quota_of(s.total_capacity)) for v in s.virtual_clusters] == [
        ("default", Capacity(128, 4 * 262144, 32))
    ]
    assert (s.port_range.start, s.port_range.end) == (15000, 40000)
    assert s.state_dir == tmp_path / "paigraph" / "simulator"
    assert s.port_state_file == tmp_path / "paigraph" / "simulator" / "ports.json"
    assert (s.pids_limit, s.stop_grace_seconds, s.image_pull) == (1024, 10, False)
    assert s.allowed_file_roots == []


def test_state_dir_falls_back_to_local_share_and_the_env_variable_wins(tmp_path: Path) -> None:
    assert load_settings(environ={}).state_dir == Path.home() / ".local/share/paigraph/simulator"
    file = tmp_path / "sim.yaml"
    file.write_text("state_dir: from-file\n")
    assert load_settings(file, environ={}).state_dir == tmp_path / "from-file"
    env = {STATE_ENV: str(tmp_path / "from-env")}
    assert load_settings(file, environ=env).state_dir == tmp_path / "from-env"


def test_fetch_allow_list_from_the_file_or_the_environment(tmp_path: Path) -> None:
    assert load_settings(environ={}).fetch_policy == FetchPolicy()  # public addresses only
    file = tmp_path / "sim.yaml"
    file.write_text("allowed_fetch_networks: [10.0.0.0/8, minio.lan]\n")
    from_file = FetchPolicy.parse(["10.0.0.0/8", "minio.lan"])
    assert load_settings(file, environ={}).fetch_policy == from_file
    env = {ALLOWED_NETWORKS_ENV: "127.0.0.1, ::1"}
    assert load_settings(file, environ=env).fetch_policy == FetchPolicy.parse("127.0.0.1,::1")


def test_the_file_comes_from_the_argument_or_the_environment(tmp_path: Path) -> None:
    by_env = tmp_path / "env.yaml"
    by_env.write_text("node_count: 2\n")
    by_arg = tmp_path / "arg.yaml"
    by_arg.write_text("node_count: 3\n")
    assert len(load_settings(environ={CONFIG_ENV: str(by_env)}).cluster_nodes) == 2
    assert len(load_settings(by_arg, environ={CONFIG_ENV: str(by_env)}).cluster_nodes) == 3


def test_node_list_virtual_clusters_and_port_range_text(tmp_path: Path) -> None:
    file = tmp_path / "sim.yaml"
    file.write_text(
        """
nodes:
  - {name: big, cpu: 32, memory_mb: 131072, gpu: 4}
  - {name: small, cpu: 8, memory_mb: 16384}
gpus_per_node: 1
virtual_clusters:
  - {name: prod, share: 50}
  - {name: dev, cpu: 8, memory_mb: 8192}
port_range: 20000-20100
allowed_file_roots: [data, /srv/shared]
"""
    )
    s = load_settings(file, environ={})
    assert [(n.name, n.gpu) for n in s.cluster_nodes] == [("big", 4), ("small", 1)]
    total = s.total_capacity
    assert total == Capacity(40, 147456, 5)
    assert [v.quota_of(total) for v in s.virtual_clusters] == [
        Capacity(20, 73728, 2),
        Capacity(8, 8192, 0),
    ]
    assert (s.port_range.start, s.port_range.end) == (20000, 20100)
    assert s.allowed_file_roots == [tmp_path / "data", Path("/srv/shared")]


@pytest.mark.parametrize(
    ("text", "where", "says"),
    [
        ("nodes: [{name: a, cpus: 2, memory_mb: 4}]", "nodes[0].cpus", "unknown setting"),
        ("nodes: [{name: a, cpu: 0, memory_mb: 4}]", "nodes[0].cpu", "greater than or equal to 1"),
        ("node: {cpu: many}", "node.cpu", "valid integer"),
        ("nodes: [{name: 'a b', cpu: 1, memory_mb: 1}]", "nodes[0].name", "not a valid name"),
        (
            "nodes: [{name: a, cpu: 1, memory_mb: 1}, {name: a, cpu: 1, memory_mb: 1}]",
            "nodes",
            "node name 'a' is used twice",
        ),
        (
            "node_count: 2\nnodes: [{name: a, cpu: 1, memory_mb: 1}]",
            "nodes",
            "not both (node_count is set too)",
        ),
        ("virtual_clusters: [{name: a, share: 150}]", "virtual_clusters[0].share", "100"),
        (
            "virtual_clusters: [{name: a, share: 10, cpu: 2}]",
            "virtual_clusters[0]",
            "either share or absolute",
        ),
        (
            "virtual_clusters: [{name: a, cpu: 2}]",
            "virtual_clusters[0]",
            "missing memory_mb",
        ),
        (
            "virtual_clusters: [{name: a, share: 60}, {name: b, share: 50}]",
            "virtual_clusters",
            "the shares add up to 110%",
        ),
        (
            "virtual_clusters: [{name: a, cpu: 129, memory_mb: 1}]",
            "virtual_clusters",
            "the quotas add up to 129 cpu, more than the 128 cpu of all nodes",
        ),
        ("port_range: 40000-15000", "port_range", "end (15000) must be greater than start"),
        ("port_range: lots", "port_range", "write it as 'start-end'"),
        ("port_range: {start: 0, end: 10}", "port_range.start", "greater than or equal to 1"),
        ("pids_limit: 2", "pids_limit", "greater than or equal to 16"),
        ("stop_grace_seconds: -1", "stop_grace_seconds", "greater than or equal to 0"),
        ("image_pull: sometimes", "image_pull", "valid boolean"),
        ("gpu_per_node: 2", "gpu_per_node", "known here: nodes, node_count"),
        (
            "allowed_fetch_networks: [10.1.0.0/8]",
            "allowed_fetch_networks",
            "'10.1.0.0/8' is not a network: 10.1.0.0/8 has host bits set",
        ),
    ],
)
def test_errors_name_the_setting_and_the_rule(text: str, where: str, says: str) -> None:
    with pytest.raises(SettingsError) as caught:
        settings_from_yaml(text, source="sim.yaml", environ={})
    paths = [p for p, _ in caught.value.problems]
    assert where in paths, caught.value
    message = dict(caught.value.problems)[where]
    assert says in message
    assert str(caught.value).startswith("invalid simulator settings in sim.yaml:")


def test_file_level_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(SettingsError, match=r"does not exist") as caught:
        load_settings(environ={CONFIG_ENV: str(missing)})
    assert CONFIG_ENV in str(caught.value)
    with pytest.raises(SettingsError, match=r"not valid YAML at line 2, column 14"):
        settings_from_yaml("node_count: 2\nnode: {cpu: 1]\n", environ={})
    with pytest.raises(SettingsError, match=r"must be a mapping of settings, not a list"):
        settings_from_yaml("- node_count\n", environ={})
    assert len(settings_from_yaml("", environ={}).cluster_nodes) == 4


def test_the_example_file_spells_out_the_defaults() -> None:
    env = {STATE_ENV: "/tmp/paigraph-example-state"}
    assert settings_from_yaml(example_settings_yaml(), environ=env) == load_settings(environ=env)
