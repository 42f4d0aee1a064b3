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

from tests.test_e2e_server import Server, served

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
      - sh $$script$$/benchmarks/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.sh --model=$$model$$ --batch_size=$$batchsize$$
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
    server: Server, files: Path, tmp_path: Path
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
    job_id, _ = watched(server, job)
    lines = logs(server, job_id, "worker", 0).splitlines()
    assert "benchmarks at the pinned commit: --model=resnet20 --batch_size=32" in lines
    assert (
        "PYTHONPATH=/work/tensorflow_cnnbenchmarks/benchmarks/scripts/tf_cnn_benchmarks:" in lines
    )
    assert "models at the pinned commit" in lines
    listed = lines[lines.index("models at the pinned commit") + 1 :]
    assert listed[:2] == ["benchmarks", "models"]
