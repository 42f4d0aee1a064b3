"""The simulated HDFS's trees on their own: where a URI lands, whose it is, its bound."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from simulator.dfs import DfsError, DfsFull, DfsNotFound, FileSystems, authority_of, parse
from simulator.prereqs import MaterialKind, MaterialStore, Simulated, UnservableMaterial


@pytest.fixture
def systems(tmp_path: Path) -> FileSystems:
    return FileSystems(tmp_path / "dfs", default_authority="paigraph-dfs:9000", max_bytes=1000)


@pytest.mark.parametrize(
    ("uri", "authority", "path"),
    [
        (
            "hdfs://10.151.40.179:9000/core/cifar10_model",
            "10.151.40.179:9000",
            "/core/cifar10_model",
        ),
        ("hdfs://NameNode:9000/a/./b//c/", "namenode:9000", "/a/b/c"),
        ("hdfs:///data/x", "paigraph-dfs:9000", "/data/x"),
        ("/data/x/../y", "paigraph-dfs:9000", "/data/y"),
        ("hdfs://nn", "nn", "/"),
    ],
)
def test_a_uri_names_a_file_system_and_a_path_in_it(uri: str, authority: str, path: str) -> None:
    found = parse(uri, "paigraph-dfs:9000")
    assert (found.authority, found.path) == (authority, path)


@pytest.mark.parametrize(
    ("uri", "says"),
    [
        ("hdfs://nn:9000/../../etc", "climbs above the root"),
        ("relative/path", "neither an hdfs:// URI nor an absolute path"),
        ("hdfs://bad host:9000/x", "names no file system host"),
        ("hdfs://nn:99999/x", "is not a port number"),
    ],
)
def test_a_uri_that_names_no_place_in_a_tree_is_refused(uri: str, says: str) -> None:
    with pytest.raises(DfsError, match=says):
        parse(uri, "paigraph-dfs:9000")


def test_the_default_file_system_setting_must_be_an_hdfs_uri() -> None:
    assert authority_of("hdfs://paigraph-dfs:9000") == "paigraph-dfs:9000"
    with pytest.raises(DfsError):
        authority_of("s3://bucket")


def test_each_user_has_their_own_tree_of_one_file_system(systems: FileSystems) -> None:
    systems.write("alice", "hdfs://nn:9000/models/a.bin", b"alice's")
    assert systems.read("alice", "hdfs://nn:9000/models/a.bin", length=100) == (b"alice's", 7)
    with pytest.raises(DfsNotFound):
        systems.read("bob", "hdfs://nn:9000/models/a.bin", length=100)
    assert systems.list("bob", "hdfs://nn:9000/") == []
    (entry,) = systems.list("alice", "hdfs://nn:9000/models")
    assert (entry.uri, entry.directory, entry.size) == ("hdfs://nn:9000/models/a.bin", False, 7)


def test_a_write_past_the_bound_is_refused_naming_the_setting(systems: FileSystems) -> None:
    systems.write("alice", "/a", b"x" * 600)
    with pytest.raises(DfsFull, match="dfs_max_mb"):
        systems.write("alice", "/b", b"x" * 600)
    systems.write("alice", "/a", b"y" * 900, overwrite=True)  # replacing counts the difference
    systems.write("bob", "/b", b"x" * 600)  # another user's tree has its own bound
    with pytest.raises(DfsFull):
        systems.write("alice", "/a", b"z" * 200, append=True)


def test_nothing_is_overwritten_or_removed_unasked(systems: FileSystems) -> None:
    systems.write("alice", "/d/f", b"1")
    with pytest.raises(DfsError, match="exists"):
        systems.write("alice", "/d/f", b"2")
    with pytest.raises(DfsError, match="not empty"):
        systems.remove("alice", "/d")
    with pytest.raises(DfsError, match="root"):
        systems.remove("alice", "/", recursive=True)
    systems.remove("alice", "/d", recursive=True)
    assert systems.list("alice", "/") == []


def test_a_symlink_a_job_left_in_its_tree_is_never_followed(
    systems: FileSystems, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("host file")
    systems.mkdir("alice", "/d")
    os.symlink(secret, systems.resolve("alice", "/d") / "link")
    os.symlink(tmp_path, systems.resolve("alice", "/d") / "dir")
    with pytest.raises(DfsError, match="symbolic link"):
        systems.read("alice", "/d/link", length=100)
    with pytest.raises(DfsError, match="symbolic link"):
        systems.list("alice", "/d/dir")
    assert [e.name for e in systems.list("alice", "/d")] == []


def test_the_material_store_serves_hdfs_and_node_paths_from_the_users_own_folders(
    tmp_path: Path, systems: FileSystems
) -> None:
    store = MaterialStore(
        tmp_path / "cache",
        storage_dir=tmp_path / "storage",
        dfs=systems,
        node_dir=tmp_path / "nodes",
    )
    systems.write("alice", "hdfs://nn:9000/data/x.txt", b"data")
    data = store.materialize(
        "d", MaterialKind.DOWNLOAD, ["hdfs://nn:9000/data/x.txt"], owner="alice"
    )
    assert (data.host_path / "x.txt").read_text() == "data"
    with pytest.raises(Exception, match="paigraph fs put"):
        store.materialize("d", MaterialKind.DOWNLOAD, ["hdfs://nn:9000/data/x.txt"], owner="bob")
    out = store.materialize("o", MaterialKind.MOUNT, ["hdfs://nn:9000/out"], owner="alice")
    assert out.host_path == systems.resolve("alice", "hdfs://nn:9000/out") and not out.read_only
    node = store.materialize("o", MaterialKind.MOUNT, ["/mnt/out/../output"], owner="alice")
    assert node.host_path == (tmp_path / "nodes/users/alice/mnt/output").resolve()
    assert node.also_at == "/mnt/output"
    (node.host_path / "result.txt").write_text("from an earlier job")
    code = store.materialize("c", MaterialKind.CLONE, ["/mnt/output"], owner="alice")
    assert (code.host_path, code.read_only, code.also_at) == (node.host_path, True, "/mnt/output")
    store.check("c", MaterialKind.DOWNLOAD, ["/mnt/data"], owner="alice")  # never refused
    # a symlink a job left in its node folder is never followed out of it
    secret = tmp_path / "secret.txt"
    secret.write_text("a host file")
    os.symlink(tmp_path, node.host_path / "host")
    with pytest.raises(UnservableMaterial, match="symbolic link"):
        store.materialize(
            "d", MaterialKind.DOWNLOAD, ["/mnt/output/host/secret.txt", "/mnt/x"], owner="alice"
        )
    with pytest.raises(Exception, match="symbolic link"):
        store.materialize("o", MaterialKind.MOUNT, ["/mnt/output/host"], owner="alice")
    assert store.simulated(MaterialKind.MOUNT, ["/mnt/output", "hdfs://nn/x", "name"]) == [
        Simulated.NODE,
        Simulated.DFS,
    ]
    without = MaterialStore(tmp_path / "cache2", storage_dir=tmp_path / "storage2")
    with pytest.raises(UnservableMaterial, match="scheme 'hdfs'"):
        without.check("o", MaterialKind.MOUNT, ["hdfs://nn/x"])
