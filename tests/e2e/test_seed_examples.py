"""The seeds' own examples, run as written on a real `paigraph serve` (SQLite, the Docker
simulator) driven by the `paigraph` command: each is the seed's job with only what this machine
cannot reach (GitHub, an HDFS cluster, GPUs, TensorFlow) replaced by local stand-ins of the
same shape, and what the seed says the job sees is checked in its logs.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.servers import Server, served

pytestmark = pytest.mark.docker

IMAGE = "paigraph/busybox:test"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one host directory jobs may read local paths from (allowed_file_roots)."""
    return tmp_path_factory.mktemp("seed-files")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, files: Path) -> Iterator[Server]:
    state = tmp_path_factory.mktemp("seeds")
    settings = state / "simulator.yaml"
    settings.write_text(f"allowed_file_roots: [{files}]\n")
    with served("sqlite", state) as started:
        started.settings["PAIGRAPH_SIMULATOR_CONFIG"] = str(settings)
        started.start()
        yield started


@pytest.fixture(scope="module")
def tokens(server: Server) -> dict[str, str]:
    """An admin and two users, alice and bob, each with a token."""
    return {
        name: paigraph(server, "users", "add", name, *flags).strip()
        for name, flags in (("root", ["--admin"]), ("alice", []), ("bob", []))
    }


def paigraph(server: Server, *args: str, token: str | None = None) -> str:
    done = server.paigraph(*args, token=token)
    assert done.returncode == 0, f"paigraph {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done.stdout


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def repository(path: Path, files: dict[str, str]) -> tuple[str, str]:
    """A git repository holding `files` in a first commit and something else in a second;
    (the first commit, the second)."""
    path.mkdir(parents=True)
    git(path, "init", "--quiet", "--initial-branch=main")
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", ".")
    git(path, "commit", "--quiet", "-m", "pinned")
    first = git(path, "rev-parse", "HEAD")
    for name in files:
        (path / name).write_text("echo not the pinned commit\n")
    git(path, "commit", "--quiet", "-am", "later")
    return first, git(path, "rev-parse", "HEAD")


def watched(server: Server, job: Path, *, token: str | None = None) -> tuple[str, str]:
    """`paigraph submit JOB --watch`: (the job's id, what it printed); it must succeed."""
    out = paigraph(server, "submit", str(job), "--watch", token=token)
    assert "SUCCEEDED" in out, out
    return out.split()[0], out


def logs(server: Server, job_id: str, role: str, index: int, token: str | None = None) -> str:
    return paigraph(server, "logs", job_id, role, str(index), token=token)


# --- seed 000: a script prerequisite is a list of repositories ------------------------------

CIFAR10 = """\
protocol_version: v2
name: tensorflow_cifar10
type: job
version: 1.0.0
contributor: Alice
description: image classification, cifar10 dataset, tensorflow, distributed training
retryCount: 0
virtualCluster: default

parameters:
  model: resnet20
  batchsize: 32

tasks:
  - role: worker
    script: tensorflow_cnnbenchmarks
    dockerimage: tf_example
    resource:
      instances: 1
      resourcePerInstance: {{ cpu: 1, memoryMB: 256, gpu: 0 }}
    command:
      - export PYTHONPATH=$PAI_WORK_DIR/$$script$$/benchmarks/scripts/tf_cnn_benchmarks:$PYTHONPATH
      - >-
        sh $$script$$/benchmarks/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.sh
        --model=$$model$$ --batch_size=$$batchsize$$
      - sh $PAI_WORK_DIR/$$script$$/models/run.sh
      - ls $$script$$

prerequisites:
  - protocol_version: v2
    name: tf_example
    type: dockerimage
    version: 1.0.0
    contributor: Alice
    description: python3.5, tensorflow
    uri: {image}
  - protocol_version: v2
    name: tensorflow_cnnbenchmarks
    type: script
    version: 1.0.0
    contributor: Alice
    description: tensorflow benchmarks
    uri:
      - file://{benchmarks}@{benchmarks_commit}
      - {models}.git@{models_commit}
"""


def test_seed_000_cifar10_clones_each_repository_at_its_commit_under_the_script_name(
    server: Server, tokens: dict[str, str], files: Path, tmp_path: Path
) -> None:
    benchmarks_commit, _ = repository(
        files / "MaggieQi" / "benchmarks",
        {
            "scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.sh": (
                'echo "benchmarks at the pinned commit: $*"\necho "PYTHONPATH=$PYTHONPATH"\n'
            )
        },
    )
    models = files / "models"
    models_commit, _ = repository(models, {"run.sh": "echo models at the pinned commit\n"})
    git(files, "clone", "--quiet", "--bare", str(models), str(files / "models.git"))
    job = tmp_path / "cifar10.yaml"
    job.write_text(
        CIFAR10.format(
            image=IMAGE,
            benchmarks=files / "MaggieQi" / "benchmarks",
            benchmarks_commit=benchmarks_commit,
            models=files / "models",
            models_commit=models_commit[:10],
        )
    )
    job_id, _ = watched(server, job, token=tokens["alice"])
    lines = logs(server, job_id, "worker", 0, token=tokens["alice"]).splitlines()
    assert "benchmarks at the pinned commit: --model=resnet20 --batch_size=32" in lines
    assert (
        "PYTHONPATH=/work/tensorflow_cnnbenchmarks/benchmarks/scripts/tf_cnn_benchmarks:" in lines
    )
    assert "models at the pinned commit" in lines
    listed = lines[lines.index("models at the pinned commit") + 1 :]
    assert listed[:2] == ["benchmarks", "models"]


# --- seed 004: storage plugin items ---------------------------------------------------------

# As the seed writes it: the placeholder stands where YAML expects a value, unquoted.
CONFIGNFS_PVC = """\
name: confignfs_pvc
plugin: pvc_storage
plugin_params:
  name: confignfs
  mountPath: {{ mountPath }}
template_variables:
  - name: mountPath
"""

IMAGENET = """\
name: {name}
require:
  - name: marketplace://name/confignfs_pvc
    template_variables:
      mountPath: /mnt/confignfs_pvc
plugin: cmd
plugin_params:
  callbacks:
    - event: taskStarts
      commands:
        - mkdir -p {{{{ dataPath }}}}
        - cp -r /mnt/confignfs_pvc/imagenet/{part}* {{{{ dataPath }}}}
template_variables:
  - name: dataPath
"""

IMAGENET_JOB = """\
protocolVersion: 2
name: {name}
type: job
prerequisites:
  - type: dockerimage
    uri: '{image}'
    name: docker_image_0
taskRoles:
  taskrole:
    instances: 2
    completion:
      minFailedInstances: 1
    taskRetryCount: 0
    prerequisites:
      - {name}
    dockerImage: docker_image_0
    resourcePerInstance:
      gpu: 0
      cpu: 1
      memoryMB: 256
    commands:
      - sleep 0s
      - find /dataset/{name} -type f | sort
      - find /dataset/{name} -type f | sort | xargs cat
defaults:
  virtualCluster: default
extras:
  reference_prerequisites:
    - name: {name}
      require:
        - name: marketplace://name/{name}
          template_variables:
            dataPath: /dataset/{name}
"""


@pytest.fixture(scope="module")
def imagenet_items(
    server: Server, tokens: dict[str, str], files: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The storage `confignfs` (a small imagenet tree, alice may use it, bob may not) and the
    seed's three marketplace items, published by the admin."""
    tree = files / "confignfs" / "imagenet"
    for part in ("train", "validation"):
        (tree / part).mkdir(parents=True)
        (tree / part / "n01440764.txt").write_text(f"tench, {part}\n")
    paigraph(
        server,
        "storages", "add", "confignfs", "--path", str(files / "confignfs"),
        "--read-only", "--user", "alice",
        "--db", server.db_url,
    )  # fmt: skip
    items = tmp_path_factory.mktemp("items")
    (items / "confignfs_pvc.yaml").write_text(CONFIGNFS_PVC)
    (items / "imagenet.yaml").write_text(IMAGENET.format(name="imagenet", part=""))
    (items / "imagenet_only_validation.yaml").write_text(
        IMAGENET.format(name="imagenet_only_validation", part="validation/")
    )
    for item in ("confignfs_pvc", "imagenet", "imagenet_only_validation"):
        paigraph(server, "market", "publish", str(items / f"{item}.yaml"), token=tokens["root"])
    shown = paigraph(server, "market", "show", "confignfs_pvc", token=tokens["root"])
    assert "  mountPath: {{ mountPath }}\n" in shown, shown  # kept as written
    return items


@pytest.mark.parametrize(
    ("name", "found"),
    [
        (
            "imagenet",
            [
                "/dataset/imagenet/train/n01440764.txt",
                "/dataset/imagenet/validation/n01440764.txt",
            ],
        ),
        ("imagenet_only_validation", ["/dataset/imagenet_only_validation/n01440764.txt"]),
    ],
)
def test_seed_004_storage_items_mount_the_storage_for_a_user_allowed_to_use_it(
    server: Server,
    tokens: dict[str, str],
    imagenet_items: Path,
    tmp_path: Path,
    name: str,
    found: list[str],
) -> None:
    job = tmp_path / f"{name}.yaml"
    job.write_text(IMAGENET_JOB.format(name=name, image=IMAGE))
    job_id, _ = watched(server, job, token=tokens["alice"])
    for index in (0, 1):
        lines = logs(server, job_id, "taskrole", index, token=tokens["alice"]).splitlines()
        assert [line for line in lines if line.startswith("/dataset/")] == found
        assert "tench, validation" in lines

    refused = server.paigraph("submit", str(job), token=tokens["bob"])
    assert refused.returncode == 1, refused.stdout + refused.stderr
    said = refused.stdout + refused.stderr
    assert "no permission to use storage 'confignfs' (prerequisite 'confignfs_pvc')" in said, said
    payload = server.client(tokens["bob"]).submit(job.read_text(), {})
    assert [(e["code"], e["path"]) for e in payload["errors"]] == [
        ("storage-forbidden", ["extras", "reference_prerequisites", "0", "require", "0"])
    ]


def test_seed_004_a_resolved_storage_item_reads_back_the_same(
    server: Server, tokens: dict[str, str], imagenet_items: Path, tmp_path: Path
) -> None:
    job = tmp_path / "imagenet.yaml"
    job.write_text(IMAGENET_JOB.format(name="imagenet", image=IMAGE))
    answer = server.client(tokens["alice"]).execute(
        "mutation($config: String!) { resolveJob(input: {config: $config}) {"
        " job { config } errors { path code message } } }",
        {"config": job.read_text()},
    )["resolveJob"]
    assert answer["errors"] == []
    resolved = tmp_path / "resolved.yaml"
    resolved.write_text(answer["job"]["config"])
    (storage_item,) = [
        p
        for p in yaml.safe_load(resolved.read_text())["prerequisites"]
        if p["name"] == "confignfs_pvc"
    ]
    assert storage_item["requireStorages"] == [
        {"name": "confignfs", "mountPath": "/mnt/confignfs_pvc"}
    ]
    assert paigraph(server, "validate", str(resolved)).startswith("OK")
    job_id, _ = watched(server, resolved, token=tokens["alice"])
    lines = logs(server, job_id, "taskrole", 0, token=tokens["alice"]).splitlines()
    assert "/dataset/imagenet/train/n01440764.txt" in lines


# --- seed 003: a v1 job's codeDir, dataDir and outputDir -------------------------------------

TF_DISTRIBUTED = """\
{{
  "jobName": "tensorflow-distributed-jobguid",
  "image": "{image}",
  "dataDir": "$PAI_DEFAULT_FS_URI/path/$PAI_JOB_NAME/data",
  "codeDir": "$PAI_DEFAULT_FS_URI{files}/$PAI_USER_NAME/${{PAI_JOB_NAME}}/code",
  "virtualCluster": "default",
  "taskRoles": [
    {{
      "name": "ps_server",
      "taskNumber": 1,
      "cpuNumber": 1,
      "memoryMB": 256,
      "gpuNumber": 0,
      "portList": [
        {{"label": "http", "beginAt": 0, "portNumber": 1}},
        {{"label": "ssh", "beginAt": 0, "portNumber": 1}}
      ],
      "command": "{ps_command}",
      "minSucceededTaskCount": null
    }},
    {{
      "name": "worker",
      "taskNumber": 2,
      "cpuNumber": 1,
      "memoryMB": 256,
      "gpuNumber": 0,
      "portList": [
        {{"label": "http", "beginAt": 0, "portNumber": 1}},
        {{"label": "ssh", "beginAt": 0, "portNumber": 1}}
      ],
      "command": "{worker_command}",
      "minSucceededTaskCount": 2
    }}
  ],
  "retryCount": 0,
  "jobEnvs": {{"batch_size": 32, "job_model": "resnet20"}}
}}
"""
COMMAND = (
    "sh code/tf_cnn_benchmarks.sh --batch_size=$batch_size --model=$job_model "
    "--data_dir=$PAI_DATA_DIR --train_dir=$PAI_OUTPUT_DIR "
    "--task_index=$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX --job_name={}"
    " && if touch code/new 2>/dev/null; then echo code is writable; exit 3; fi"
)


def tf_distributed(files: Path) -> str:
    return TF_DISTRIBUTED.format(
        image=IMAGE,
        files=files,
        ps_command=COMMAND.format("ps"),
        worker_command=COMMAND.format("worker"),
    )


def test_seed_003_v1_codedir_is_copied_into_the_container_with_its_locations_expanded(
    server: Server, tokens: dict[str, str], files: Path, tmp_path: Path
) -> None:
    """codeDir, dataDir and outputDir on `$PAI_DEFAULT_FS_URI` are on the simulated default
    file system: the code is put there with `paigraph fs put`, copied to `code/` read-only,
    and the job is told its locations as hdfs:// URIs, as on the cluster."""
    code = tmp_path / "code"
    code.mkdir(parents=True)
    (code / "tf_cnn_benchmarks.sh").write_text('echo "tf_cnn_benchmarks from codeDir: $*"\n')
    code_dir = f"{files}/alice/tensorflow-distributed-jobguid/code"
    paigraph(server, "fs", "put", str(code), code_dir, token=tokens["alice"])
    job = tmp_path / "tf.json"
    job.write_text(tf_distributed(files))
    job_id, _ = watched(server, job, token=tokens["alice"])
    said = logs(server, job_id, "worker", 1, token=tokens["alice"]).splitlines()
    fs = "hdfs://paigraph-dfs:9000"
    assert (
        "tf_cnn_benchmarks from codeDir: --batch_size=32 --model=resnet20 "
        f"--data_dir={fs}/path/tensorflow-distributed-jobguid/data "
        f"--train_dir={fs}/Output/tensorflow-distributed-jobguid --task_index=1 --job_name=worker"
    ) in said

    # bob's default file system is his own: alice's code is not there, so his job cannot start
    done = server.paigraph("submit", str(job), "--watch", token=tokens["bob"])
    assert "FAILED" in done.stdout, done.stdout + done.stderr
    assert "codeDir" in done.stderr  # the simulated location, warned about at its field
