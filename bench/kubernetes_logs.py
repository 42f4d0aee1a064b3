"""What following the logs of many pods costs the Kubernetes backend, next to a thread per pod.

    python bench/kubernetes_logs.py [--pods 200] [--lines 50]

Starts the fake API server (tests/fake_kube_api.py) in a process of its own with that many
running pods, then, each in a fresh process so neither inherits the other's memory:

  thread per pod   a thread per pod reading `read_namespaced_pod_log(follow=True)` into a
                   file, as the backend followed logs before (the baseline)
  paigraph         LogBook.follow for every pod: one event loop reads every stream

Each follows every pod while the fake writes `--lines` lines to each, until every copy is
complete, and reports the threads it added while all streams were open, its resident memory
growth (VmRSS) and the seconds to copy. Prints figures and the ratios paigraph / thread per
pod; asserts nothing but that every copy is complete.

On this machine (2 cores shared, 200 pods, 20 lines each) one run gave: thread per pod 200
threads, 26.8 MB, 5.80 s; paigraph 1 thread, 11.6 MB, 4.54 s (ratios: threads 0.005,
memory 0.43, time 0.78).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.base import InstanceKey  # noqa: E402
from backends.kubernetes import api_client  # noqa: E402
from backends.kubernetes_log_reader import PodLogReader  # noqa: E402
from backends.kubernetes_logs import LogBook  # noqa: E402
from backends.kubernetes_settings import KubernetesSettings  # noqa: E402


def serve(pods: int, lines: int, kubeconfig: str, control: Connection) -> None:
    """The fake API server with `pods` running pods; writes `lines` lines to each when told."""
    from tests.fake_kube_api import FakeKubeAPI

    with FakeKubeAPI(validate=False) as api:
        api.kubeconfig(Path(kubeconfig))
        names = [f"pod-{n:04d}" for n in range(pods)]
        for name in names:
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
            }
            api.create("pods", "jobs", body)
            api.schedule(name)
            api.run(name)
        control.send("ready")
        while (order := control.recv()) != "stop":
            assert order == "write"
            for n in range(lines):
                for name in names:
                    api.write_log(name, f"{name} line {n:05d} of a job that talks\n")
            for name in names:
                api.exit(name, 0)
            control.send("written")


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def expected(name: str, lines: int) -> int:
    return sum(len(f"{name} line {n:05d} of a job that talks\n") for n in range(lines))


def measure(mode: str, pods: int, lines: int) -> dict[str, Any]:
    """Follow every pod the `mode` way; the figures."""
    with tempfile.TemporaryDirectory() as folder:
        kubeconfig = str(Path(folder) / "kubeconfig")
        ours, theirs = multiprocessing.Pipe()
        server = multiprocessing.Process(
            target=serve, args=(pods, lines, kubeconfig, theirs), daemon=True
        )
        server.start()
        assert ours.recv() == "ready"
        client = api_client(KubernetesSettings(kubeconfig=kubeconfig, state_dir=Path(folder)))
        names = [f"pod-{n:04d}" for n in range(pods)]
        root = Path(folder) / "logs"
        threads_before, rss_before = threading.active_count(), rss_kb()
        started = time.perf_counter()
        book = None
        if mode == "paigraph":
            book = LogBook(root, PodLogReader(client.configuration, "jobs", "main"))
            keys = {
                name: InstanceKey(job_id="bench", attempt=1, role=name, index=0) for name in names
            }
            for name in names:
                book.follow(keys[name], 1, name)
            paths = [book.path(keys[name]) for name in names]
        else:
            from kubernetes import client as k8s

            core = k8s.CoreV1Api(client)
            root.mkdir()
            paths = [root / f"{name}.log" for name in names]

            def copy(name: str, path: Path) -> None:
                response = core.read_namespaced_pod_log(
                    name, "jobs", container="main", follow=True, _preload_content=False
                )
                with path.open("wb") as out:
                    for chunk in response.stream(1 << 16, decode_content=False):
                        out.write(chunk)
                        out.flush()
                response.release_conn()

            for name, path in zip(names, paths, strict=True):
                threading.Thread(target=copy, args=(name, path), daemon=True).start()
        peak_threads = threading.active_count()  # every follower started
        ours.send("write")
        assert ours.recv() == "written"
        sizes = {name: expected(name, lines) for name in names}
        while any(
            not p.exists() or p.stat().st_size < sizes[n] for n, p in zip(names, paths, strict=True)
        ):
            peak_threads = max(peak_threads, threading.active_count())
            time.sleep(0.05)
        seconds = time.perf_counter() - started
        rss_growth = rss_kb() - rss_before
        if book is not None:
            book.close()
        ours.send("stop")
        server.join(30)
        return {
            "threads": peak_threads - threads_before,
            "rss_mb": rss_growth / 1024,
            "seconds": seconds,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--lines", type=int, default=50, help="lines written to each pod")
    parser.add_argument("--mode", choices=("baseline", "paigraph"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(measure(args.mode, args.pods, args.lines)))
        return
    figures = {}
    for mode in ("baseline", "paigraph"):
        command = [sys.executable, __file__, "--mode", mode, "--pods", str(args.pods)]
        command += ["--lines", str(args.lines)]
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        figures[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{args.pods} pods followed, {args.lines} lines each")
    print(f"{'':16}{'threads':>9}{'RSS MB':>9}{'seconds':>9}")
    for mode, label in (("baseline", "thread per pod"), ("paigraph", "paigraph")):
        f = figures[mode]
        print(f"{label:16}{f['threads']:9d}{f['rss_mb']:9.1f}{f['seconds']:9.2f}")
    base, ours = figures["baseline"], figures["paigraph"]
    print(
        f"ratio paigraph / thread per pod: threads {ours['threads'] / max(base['threads'], 1):.3f}"
        f", memory {ours['rss_mb'] / max(base['rss_mb'], 0.1):.3f}"
        f", time {ours['seconds'] / base['seconds']:.2f}"
    )


if __name__ == "__main__":
    main()
