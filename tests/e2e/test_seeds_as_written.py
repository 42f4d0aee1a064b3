"""The seeds' examples submitted exactly as the seed documents write them (the text is read
from ../shared/seeds at test time) to a real `paigraph serve` with the default simulated
cluster: placed, given GPUs, their prerequisites in place and their commands started.

Only what this machine cannot reach is replaced, outside the job: the seeds' images are a local
image tagged under their names (tests/seed_images.py: the test image plus stand-ins for `pip`,
`python` and `tensorflow_model_server` that report what they were given, since TensorFlow is not
there), and their downloads come from local copies through the operator's `fetch_mirrors`
setting: the data from an HTTP server on loopback (allowed by `allowed_fetch_networks`), the
pinned script repository from a local git repository.
"""

from __future__ import annotations

import functools
import http.server
import io
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.corpus import seed_job
from tests.e2e.test_seed_examples import git, logs, paigraph
from tests.servers import Server, served

pytestmark = [pytest.mark.docker, pytest.mark.shared("seeds")]

CIFAR_URL = "https://www.cs.toronto.edu/~kriz/"
BENCHMARKS = "https://github.com/MaggieQi/benchmarks@84820935288cab696c9c2ac409cbd46a1f24723d"
STORAGE = "hdfs://10.151.40.179:9000/core/cifar10_model"


@pytest.fixture(scope="module")
def cifar_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A loopback HTTP server holding a small cifar-10-python.tar.gz of the real one's shape."""
    site = tmp_path_factory.mktemp("cifar-site")
    with tarfile.open(site / "cifar-10-python.tar.gz", "w:gz") as archive:
        for member in ("data_batch_1", "test_batch", "batches.meta"):
            data = f"{member} of the local copy\n".encode()
            info = tarfile.TarInfo(f"cifar-10-batches-py/{member}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def benchmarks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local repository standing for the seed's pinned benchmarks checkout."""
    root = tmp_path_factory.mktemp("mirror") / "benchmarks"
    script = root / "scripts" / "tf_cnn_benchmarks" / "tf_cnn_benchmarks.py"
    script.parent.mkdir(parents=True)
    script.write_text("# the benchmark, as the mirror holds it\n")
    git(root.parent, "init", "--quiet", "--initial-branch=main", str(root))
    git(root, "add", ".")
    git(root, "commit", "--quiet", "-m", "pinned tree")
    return root


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, seed_images: None, cifar_site: str, benchmarks: Path
) -> Iterator[Server]:
    """`paigraph serve` on the default cluster; the settings only say where downloads are."""
    state = tmp_path_factory.mktemp("seeds-as-written")
    settings = state / "simulator.yaml"
    settings.write_text(
        f"allowed_file_roots: [{benchmarks.parent}]\n"
        "allowed_fetch_networks: [127.0.0.1]\n"
        "fetch_mirrors:\n"
        f"  '{CIFAR_URL}': '{cifar_site}'\n"
        f"  '{BENCHMARKS}': '{benchmarks.as_uri()}'\n"
        # the cluster seed 003's job names, beside the default one
        "virtual_clusters: [{name: default, share: 50}, {name: your_virtual_cluster, share: 50}]\n"
    )
    with served("sqlite", state) as started:
        started.settings["PAIGRAPH_SIMULATOR_CONFIG"] = str(settings)
        started.start()
        yield started


@pytest.fixture(scope="module")
def alice(server: Server) -> str:
    paigraph(server, "users", "add", "root", "--admin")
    return paigraph(server, "users", "add", "alice", "--vc", "your_virtual_cluster").strip()


def submitted(server: Server, job: Path, token: str, *, watch: bool) -> tuple[str, str]:
    done = server.paigraph("submit", str(job), *(["--watch"] if watch else []), token=token)
    assert done.stdout.strip(), done.stderr
    return done.stdout.split()[0], done.stdout + done.stderr


def test_seed_000_cifar10_runs_with_4_gpus_its_data_script_and_hdfs_storage(
    server: Server, alice: str, tmp_path: Path
) -> None:
    job = tmp_path / "tensorflow_cifar10.yaml"
    job.write_text(seed_job("000", "tensorflow_cifar10"))
    job_id, said = submitted(server, job, alice, watch=True)
    assert "SUCCEEDED" in said, said
    assert "simulated" in said  # the 4 GPUs and the 16 GB are simulated, and it says so

    worker = logs(server, job_id, "worker", 0, token=alice).splitlines()
    ps = logs(server, job_id, "ps_server", 0, token=alice).splitlines()
    # every command started: pip, the data unpacked, the benchmark in the checked-out script
    assert "pip stand-in: --quiet install scipy" in worker
    assert (
        "script found: tensorflow_cnnbenchmarks/benchmarks/scripts/tf_cnn_benchmarks/"
        "tf_cnn_benchmarks.py"
    ) in worker
    assert "cifar-10-batches-py/data_batch_1" in worker  # tar's listing of the served copy
    assert "input: data_batch_1" in worker
    assert any(
        line.startswith(
            "python stand-in: tensorflow_cnnbenchmarks/benchmarks/scripts/tf_cnn_benchmarks/"
            "tf_cnn_benchmarks.py --local_parameter_device=gpu"
        )
        and "--model=resnet20 --batch_size=32" in line
        for line in worker
    ), worker
    # four GPUs for the worker, listed as the device plugin lists them; none for the ps
    (devices,) = [line for line in worker if line.startswith("sees NVIDIA_VISIBLE_DEVICES=")]
    assert len(devices.split("=", 1)[1].split(",")) == 4, devices
    assert "sees NVIDIA_VISIBLE_DEVICES=none" in ps
    assert "sees PAI_CURRENT_TASK_ROLE_NAME=worker" in worker

    # both wrote into the hdfs storage, which is there afterwards for alice
    listed = paigraph(server, "fs", "ls", STORAGE + "/cifar10_model", token=alice)
    assert "checkpoint-worker-0" in listed and "checkpoint-ps_server-0" in listed, listed
    got = paigraph(server, "fs", "cat", f"{STORAGE}/cifar10_model/checkpoint-worker-0", token=alice)
    assert got == "model from worker\n"


@pytest.mark.parametrize("seed", ["001", "002"])
def test_seed_tensorflow_serving_mnist_serves_with_its_gpu_and_port(
    server: Server, alice: str, tmp_path: Path, seed: str
) -> None:
    job = tmp_path / "tensorflow_serving_mnist.yaml"
    job.write_text(seed_job(seed, "tensorflow_serving_mnist"))
    job_id, said = submitted(server, job, alice, watch=False)
    try:
        deadline = time.monotonic() + 120
        log = ""
        while "model server stand-in" not in log and time.monotonic() < deadline:
            time.sleep(1)
            log = server.paigraph("logs", job_id, "worker", "0", token=alice).stdout
        assert "model server stand-in: --port=" in log, said + log
        # its first command is the image's own, absent from this stand-in: started, and failed
        assert "bazel-bin/tensorflow_serving/example/mnist_saved_model" in log
        port = log.split("model server stand-in: --port=", 1)[1].split()[0]
        env = paigraph(server, "exec", job_id, "worker", "0", "--", "env", token=alice)
        seen = dict(line.split("=", 1) for line in env.splitlines() if "=" in line)
        assert len(seen["NVIDIA_VISIBLE_DEVICES"].split(",")) == 1
        assert "CUDA_VISIBLE_DEVICES" not in seen
        assert seen["PAI_CONTAINER_HOST_model_server_PORT_LIST"] == port
        assert seen["PAI_CURRENT_TASK_ROLE_NAME"] == "worker"
    finally:
        server.paigraph("stop", job_id, token=alice)


def test_seed_003_v1_job_runs_from_its_code_and_data_on_the_default_file_system(
    server: Server, alice: str, tmp_path: Path
) -> None:
    """The seed's steps: put the code and data on HDFS, then upload the config. Its example
    has `//` comments, which a JSON file cannot hold: submitted as a file it is refused, saying
    so; imported as the web portal's Submit page imports it (`convertJob`), it runs."""
    written = seed_job("003", "tensorflow-distributed-jobguid", "js")
    job = tmp_path / "tensorflow-distributed.json"
    job.write_text(written)
    refused = server.paigraph("submit", str(job), token=alice)
    assert refused.returncode != 0
    assert "JSON does not allow comments" in refused.stdout + refused.stderr

    fs = "$PAI_DEFAULT_FS_URI/path/tensorflow-distributed-jobguid"
    code = tmp_path / "code"
    code.mkdir()
    (code / "tf_cnn_benchmarks.py").write_text("# the benchmark\n")
    data = tmp_path / "data"
    data.mkdir()
    (data / "data_batch_1").write_text("cifar10\n")
    default_fs = "hdfs://paigraph-dfs:9000/path/tensorflow-distributed-jobguid"
    paigraph(server, "fs", "mkdir", default_fs, token=alice)
    paigraph(server, "fs", "put", str(code), default_fs + "/code", token=alice)
    paigraph(server, "fs", "put", str(data), default_fs + "/data", token=alice)
    assert f'"codeDir": "{fs}/code"' in written  # the locations the seed gives

    converted = server.client(alice).execute(
        "mutation($config: String!) { convertJob(input: {config: $config}) {"
        " config errors { message } } }",
        {"config": written},
    )["convertJob"]
    assert converted["errors"] == [], converted
    imported = tmp_path / "imported.yaml"
    imported.write_text(converted["config"])
    job_id, said = submitted(server, imported, alice, watch=True)
    assert "SUCCEEDED" in said, said

    for role, gpus in (("worker", 4), ("ps_server", 0)):
        for index in (0, 1):
            lines = logs(server, job_id, role, index, token=alice).splitlines()
            assert "pip stand-in: --quiet install scipy" in lines
            (call,) = [line for line in lines if line.startswith("python stand-in: ")]
            assert call.startswith("python stand-in: code/tf_cnn_benchmarks.py"), call
            assert "script found: code/tf_cnn_benchmarks.py" in lines
            assert f"--data_dir={default_fs}/data" in call.split(), call
            assert f"--job_name={'ps' if role == 'ps_server' else role}" in call.split()
            (devices,) = [line for line in lines if line.startswith("sees NVIDIA_VISIBLE_DEVICES=")]
            shown = devices.split("=", 1)[1]
            assert (len(shown.split(",")) if gpus else 0) == gpus or shown == "none", devices
    listed = paigraph(server, "fs", "ls", default_fs + "/output", token=alice)
    for name in ("worker-0", "worker-1", "ps_server-0", "ps_server-1"):
        assert f"checkpoint-{name}" in listed, listed
