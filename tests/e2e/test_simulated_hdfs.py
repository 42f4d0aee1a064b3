"""HDFS and node paths as real OpenPAI jobs use them, on a real `paigraph serve` (SQLite, the
Docker simulator, real containers of the busybox test image) driven by the `paigraph` command
and GraphQL: the simulated file systems are filled and read with `paigraph fs`, jobs find their
storages mounted and an `hdfs` stand-in on their PATH, and one user never reaches another's.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import Server, served

pytestmark = pytest.mark.docker

IMAGE = "paigraph/busybox:test"
DEFAULT_FS = "hdfs://paigraph-dfs:9000"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    state = tmp_path_factory.mktemp("hdfs")
    settings = state / "simulator.yaml"
    settings.write_text("dfs_max_mb: 1\n")  # small, so the bound is reached in a test
    with served("sqlite", state) as started:
        started.settings["PAIGRAPH_SIMULATOR_CONFIG"] = str(settings)
        started.start()
        yield started


@pytest.fixture(scope="module")
def tokens(server: Server) -> dict[str, str]:
    return {
        name: ok(server, "users", "add", name, *flags).strip()
        for name, flags in (("root", ["--admin"]), ("alice", []), ("bob", []))
    }


def ok(server: Server, *args: str, token: str | None = None) -> str:
    done = server.paigraph(*args, token=token)
    assert done.returncode == 0, f"paigraph {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done.stdout


def refused(server: Server, *args: str, token: str | None = None) -> str:
    done = server.paigraph(*args, token=token)
    assert done.returncode != 0, f"paigraph {' '.join(args)} succeeded:\n{done.stdout}"
    return " ".join(done.stderr.split())


def run_job(server: Server, job: Path, token: str, *, succeeds: bool = True) -> tuple[str, str]:
    """`paigraph submit JOB --watch`: (the job's id, what it printed)."""
    done = server.paigraph("submit", str(job), "--watch", token=token)
    text = done.stdout + done.stderr
    assert ("SUCCEEDED" in text) is succeeds, text
    return done.stdout.split()[0], text


def log_of(server: Server, job_id: str, role: str, token: str) -> list[str]:
    return ok(server, "logs", job_id, role, "0", token=token).splitlines()


# seed 000's tensorflow_cifar10, its storage on HDFS, with busybox commands in place of TF
CIFAR10 = """\
protocol_version: v2
name: tensorflow_cifar10
type: job
parameters:
  model: resnet20
tasks:
  - role: worker
    data: cifar10
    storage: mycifar10
    dockerimage: tf_example
    resource:
      instances: 1
      resourcePerInstance: { cpu: 1, memoryMB: 256, gpu: 0 }
    command:
      - echo "default fs is $PAI_DEFAULT_FS_URI"
      - cat $$data$$/cifar-10.txt
      - mkdir -p $$storage$$/cifar10_model
      - echo "trained $$model$$" > $$storage$$/cifar10_model/checkpoint
prerequisites:
  - protocol_version: v2
    name: tf_example
    type: dockerimage
    uri: paigraph/busybox:test
  - protocol_version: v2
    name: cifar10
    type: data
    uri:
      - $PAI_DEFAULT_FS_URI/datasets/cifar-10.txt
  - protocol_version: v2
    name: mycifar10
    type: storage
    uri:
      - hdfs://10.151.40.179:9000/core/cifar10_model  # storage to be mounted
"""


def test_an_hdfs_storage_is_mounted_and_what_the_job_writes_there_is_read_afterwards(
    server: Server, tokens: dict[str, str], tmp_path: Path
) -> None:
    alice = tokens["alice"]
    data = tmp_path / "cifar-10.txt"
    data.write_text("the cifar-10 images\n")
    ok(server, "fs", "put", str(data), "/datasets/cifar-10.txt", token=alice)
    job = tmp_path / "cifar10.yaml"
    job.write_text(CIFAR10)

    job_id, printed = run_job(server, job, alice)
    said = log_of(server, job_id, "worker", alice)
    assert f"default fs is {DEFAULT_FS}" in said
    assert "the cifar-10 images" in said
    # told at submission, at the paths of the prerequisites it is about
    assert "prerequisites.1.uri" in printed and "prerequisites.2.uri" in printed
    assert "simulated HDFS" in printed

    model = "hdfs://10.151.40.179:9000/core/cifar10_model/cifar10_model/checkpoint"
    assert ok(server, "fs", "cat", model, token=alice) == "trained resnet20\n"
    ok(server, "fs", "get", model, str(tmp_path), token=alice)
    assert (tmp_path / "checkpoint").read_text() == "trained resnet20\n"
    content = server.client(alice).execute(
        "query($uri: String!) { fileContent(uri: $uri) { contentBase64 size errors { code } } }",
        {"uri": model},
    )["fileContent"]
    assert base64.b64decode(content["contentBase64"]) == b"trained resnet20\n"
    assert content["size"] == len("trained resnet20\n") and content["errors"] == []
    job_warnings = server.client(alice).execute(
        "query($id: ID!) { job(id: $id) { warnings { path code } } }", {"id": job_id}
    )["job"]["warnings"]
    assert {"path": ["prerequisites", "2", "uri"], "code": "simulated"} in job_warnings

    # another user's hdfs://10.151.40.179:9000 is another tree: neither the job's data nor
    # its model is there for bob, through a job or through paigraph fs
    assert "no such file" in refused(server, "fs", "cat", model, token=tokens["bob"])
    _, printed = run_job(server, job, tokens["bob"], succeeds=False)
    assert "paigraph fs put" in printed
    assert (
        "forbidden"
        in server.client(tokens["bob"]).execute(
            'query($uri: String!) { fileListing(uri: $uri, user: "alice") { errors { code } } }',
            {"uri": model},
        )["fileListing"]["errors"][0]["code"]
    )
    assert ok(server, "fs", "cat", model, "--user", "alice", token=tokens["root"]).startswith(
        "trained"
    )


HDFS_COMMANDS = """\
protocolVersion: 2
name: hdfs_commands
type: job
prerequisites:
  - name: image
    type: dockerimage
    uri: paigraph/busybox:test
taskRoles:
  main:
    instances: 1
    dockerImage: image
    resourcePerInstance: {{ cpu: 1, memoryMB: 256, gpu: 0 }}
    commands:
      - echo "epoch 1" > log.txt
      - hdfs dfs -mkdir -p $PAI_DEFAULT_FS_URI/runs/{run}
      - hdfs dfs -put log.txt $PAI_DEFAULT_FS_URI/runs/{run}/
      - hdfs dfs -ls $PAI_DEFAULT_FS_URI/runs/{run}
      - hdfs dfs -cat /runs/{run}/log.txt
      - hdfs dfs -cat /given/input.txt
      - {extra}
"""


def test_a_jobs_own_hdfs_commands_work_on_its_users_tree(
    server: Server, tokens: dict[str, str], tmp_path: Path
) -> None:
    alice = tokens["alice"]
    given = tmp_path / "input.txt"
    given.write_text("given by alice\n")
    ok(server, "fs", "put", str(given), "/given/input.txt", token=alice)
    job = tmp_path / "job.yaml"
    job.write_text(HDFS_COMMANDS.format(run="r1", extra="echo done"))
    job_id, _ = run_job(server, job, alice)
    said = log_of(server, job_id, "main", alice)
    assert "Found 1 items" in said
    assert any(line.endswith(f"{DEFAULT_FS}/runs/r1/log.txt") for line in said), said
    assert "epoch 1" in said and "given by alice" in said
    assert ok(server, "fs", "cat", "/runs/r1/log.txt", token=alice) == "epoch 1\n"

    # bob's job runs the same commands on bob's tree: alice's input is not there
    bobs, _ = run_job(server, job, tokens["bob"])
    said = log_of(server, bobs, "main", tokens["bob"])
    assert "hdfs: /given/input.txt: No such file or directory" in said
    assert "given by alice" not in said


def test_the_size_bound_holds_for_paigraph_fs_and_for_the_stand_in(
    server: Server, tokens: dict[str, str], tmp_path: Path
) -> None:
    bob = tokens["bob"]
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * (1200 << 10))  # more than dfs_max_mb: 1
    said = refused(server, "fs", "put", str(big), "hdfs://quota:9000/big.bin", token=bob)
    assert "dfs_max_mb" in said
    job = tmp_path / "job.yaml"
    extra = "head -c 1300000 /dev/zero > big.bin && hdfs dfs -put big.bin hdfs://quota:9000/"
    job.write_text(
        HDFS_COMMANDS.format(run="r2", extra=extra).replace(
            "      - hdfs dfs -cat /given/input.txt\n", ""
        )
    )
    job_id, _ = run_job(server, job, bob, succeeds=False)
    assert any("dfs_max_mb" in line for line in log_of(server, job_id, "main", bob))
    assert "no such file" in refused(server, "fs", "ls", "hdfs://quota:9000/big.bin", token=bob)


# seed 003's v1 job, its codeDir, dataDir and outputDir on the default file system as written
V1_JOB = """\
{
  "jobName": "tensorflow-distributed-jobguid",
  "image": "paigraph/busybox:test",
  "dataDir": "$PAI_DEFAULT_FS_URI/path/tensorflow-distributed-jobguid/data",
  "outputDir": "$PAI_DEFAULT_FS_URI/path/tensorflow-distributed-jobguid/output",
  "codeDir": "$PAI_DEFAULT_FS_URI/path/tensorflow-distributed-jobguid/code",
  "taskRoles": [
    {
      "name": "worker",
      "taskNumber": 1,
      "cpuNumber": 1,
      "memoryMB": 256,
      "command": "sh code/train.sh $PAI_DATA_DIR $PAI_OUTPUT_DIR"
    }
  ]
}
"""
TRAIN = """\
echo "training on $1"
hdfs dfs -cat "$1/labels.txt"
echo weights > weights.txt
hdfs dfs -mkdir -p "$2" && hdfs dfs -put weights.txt "$2/"
"""


def test_a_v1_codedir_on_the_default_file_system_is_copied_to_code_and_runs(
    server: Server, tokens: dict[str, str], tmp_path: Path
) -> None:
    alice = tokens["alice"]
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.sh").write_text(TRAIN)
    labels = tmp_path / "labels.txt"
    labels.write_text("cat dog\n")
    base = "/path/tensorflow-distributed-jobguid"
    ok(server, "fs", "put", str(code), f"{base}/code", token=alice)
    ok(server, "fs", "put", str(labels), f"{base}/data/labels.txt", token=alice)
    job = tmp_path / "v1.json"
    job.write_text(V1_JOB)
    job_id, printed = run_job(server, job, alice)
    said = log_of(server, job_id, "worker", alice)
    assert f"training on {DEFAULT_FS}{base}/data" in said and "cat dog" in said
    assert ok(server, "fs", "cat", f"{base}/output/weights.txt", token=alice) == "weights\n"
    assert "codeDir" in printed and "dataDir" in printed  # the simulated places, told


NODE_PATHS = """\
protocolVersion: 2
name: node_paths
type: job
prerequisites:
  - name: image
    type: dockerimage
    uri: paigraph/busybox:test
  - name: covid_output
    type: output
    uri: /mnt/confignfs/covid19/output
taskRoles:
  taskrole:
    instances: 1
    dockerImage: image
    output: covid_output
    resourcePerInstance: { cpu: 1, memoryMB: 256, gpu: 0 }
    commands:
      - cat /mnt/confignfs/covid19/output/result.txt 2>/dev/null || echo "no result yet"
      - echo "result of $PAI_JOB_NAME" > /mnt/confignfs/covid19/output/result.txt
"""


def test_a_node_path_output_is_a_node_folder_of_the_user_kept_across_jobs(
    server: Server, tokens: dict[str, str], tmp_path: Path
) -> None:
    alice = tokens["alice"]
    job = tmp_path / "node.yaml"
    job.write_text(NODE_PATHS)
    first, printed = run_job(server, job, alice)
    assert "no result yet" in log_of(server, first, "taskrole", alice)
    assert "prerequisites.1.uri" in printed and "simulated node folder" in printed
    second, _ = run_job(server, job, alice)
    assert "result of node_paths" in log_of(server, second, "taskrole", alice)
    bobs, _ = run_job(server, job, tokens["bob"])  # bob's node folder is his own
    assert "no result yet" in log_of(server, bobs, "taskrole", tokens["bob"])


PUT = "mutation($input: PutFileInput!) { putFile(input: $input) { uri errors { path code } } }"
LIST = (
    "query($uri: String!) { fileListing(uri: $uri) {"
    " uri directory entries { name directory size } errors { code } } }"
)


def test_the_file_fields_write_list_and_remove_the_viewers_own_files(
    server: Server, tokens: dict[str, str]
) -> None:
    bob = server.client(tokens["bob"])
    content = base64.b64encode(b"part one,").decode()
    given = {"uri": "hdfs://NN:9000/notes/a.txt", "contentBase64": content}
    assert bob.execute(PUT, {"input": given})["putFile"] == {
        "uri": "hdfs://nn:9000/notes/a.txt",
        "errors": [],
    }
    again = bob.execute(PUT, {"input": given})["putFile"]
    assert again["errors"] == [{"path": ["uri"], "code": "invalid"}]  # exists: not replaced
    more = {**given, "contentBase64": base64.b64encode(b" part two").decode(), "append": True}
    assert bob.execute(PUT, {"input": more})["putFile"]["errors"] == []
    listed = bob.execute(LIST, {"uri": "hdfs://nn:9000/notes"})["fileListing"]
    assert listed["directory"] is True
    assert listed["entries"] == [{"name": "a.txt", "directory": False, "size": 18}]
    broken = {**given, "contentBase64": "not base64!"}
    assert bob.execute(PUT, {"input": broken})["putFile"]["errors"][0]["path"] == ["contentBase64"]
    outside = bob.execute(LIST, {"uri": "hdfs://nn:9000/../../etc"})["fileListing"]
    assert outside["errors"] == [{"code": "invalid"}]
    # alice's hdfs://nn:9000 is another tree
    alice = server.client(tokens["alice"])
    assert alice.execute(LIST, {"uri": "hdfs://nn:9000/notes"})["fileListing"]["errors"] == [
        {"code": "not-found"}
    ]
    removed = bob.execute(
        'mutation { removeFile(input: {uri: "hdfs://nn:9000/notes", recursive: true})'
        " { uri errors { code } } }"
    )["removeFile"]
    assert removed == {"uri": "hdfs://nn:9000/notes", "errors": []}
    assert bob.execute(LIST, {"uri": "hdfs://nn:9000/"})["fileListing"]["entries"] == []
