"""The seeds' images as this machine has them: the test image tagged under the names the seeds'
jobs give, plus stand-ins for `pip`, `python` and `tensorflow_model_server` that report what
they were given (TensorFlow is not here). Nothing is pulled.

The names are fixed (a job run as written names them) and the Docker engine is shared by both
pytest-xdist workers and by any other test run on this machine, so they are built and removed
through tests/shared_images.py: kept while any session uses them. conftest.py's session
fixture `seed_images` holds them for a session.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.shared_images import images_in_use

BASE = "paigraph/busybox:test"

# Stand-ins on the image's PATH: each says what it was asked, and `python` writes a model into
# its --train_dir as the benchmark would.
SHIMS = {
    "pip": 'echo "pip stand-in: $*"\n',
    "python": (
        'echo "python stand-in: $*"\n'
        '[ -f "$1" ] && echo "script found: $1"\n'
        'echo "sees NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-unset}"\n'
        'echo "sees PAI_CURRENT_TASK_ROLE_NAME=$PAI_CURRENT_TASK_ROLE_NAME"\n'
        'ls inputdata | sed "s/^/input: /"\n'
        'for arg in "$@"; do case "$arg" in --train_dir=*) train="${arg#--train_dir=}";; esac;'
        " done\n"
        'model="checkpoint-$PAI_CURRENT_TASK_ROLE_NAME-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"\n'
        'echo "model from $PAI_CURRENT_TASK_ROLE_NAME" > "/tmp/$model"\n'
        'case "$train" in\n'
        '  hdfs://*) hdfs dfs -mkdir -p "$train" && hdfs dfs -put "/tmp/$model" "$train/";;\n'
        '  *) mkdir -p "$train" && cp "/tmp/$model" "$train/";;\n'
        "esac\n"
    ),
    "tensorflow_model_server": 'echo "model server stand-in: $*"\nexec sleep 600\n',
}
TAGS = (
    "openpai/pai.example.tensorflow",
    "openpai/pai.example.tensorflow-serving",
    "your_docker_registry/pai.run.tensorflow",
)


def build(context: Path, base: str, shims: dict[str, str], bin_dir: str, tags: list[str]) -> None:
    """`docker build` of `base` with `shims` (name: shell script) copied into `bin_dir`, tagged
    `tags`; a failed build fails the test with Docker's words."""
    for name, text in shims.items():
        (context / name).write_text("#!/bin/sh\n" + text)
        (context / name).chmod(0o755)
    (context / "Dockerfile").write_text(f"FROM {base}\nCOPY {' '.join(shims)} {bin_dir}/\n")
    built = subprocess.run(
        ["docker", "build", "--pull=false", "-q", *[a for t in tags for a in ("-t", t)],
         str(context)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr


@contextmanager
def seed_images_in_use(context: Path) -> Iterator[None]:
    """The seeds' images, built in the empty directory `context`, for the block."""
    with images_in_use("seeds", TAGS, lambda: build(context, BASE, SHIMS, "/usr/bin", [*TAGS])):
        yield
