"""Prerequisites from a real HTTP server on loopback, real git repositories and real files."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from simulator.fetch_policy import ALLOWED_NETWORKS_ENV, FetchPolicy
from simulator.prereqs import (
    MaterialError,
    MaterialKind,
    MaterialStore,
    Mount,
    RepoSpec,
    UnservableMaterial,
    parse_repo,
    shown,
)
from simulator.settings import SettingsError, settings_from_yaml
from tests.waiting import until

REPO_ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = FetchPolicy.parse("127.0.0.1")  # the test sites listen there


# --- a counting HTTP server ------------------------------------------------------------------


class Site:
    """A directory served over HTTP on loopback that counts the requests for each path."""

    def __init__(self, root: Path, host: str = "127.0.0.1") -> None:
        self.root = root
        self.hits: Counter[str] = Counter()
        self.redirects: dict[str, str] = {}  # path -> where it redirects to
        self.gate: threading.Event | None = None  # when set, requests wait for it
        self._lock = threading.Lock()
        site = self

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, directory=str(site.root), **kwargs)  # type: ignore[arg-type]

            def do_GET(self) -> None:
                with site._lock:
                    site.hits[self.path] += 1
                if site.gate is not None:
                    site.gate.wait(20)
                if self.path in site.redirects:
                    self.send_response(302)
                    self.send_header("Location", site.redirects[self.path])
                    self.end_headers()
                    return
                if self.path.startswith("/stream/"):  # a body without Content-Length
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(b"x" * int(self.path.rsplit("/", 1)[1]))
                    return
                super().do_GET()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        if self.gate is not None:
            self.gate.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    root = tmp_path / "site"
    root.mkdir()
    (root / "train.bin").write_bytes(os.urandom(200_000))
    (root / "labels.txt").write_text("cat\ndog\n")
    s = Site(root)
    yield s
    s.close()


@pytest.fixture
def allowed(tmp_path: Path) -> Path:
    path = tmp_path / "allowed"
    path.mkdir()
    return path


@pytest.fixture
def store(tmp_path: Path, allowed: Path) -> MaterialStore:
    return MaterialStore(
        tmp_path / "cache",
        storage_dir=tmp_path / "storage",
        allowed_file_roots=[allowed],
        http_timeout=5,
        fetch_policy=LOOPBACK,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cache_entries(store: MaterialStore) -> list[Path]:
    """Every finished or half-made entry in the cache."""
    found = []
    for part in ("download", "clone", ".tmp"):
        folder = store.cache_dir / part
        if folder.is_dir():
            found.extend(folder.iterdir())
    return found


# --- data ------------------------------------------------------------------------------------


def test_sixteen_instances_download_once(store: MaterialStore, site: Site) -> None:
    uris = [f"{site.url}/train.bin", f"{site.url}/labels.txt"]
    messages: list[str] = []
    site.gate = threading.Event()  # hold the first download until every thread is waiting
    results: list[Mount] = []
    errors: list[BaseException] = []

    def instance() -> None:
        try:
            got = store.materialize(
                "mnist", MaterialKind.DOWNLOAD, uris, progress=lambda _n, m: messages.append(m)
            )
            results.append(got)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=instance) for _ in range(16)]
    for t in threads:
        t.start()
    until(
        lambda: sum("waiting for another download" in m for m in messages) == 15,
        "15 instances waiting for the first download",
        10,
        0.01,
    )
    site.gate.set()
    for t in threads:
        t.join(20)

    assert not errors
    assert len({r.host_path for r in results}) == 1 and len(results) == 16
    mount = results[0]
    assert mount.read_only
    assert site.hits == {"/train.bin": 1, "/labels.txt": 1}
    assert (mount.host_path / "train.bin").read_bytes() == (site.root / "train.bin").read_bytes()
    assert (mount.host_path / "labels.txt").read_text() == "cat\ndog\n"
    assert any(
        m == f"downloading data 'mnist' (200.0 kB) from {site.url}/train.bin" for m in messages
    )

    again: list[str] = []
    assert (
        store.materialize("mnist", "download", uris, progress=lambda _n, m: again.append(m))
        == mount
    )
    assert site.hits == {"/train.bin": 1, "/labels.txt": 1}
    assert again == ["data 'mnist' is cached"]


_PROCESS = """
import sys
from pathlib import Path
from simulator.fetch_policy import FetchPolicy
from simulator.prereqs import MaterialStore
store = MaterialStore(
    Path(sys.argv[1]), storage_dir=Path(sys.argv[2]), fetch_policy=FetchPolicy.parse("127.0.0.1")
)
def show(name, message):
    print(message, flush=True)
mount = store.materialize("mnist", "download", [sys.argv[3]], progress=show)
print("PATH", mount.host_path, flush=True)
"""


def test_processes_sharing_a_cache_download_once(tmp_path: Path, site: Site) -> None:
    url = f"{site.url}/train.bin"
    site.gate = threading.Event()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    argv = [sys.executable, "-c", _PROCESS, str(tmp_path / "cache"), str(tmp_path / "st"), url]
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT)
        for _ in range(3)
    ]
    lines: list[list[str]] = [[] for _ in procs]

    def read(i: int) -> None:
        assert procs[i].stdout is not None
        lines[i].extend(line.strip() for line in procs[i].stdout)

    readers = [threading.Thread(target=read, args=(i,)) for i in range(3)]
    for r in readers:
        r.start()
    try:
        # one process downloads, the other two wait on the lock file before the gate opens
        until(
            lambda: sum(any("waiting" in x for x in ls) for ls in lines) == 2,
            "two waiting",
            20,
            0.01,
        )
        until(lambda: site.hits == {"/train.bin": 1}, "one download", 10, 0.01)
    finally:
        site.gate.set()
        for p in procs:
            p.wait(20)
        for r in readers:
            r.join(5)
    assert [p.returncode for p in procs] == [0, 0, 0]
    paths = {line for ls in lines for line in ls if line.startswith("PATH ")}
    assert len(paths) == 1
    assert site.hits == {"/train.bin": 1}


def test_entry_names_come_from_the_url_path(store: MaterialStore, site: Site) -> None:
    mount = store.materialize(
        "d", MaterialKind.DOWNLOAD, [f"{site.url}/", f"{site.url}/labels.txt?v=2"]
    )
    assert sorted(p.name for p in mount.host_path.iterdir()) == ["index", "labels.txt"]
    assert "train.bin" in (mount.host_path / "index").read_text()  # the server's listing


def test_http_404_names_the_prerequisite_and_url(store: MaterialStore, site: Site) -> None:
    url = f"{site.url}/missing.tar.gz"
    with pytest.raises(MaterialError) as err:
        store.materialize("imagenet", MaterialKind.DOWNLOAD, [url])
    assert str(err.value) == f"prerequisite 'imagenet': {url} returned HTTP 404 File not found"
    assert cache_entries(store) == []


def test_connection_refused_is_reported_without_credentials(store: MaterialStore) -> None:
    port = free_port()
    with pytest.raises(MaterialError) as err:
        store.materialize("d", MaterialKind.DOWNLOAD, [f"http://bob:s3cret@127.0.0.1:{port}/x.csv"])
    message = str(err.value)
    assert message.startswith(
        f"prerequisite 'd': http://***@127.0.0.1:{port}/x.csv: could not connect"
    )
    assert "refused" in message.lower()
    assert "s3cret" not in message


def test_a_password_holding_an_at_sign_is_masked_whole() -> None:
    """urlsplit takes the last @ of the authority as its end; the mask must reach as far."""
    assert shown("http://bob:p@ss:w0rd@host/x.csv") == "http://***@host/x.csv"
    assert (
        shown("see ftp://u:a@b@h:21/d and http://h/e@f") == "see ftp://***@h:21/d and http://h/e@f"
    )


@pytest.mark.parametrize(
    ("path", "amount"),
    [("/big.bin", "is 5.0 kB,"), ("/stream/5000", "goes")],
    ids=["content-length", "streamed"],
)
def test_downloads_over_the_size_cap_are_refused(
    tmp_path: Path, site: Site, path: str, amount: str
) -> None:
    (site.root / "big.bin").write_bytes(b"y" * 5000)
    store = MaterialStore(
        tmp_path / "cache",
        storage_dir=tmp_path / "st",
        max_download_bytes=4000,
        fetch_policy=LOOPBACK,
    )
    with pytest.raises(MaterialError) as err:
        store.materialize("big", MaterialKind.DOWNLOAD, [f"{site.url}{path}"])
    assert str(err.value) == (
        f"prerequisite 'big': {site.url}{path} {amount} over the download limit of 4.0 kB "
        "per prerequisite"
    )
    assert cache_entries(store) == []


def test_size_cap_counts_all_uris_of_a_prerequisite(tmp_path: Path, site: Site) -> None:
    (site.root / "part1.bin").write_bytes(b"z" * 2500)
    (site.root / "part2.bin").write_bytes(b"z" * 2500)
    store = MaterialStore(
        tmp_path / "cache",
        storage_dir=tmp_path / "st",
        max_download_bytes=4000,
        fetch_policy=LOOPBACK,
    )
    with pytest.raises(
        MaterialError, match=r"part2\.bin brings it to 5\.0 kB, over the download limit of 4\.0 kB"
    ):
        store.materialize(
            "big", MaterialKind.DOWNLOAD, [f"{site.url}/part1.bin", f"{site.url}/part2.bin"]
        )
    assert cache_entries(store) == []
    assert store.materialize(
        "ok", MaterialKind.DOWNLOAD, [f"{site.url}/part1.bin"]
    ).host_path.is_dir()


def test_failed_download_leaves_no_entry(store: MaterialStore, site: Site) -> None:
    uris = [f"{site.url}/train.bin", f"{site.url}/late.txt"]
    with pytest.raises(MaterialError, match=r"late\.txt returned HTTP 404"):
        store.materialize("d", MaterialKind.DOWNLOAD, uris)
    assert cache_entries(store) == []
    (site.root / "late.txt").write_text("here now")
    mount = store.materialize("d", MaterialKind.DOWNLOAD, uris)
    assert (mount.host_path / "late.txt").read_text() == "here now"
    assert site.hits["/train.bin"] == 2  # nothing half-made was reused


# --- addresses that are not public ------------------------------------------------------------


def test_a_loopback_url_is_refused_by_default(tmp_path: Path, site: Site) -> None:
    store = MaterialStore(tmp_path / "cache", storage_dir=tmp_path / "st")
    with pytest.raises(MaterialError) as err:
        store.materialize("secrets", MaterialKind.DOWNLOAD, [f"{site.url}/labels.txt"])
    message = str(err.value)
    assert message.startswith(f"prerequisite 'secrets': {site.url}/labels.txt: refused: ")
    assert "127.0.0.1 is a loopback address" in message
    assert f"adding 127.0.0.1 to {ALLOWED_NETWORKS_ENV}" in message
    assert site.hits == {}  # the loopback service never saw a request
    assert cache_entries(store) == []


def test_a_name_that_resolves_to_loopback_is_refused(tmp_path: Path, site: Site) -> None:
    store = MaterialStore(tmp_path / "cache", storage_dir=tmp_path / "st")
    port = site.server.server_address[1]
    with pytest.raises(MaterialError, match=r"host localhost resolves to .*, a loopback address"):
        store.materialize("secrets", MaterialKind.DOWNLOAD, [f"http://localhost:{port}/x"])
    assert site.hits == {}


def test_a_redirect_from_an_allowed_host_to_loopback_is_refused(tmp_path: Path, site: Site) -> None:
    allowed = Site(tmp_path, host="127.0.0.2")  # allowed below; 127.0.0.1 is not
    try:
        allowed.redirects["/data.csv"] = f"{site.url}/labels.txt"
        store = MaterialStore(
            tmp_path / "cache",
            storage_dir=tmp_path / "st",
            fetch_policy=FetchPolicy.parse("127.0.0.2"),
        )
        with pytest.raises(MaterialError, match=r"127\.0\.0\.1 is a loopback address"):
            store.materialize("data", MaterialKind.DOWNLOAD, [f"{allowed.url}/data.csv"])
        assert allowed.hits == {"/data.csv": 1}
        assert site.hits == {}  # the redirect was not followed
    finally:
        allowed.close()


# --- local files -----------------------------------------------------------------------------


def test_local_files_under_the_allowed_roots_are_copied(
    store: MaterialStore, allowed: Path
) -> None:
    (allowed / "ds" / "sub").mkdir(parents=True)
    (allowed / "ds" / "sub" / "a.txt").write_text("a")
    (allowed / "notes.txt").write_text("first")
    uris = [(allowed / "ds").as_uri(), str(allowed / "notes.txt")]
    mount = store.materialize("local", MaterialKind.DOWNLOAD, uris)
    assert mount.read_only
    assert (mount.host_path / "ds" / "sub" / "a.txt").read_text() == "a"
    assert (mount.host_path / "notes.txt").read_text() == "first"
    assert store.materialize("local", MaterialKind.DOWNLOAD, uris) == mount

    (allowed / "notes.txt").write_text("second edit")
    changed = store.materialize("local", MaterialKind.DOWNLOAD, uris)
    assert changed.host_path != mount.host_path
    assert (changed.host_path / "notes.txt").read_text() == "second edit"
    assert (mount.host_path / "notes.txt").read_text() == "first"  # entries never change

    with pytest.raises(MaterialError) as err:
        store.materialize("local", MaterialKind.DOWNLOAD, [str(allowed / "gone.csv")])
    assert str(err.value) == f"prerequisite 'local': {allowed / 'gone.csv'} does not exist"


def test_local_paths_outside_the_allowed_roots_are_refused(
    store: MaterialStore, allowed: Path, tmp_path: Path
) -> None:
    (allowed / "escape").symlink_to("/etc")
    for uri in ["file:///etc/passwd", "/etc/passwd", (allowed / "escape" / "passwd").as_uri()]:
        with pytest.raises(UnservableMaterial) as err:
            store.check("secrets", MaterialKind.DOWNLOAD, [uri])
        assert str(err.value) == (
            f"prerequisite 'secrets': /etc/passwd is outside the allowed roots ({allowed})"
        )
    with pytest.raises(UnservableMaterial, match="must name a path on this machine"):
        store.check("secrets", MaterialKind.DOWNLOAD, ["file://otherhost/etc/passwd"])
    with pytest.raises(UnservableMaterial, match="outside the allowed roots"):
        store.materialize("secrets", MaterialKind.DOWNLOAD, ["file:///etc/passwd"])
    bare = MaterialStore(tmp_path / "c2", storage_dir=tmp_path / "s2")
    with pytest.raises(UnservableMaterial, match="no allowed roots are configured"):
        bare.check("x", MaterialKind.DOWNLOAD, [str(allowed)])
    assert cache_entries(store) == []


# --- refused at launch -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "uri", "scheme", "supported"),
    [
        (MaterialKind.DOWNLOAD, "hdfs://10.0.0.1:9000/imagenet", "hdfs", "http, https, ftp, file"),
        (MaterialKind.DOWNLOAD, "nfs://server/export/data", "nfs", "http, https, ftp, file"),
        (MaterialKind.DOWNLOAD, "s3://bucket/key", "s3", "http, https, ftp, file"),
        (
            MaterialKind.CLONE,
            "ssh://git@github.com/a/b.git",
            "ssh",
            "http, https, git, file, ftp (copied)",
        ),
        (
            MaterialKind.CLONE,
            "git@github.com:a/b.git",
            "ssh",
            "http, https, git, file, ftp (copied)",
        ),
        (
            MaterialKind.MOUNT,
            "hdfs://10.151.40.179:9000/core/out",
            "hdfs",
            "file, or a storage name",
        ),
        (MaterialKind.MOUNT, "https://example.com/out", "https", "file, or a storage name"),
    ],
)
def test_schemes_the_simulator_cannot_serve_are_refused(
    store: MaterialStore, kind: MaterialKind, uri: str, scheme: str, supported: str
) -> None:
    expected = (
        f"prerequisite 'imagenet': scheme '{scheme}' cannot be served by the local simulator "
        f"(supported: {supported})"
    )
    with pytest.raises(UnservableMaterial) as err:
        store.check("imagenet", kind, [uri])
    assert str(err.value) == expected
    with pytest.raises(UnservableMaterial) as err:
        store.materialize("imagenet", kind, [uri])
    assert str(err.value) == expected
    assert not store.cache_dir.exists() and not store.storage_dir.exists()


@pytest.mark.parametrize(
    ("name", "kind", "uris", "message"),
    [
        ("d", MaterialKind.DOWNLOAD, [], "prerequisite 'd': a data prerequisite needs a URI"),
        (
            "s",
            MaterialKind.CLONE,
            [],
            "prerequisite 's': a script prerequisite takes exactly one repository (got 0)",
        ),
        (
            "s",
            MaterialKind.CLONE,
            ["https://h/a", "https://h/b"],
            "takes exactly one repository (got 2)",
        ),
        (
            "o",
            MaterialKind.MOUNT,
            ["a", "b"],
            "prerequisite 'o': a storage prerequisite takes at most one URI (got 2)",
        ),
        (
            "d",
            MaterialKind.DOWNLOAD,
            ["data.csv"],
            "'data.csv' is neither a URL nor an absolute path",
        ),
        (
            "d",
            MaterialKind.DOWNLOAD,
            ["https://a/x.csv", "https://b/x.csv"],
            "would both be saved as 'x.csv'",
        ),
        ("d", MaterialKind.DOWNLOAD, ["https:///x.csv"], "https:///x.csv has no host"),
        (
            "../up",
            MaterialKind.MOUNT,
            [],
            "prerequisite name '../up' cannot be used as a directory name",
        ),
        (
            "o",
            MaterialKind.MOUNT,
            ["../up"],
            "prerequisite 'o': storage name '../up' cannot be used",
        ),
        ("s", MaterialKind.CLONE, ["https://h/a/b@--upload-pack=x"], "is not a git ref"),
    ],
)
def test_bad_uri_lists_are_refused(
    store: MaterialStore, name: str, kind: MaterialKind, uris: list[str], message: str
) -> None:
    with pytest.raises(UnservableMaterial) as err:
        store.check(name, kind, uris)
    assert message in str(err.value)


# --- storage ---------------------------------------------------------------------------------


def test_storage_is_a_persistent_writable_directory_of_its_owner(
    store: MaterialStore, tmp_path: Path
) -> None:
    mount = store.materialize("ckpt", MaterialKind.MOUNT, [], owner="alice")
    assert mount == Mount(store.storage_dir / "users" / "alice" / "ckpt", read_only=False)
    (mount.host_path / "epoch1.pt").write_text("weights")

    restarted = MaterialStore(tmp_path / "cache", storage_dir=tmp_path / "storage")
    again = restarted.materialize("ckpt", MaterialKind.MOUNT, [], owner="alice")
    assert (again.host_path / "epoch1.pt").read_text() == "weights"

    shared_a = store.materialize("out_a", MaterialKind.MOUNT, ["team"], owner="alice")
    shared_b = store.materialize("out_b", MaterialKind.MOUNT, ["team"], owner="alice")
    assert shared_a.host_path == shared_b.host_path == store.storage_dir / "users/alice/team"
    assert store.materialize("in", MaterialKind.MOUNT, ["team"], read_only=True).read_only


def test_a_storage_of_the_same_name_is_another_directory_for_another_user(
    store: MaterialStore,
) -> None:
    alice = store.materialize("results", MaterialKind.MOUNT, [], owner="alice")
    (alice.host_path / "model.txt").write_text("alice's model")
    for owner in ("bob", "../alice", "alice/..", ".."):
        other = store.materialize("results", MaterialKind.MOUNT, [], owner=owner)
        assert other.host_path != alice.host_path
        assert other.host_path.parent.parent == store.storage_dir / "users"
        assert not (other.host_path / "model.txt").exists()
        shared = store.materialize("out", MaterialKind.MOUNT, ["results"], owner=owner)
        assert not (shared.host_path / "model.txt").exists()


def test_directories_under_the_allowed_roots_are_mounted_read_only(
    store: MaterialStore, allowed: Path
) -> None:
    (allowed / "results" / "run1").mkdir(parents=True)
    local = store.materialize("out", MaterialKind.MOUNT, [(allowed / "results" / "run1").as_uri()])
    assert local == Mount(allowed / "results" / "run1", read_only=True)
    assert store.still_where_checked(local)
    with pytest.raises(MaterialError, match=r"run2 is not a directory"):
        store.materialize("out", MaterialKind.MOUNT, [str(allowed / "results" / "run2")])
    (allowed / "file.txt").write_text("x")
    with pytest.raises(MaterialError, match=r"file\.txt is not a directory"):
        store.materialize("out", MaterialKind.MOUNT, [str(allowed / "file.txt")])
    with pytest.raises(UnservableMaterial, match="outside the allowed roots"):
        store.materialize("out", MaterialKind.MOUNT, ["/etc"])


def test_a_directory_swapped_for_a_symlink_after_the_check_is_not_mounted(
    store: MaterialStore, allowed: Path, tmp_path: Path
) -> None:
    checked = allowed / "data"
    checked.mkdir()
    mount = store.materialize("in", MaterialKind.MOUNT, [str(checked)])
    checked.rmdir()
    checked.symlink_to(tmp_path / "outside", target_is_directory=True)
    (tmp_path / "outside").mkdir()
    assert not store.still_where_checked(mount)


def test_the_simulators_own_state_is_refused_even_under_an_allowed_root(tmp_path: Path) -> None:
    state = tmp_path / "state"
    guarded = MaterialStore(
        state / "cache",
        storage_dir=state / "storage",
        allowed_file_roots=[tmp_path],
        protected=[state],
    )
    (state / "attempts").mkdir(parents=True)
    for path in (state, state / "attempts", tmp_path):
        with pytest.raises(UnservableMaterial, match="state directory"):
            guarded.check("in", MaterialKind.MOUNT, [str(path)])
        with pytest.raises(UnservableMaterial, match="state directory"):
            guarded.check("in", MaterialKind.DOWNLOAD, [str(path)])


# --- scripts ---------------------------------------------------------------------------------


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.fixture
def repo(allowed: Path) -> tuple[Path, str, str]:
    """A repository with two commits: 'one' (tag v1, branch feat/x), then 'two' (HEAD)."""
    path = allowed / "bench"
    path.mkdir()
    git(path, "init", "--quiet", "--initial-branch=main")
    (path / "run.sh").write_text("one")
    git(path, "add", "run.sh")
    git(path, "commit", "--quiet", "-m", "one")
    first = git(path, "rev-parse", "HEAD")
    git(path, "tag", "-a", "v1", "-m", "release")
    git(path, "branch", "feat/x")
    (path / "run.sh").write_text("two")
    git(path, "commit", "--quiet", "-am", "two")
    return path, first, git(path, "rev-parse", "HEAD")


def test_clone_checks_out_the_asked_commit_and_caches_it(
    store: MaterialStore, repo: tuple[Path, str, str], tmp_path: Path
) -> None:
    path, first, second = repo
    url = path.as_uri()
    mount = store.materialize("code", MaterialKind.CLONE, [f"{url}@{first}"])
    assert mount.read_only
    assert (mount.host_path / "run.sh").read_text() == "one"
    assert git(mount.host_path, "rev-parse", "HEAD") == first

    head = store.materialize("code", MaterialKind.CLONE, [url])
    assert (head.host_path / "run.sh").read_text() == "two"
    assert git(head.host_path, "rev-parse", "HEAD") == second

    for ref in ("@v1", "#feat/x", f"@{first[:8]}"):
        assert (
            store.materialize("code", MaterialKind.CLONE, [url + ref]).host_path / "run.sh"
        ).read_text() == "one"
    assert (
        store.materialize("code", MaterialKind.CLONE, [f"{url}@v1"]) == mount
    )  # keyed by the commit

    path.rename(tmp_path / "allowed" / "moved")  # the repository is gone; the cache still serves
    messages: list[str] = []
    cached = store.materialize(
        "code", MaterialKind.CLONE, [f"{url}@{first}"], progress=lambda _n, m: messages.append(m)
    )
    assert cached == mount
    assert messages == [f"script 'code' is cached at {first[:12]}"]


def test_a_list_of_repositories_is_checked_out_each_in_a_directory_of_its_name(
    store: MaterialStore, repo: tuple[Path, str, str], allowed: Path
) -> None:
    path, first, second = repo
    bare = allowed / "tools.git"
    git(allowed, "clone", "--quiet", "--bare", str(path), str(bare))
    uris = [f"{path.as_uri()}@{first}", f"{bare}@{second[:8]}"]
    store.check("code", MaterialKind.CLONE, uris, per_repository=True)
    mount = store.materialize("code", MaterialKind.CLONE, uris, per_repository=True)
    assert sorted(p.name for p in mount.host_path.iterdir()) == ["bench", "tools"]
    assert (mount.host_path / "bench" / "run.sh").read_text() == "one"
    assert (mount.host_path / "tools" / "run.sh").read_text() == "two"
    one = store.materialize("code", MaterialKind.CLONE, uris[:1], per_repository=True)
    assert [p.name for p in one.host_path.iterdir()] == ["bench"]  # a list of one: the same
    with pytest.raises(UnservableMaterial) as err:
        store.check(
            "code", MaterialKind.CLONE, [str(path), f"{bare}/../bench"], per_repository=True
        )
    assert str(err.value) == (
        f"prerequisite 'code': {path} and {bare}/../bench would both be checked out at code/bench"
    )
    with pytest.raises(UnservableMaterial, match="needs at least one repository"):
        store.check("code", MaterialKind.CLONE, [], per_repository=True)


def test_clone_errors_name_the_prerequisite_repository_and_cause(
    store: MaterialStore, repo: tuple[Path, str, str], allowed: Path
) -> None:
    path, _first, _second = repo
    url = path.as_uri()
    with pytest.raises(MaterialError) as err:
        store.materialize("code", MaterialKind.CLONE, [f"{url}@{'0' * 40}"])
    assert str(err.value) == f"prerequisite 'code': {url} has no commit '{'0' * 40}'"

    with pytest.raises(MaterialError) as err:
        store.materialize("code", MaterialKind.CLONE, [f"{url}@nope"])
    assert str(err.value) == f"prerequisite 'code': {url} has no branch, tag or commit 'nope'"

    missing = (allowed / "missing").as_uri()
    with pytest.raises(MaterialError) as err:
        store.materialize("code", MaterialKind.CLONE, [missing])
    message = str(err.value)
    assert message.startswith(f"prerequisite 'code': git could not list {missing}: fatal: ")
    assert "missing" in message.split("fatal: ", 1)[1]
    assert cache_entries(store) == []


def test_clone_over_git_protocol(store: MaterialStore, repo: tuple[Path, str, str]) -> None:
    path, first, _second = repo
    port = free_port()
    daemon = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={path.parent}",
         "--listen=127.0.0.1", f"--port={port}", str(path.parent)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        until(listening, "git daemon listening", 10, 0.01)
        url = f"git://127.0.0.1:{port}/bench"
        head = store.materialize("code", MaterialKind.CLONE, [url])
        assert (head.host_path / "run.sh").read_text() == "two"
        old = store.materialize("code", MaterialKind.CLONE, [f"{url}@{first}"])
        assert (old.host_path / "run.sh").read_text() == "one"
    finally:
        daemon.terminate()
        daemon.wait(10)


def test_repository_specs() -> None:
    assert parse_repo("s", "github.com/MaggieQi/benchmarks") == RepoSpec(
        "https://github.com/MaggieQi/benchmarks", None
    )
    assert parse_repo("s", "github.com/a/b@1a2b3c4") == RepoSpec(
        "https://github.com/a/b", "1a2b3c4"
    )
    assert parse_repo("s", "https://tok@github.com/a/b.git@v2") == RepoSpec(
        "https://tok@github.com/a/b.git", "v2"
    )
    assert parse_repo("s", "https://tok@github.com/a/b.git") == RepoSpec(
        "https://tok@github.com/a/b.git", None
    )
    assert parse_repo("s", "http://h/a/b#feat/x") == RepoSpec("http://h/a/b", "feat/x")
    with pytest.raises(UnservableMaterial, match="scheme 'ssh'"):
        parse_repo("s", "git@github.com:a/b.git@v1")


def test_repositories_outside_the_roots_are_refused(store: MaterialStore, tmp_path: Path) -> None:
    with pytest.raises(UnservableMaterial) as err:
        store.check("code", MaterialKind.CLONE, [f"{tmp_path / 'elsewhere'}@v1"])
    assert "is outside the allowed roots" in str(err.value)
    assert str(err.value).startswith(f"prerequisite 'code': {tmp_path / 'elsewhere'} ")


@pytest.mark.parametrize(
    "uri",
    [
        "http://127.0.0.1:9/internal.git",
        "https://localhost/internal.git",
        "git://169.254.169.254/meta.git",
        "10.0.0.7/team/code.git",
    ],
)
def test_a_script_on_an_internal_address_is_refused_before_git_runs(
    tmp_path: Path, uri: str
) -> None:
    store = MaterialStore(tmp_path / "cache", storage_dir=tmp_path / "storage")
    with pytest.raises(MaterialError, match="paigraph does not fetch from loopback") as err:
        store.materialize("code", MaterialKind.CLONE, [uri])
    assert "prerequisite 'code'" in str(err.value)
    assert "PAIGRAPH_ALLOWED_FETCH_NETWORKS" in str(err.value)


def test_an_allowed_internal_repository_is_asked_for_by_git(tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    store = MaterialStore(
        tmp_path / "cache", storage_dir=tmp_path / "storage", fetch_policy=LOOPBACK
    )
    with pytest.raises(MaterialError, match="git could not list") as err:
        store.materialize("code", MaterialKind.CLONE, [f"http://127.0.0.1:{port}/repo.git"])
    assert "does not fetch" not in str(err.value)


# --- mirrors ---------------------------------------------------------------------------------


def test_a_mirrored_url_is_fetched_from_the_mirror_and_checked_as_written_there(
    tmp_path: Path, allowed: Path, site: Site
) -> None:
    (allowed / "copies").mkdir()
    (allowed / "copies" / "labels.txt").write_text("from the local copy\n")
    store = MaterialStore(
        tmp_path / "cache",
        storage_dir=tmp_path / "storage",
        allowed_file_roots=[allowed],
        fetch_policy=LOOPBACK,
        mirrors={
            "https://data.example.org/": f"{site.url}/",
            "https://data.example.org/sets/": (allowed / "copies").as_uri() + "/",
            "https://elsewhere.example.org/": (tmp_path / "storage").as_uri() + "/",
        },
    )
    # the longest prefix wins: a local copy; the entry keeps the URL's own name
    mount = store.materialize(
        "d", MaterialKind.DOWNLOAD, ["https://data.example.org/sets/labels.txt"]
    )
    assert (mount.host_path / "labels.txt").read_text() == "from the local copy\n"
    # the shorter one: the loopback site, which the fetch policy allows
    mount = store.materialize("t", MaterialKind.DOWNLOAD, ["https://data.example.org/train.bin"])
    assert (mount.host_path / "train.bin").read_bytes() == (site.root / "train.bin").read_bytes()
    assert site.hits["/train.bin"] == 1
    # a mirror outside the allowed roots is refused as that path would be
    with pytest.raises(UnservableMaterial):
        store.check("e", MaterialKind.DOWNLOAD, ["https://elsewhere.example.org/x"])


def test_a_pinned_repository_can_be_mirrored_by_a_copy_of_its_commit(
    tmp_path: Path, allowed: Path
) -> None:
    copy = allowed / "benchmarks"
    copy.mkdir()
    (copy / "run.sh").write_text("echo pinned\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}  # fmt: skip
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "pinned tree"]):
        subprocess.run(["git", *args], cwd=copy, env=env, check=True)
    pinned = "https://github.com/org/benchmarks@" + "ab" * 20
    store = MaterialStore(
        tmp_path / "cache",
        storage_dir=tmp_path / "storage",
        allowed_file_roots=[allowed],
        mirrors={pinned: copy.as_uri()},
    )
    mount = store.materialize("s", MaterialKind.CLONE, [pinned], per_repository=True)
    assert (mount.host_path / "benchmarks" / "run.sh").read_text() == "echo pinned\n"
    # another commit of the repository is not what the copy holds: fetched from its own URL
    other = "https://github.com/org/benchmarks@main"
    assert store.mirrored(other) == other


def test_the_mirrors_setting_names_a_mirror_that_is_not_a_url() -> None:
    env = {"PAIGRAPH_SIMULATOR_STATE": "/tmp/x"}
    read = settings_from_yaml("fetch_mirrors: {'https://a.org/': 'file:///srv/a/'}", environ=env)
    assert read.fetch_mirrors == {"https://a.org/": "file:///srv/a/"}
    with pytest.raises(SettingsError, match=r"fetch_mirrors.*'/srv/a/' is an http, https, git"):
        settings_from_yaml("fetch_mirrors: {'https://a.org/': /srv/a/}", environ=env)
    with pytest.raises(SettingsError, match=r"'a.org/': a mirrored prefix is an http"):
        settings_from_yaml("fetch_mirrors: {'a.org/': 'file:///srv/a/'}", environ=env)
