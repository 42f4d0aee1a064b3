"""Pod logs copied by the Kubernetes backend's LogBook from the fake API server, which serves
pods/log as the kubelet does (tests/fake_kube_logs.py): many pods followed by one event loop,
and a stream ended by a rotation or cut by a dropped connection resumed without a line lost
or written twice."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from backends.base import InstanceKey
from backends.kubernetes import api_client
from backends.kubernetes_log_lines import LogCursor, Resumed
from backends.kubernetes_log_reader import PodLogReader
from backends.kubernetes_logs import LogBook
from backends.kubernetes_settings import KubernetesSettings
from tests.fake_kube_api import FakeKubeAPI
from tests.fake_kube_logs import rfc3339_nano
from tests.waiting import until, until_notified


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(validate=False) as fake:
        yield fake


def client_of(api: FakeKubeAPI, tmp_path: Path) -> k8s.ApiClient:
    settings = KubernetesSettings(
        kubeconfig=str(api.kubeconfig(tmp_path / "kubeconfig")), state_dir=tmp_path / "state"
    )
    return api_client(settings)


def book_of(api: FakeKubeAPI, tmp_path: Path) -> LogBook:
    configuration = client_of(api, tmp_path).configuration
    return LogBook(tmp_path / "logs", PodLogReader(configuration, "jobs", "main"))


def running_pod(api: FakeKubeAPI, name: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    }
    code, answer = api.create("pods", "jobs", body)
    assert code == 201, answer
    api.schedule(name)
    api.run(name)


def key_of(name: str) -> InstanceKey:
    return InstanceKey(job_id="job-1", attempt=1, role=name, index=0)


def copied(book: LogBook, name: str) -> str:
    path = book.path(key_of(name))
    return path.read_bytes().decode() if path.exists() else ""


def wait_copied(book: LogBook, name: str, text: str) -> None:
    until(lambda: copied(book, name) == text or None, f"{name}'s copy to read {text!r}")


def wait_streams(api: FakeKubeAPI, count: int) -> None:
    until_notified(
        api.lock, lambda: api.open_log_streams == count or None, f"{count} open log stream(s)"
    )


def own_threads() -> set[threading.Thread]:
    """This process's threads but the fake server's (it answers each request on a thread)."""
    return {t for t in threading.enumerate() if "process_request_thread" not in t.name}


def test_200_pods_are_followed_by_a_bounded_number_of_threads(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    pods = [f"pod-{n:03d}" for n in range(200)]
    for name in pods:
        running_pod(api, name)
    book = book_of(api, tmp_path)
    before = own_threads()
    try:
        for name in pods:
            api.write_log(name, f"{name} started\n")
            book.follow(key_of(name), 1, name)
        wait_streams(api, 200)
        added = own_threads() - before
        assert book.followers() == 200
        # the event loop, and at most its one thread for name lookups
        assert len(added) <= 2, sorted(t.name for t in added)
        for name in pods:
            api.write_log(name, f"{name} going on\n")
        for name in pods:
            wait_copied(book, name, f"{name} started\n{name} going on\n")
    finally:
        book.close()


def test_a_rotation_ends_the_stream_and_the_copy_resumes_without_a_line_lost_or_doubled(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    running_pod(api, "p")
    book = book_of(api, tmp_path)
    try:
        api.write_log("p", "one\ntwo\n")  # one write: both lines carry the same timestamp
        book.follow(key_of("p"), 1, "p")
        wait_copied(book, "p", "one\ntwo\n")
        api.write_log("p", "three\n")
        api.rotate_log("p")  # the stream ends after "three"; only the new file is served
        api.write_log("p", "four\nfive\n")
        wait_copied(book, "p", "one\ntwo\nthree\nfour\nfive\n")
        # the new file alone is what a fresh reader gets, so nothing was copied from it twice
        core = k8s.CoreV1Api(client_of(api, tmp_path))
        assert core.read_namespaced_pod_log("p", "jobs") == "four\nfive\n"
        api.write_log("p", "six")
        api.exit("p", 0)
        book.settle(key_of("p"), 1, "p")
        assert copied(book, "p") == "one\ntwo\nthree\nfour\nfive\nsix"
        assert book.settled(key_of("p"), 1)
    finally:
        book.close()


def test_a_dropped_connection_is_resumed_from_the_last_line_kept(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    running_pod(api, "p")
    book = book_of(api, tmp_path)
    try:
        api.write_log("p", "a\nb\n")
        book.follow(key_of("p"), 1, "p")
        wait_copied(book, "p", "a\nb\n")
        api.drop_log_streams("p")
        api.write_log("p", "c\n")  # same second as a and b, most likely: sinceTime sends them
        wait_copied(book, "p", "a\nb\nc\n")
        assert api.calls.count(("get", "pods/log")) >= 2, "the stream was opened again"
        api.exit("p", 1)
        book.settle(key_of("p"), 1, "p")
        assert copied(book, "p") == "a\nb\nc\n"
    finally:
        book.close()


def test_a_restarted_server_resumes_a_running_pods_log_where_its_copy_stands(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    running_pod(api, "p")
    first = book_of(api, tmp_path)
    first.begin(key_of("p"), 1)
    api.write_log("p", "before the restart\n")
    first.follow(key_of("p"), 1, "p")
    wait_copied(first, "p", "before the restart\n")
    first.close()
    api.write_log("p", "while it was down\n")
    second = book_of(api, tmp_path)
    try:
        second.follow(key_of("p"), 1, "p")
        api.write_log("p", "after\n")
        wait_copied(second, "p", "before the restart\nwhile it was down\nafter\n")
    finally:
        second.close()


def test_a_line_cut_in_the_middle_is_kept_once_from_the_resumed_stream() -> None:
    cursor = LogCursor(offset=0)
    first, later = 1_700_000_000_000_000_000, 1_700_000_000_500_000_000
    stamp, stamp_later = rfc3339_nano(first).encode(), rfc3339_nano(later).encode()
    cut = Resumed(cursor)
    assert cut.feed(stamp + b" x\n" + stamp + b" y\n" + stamp_later + b" hal") == b"x\ny\n"
    resumed = Resumed(cursor)  # the stream asks from the second of `first` again
    again = stamp + b" x\n" + stamp + b" y\n" + stamp_later + b" half and whole\n"
    assert resumed.feed(again) == b"half and whole\n"
    assert (cursor.stamp, cursor.same, cursor.offset) == (later, 1, len(b"x\ny\nhalf and whole\n"))


def test_the_fake_serves_the_pod_log_options_as_kubernetes_documents(
    api: FakeKubeAPI, tmp_path: Path
) -> None:
    running_pod(api, "p")
    api.write_log("p", "first\nsecond\nthird\n")
    core = k8s.CoreV1Api(client_of(api, tmp_path))
    assert core.read_namespaced_pod_log("p", "jobs", tail_lines=2) == "second\nthird\n"
    assert core.read_namespaced_pod_log("p", "jobs", limit_bytes=8) == "first\nse"
    assert core.read_namespaced_pod_log("p", "jobs", since_seconds=3600).count("\n") == 3
    stamped = core.read_namespaced_pod_log("p", "jobs", timestamps=True).splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == ["first", "second", "third"]
    assert all(line.split(" ", 1)[0].endswith("Z") for line in stamped)
    with pytest.raises(ApiException) as refused:
        core.read_namespaced_pod_log("p", "jobs", since_seconds=0)
    assert refused.value.status == 422
