"""`ftp://` data and script prerequisites, from a real FTP server (pyftpdlib) on loopback."""

from __future__ import annotations

import os
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from pyftpdlib.authorizers import DummyAuthorizer
from pyftpdlib.handlers import FTPHandler
from pyftpdlib.servers import FTPServer

from backends.base import EventKind, Fetch, InstanceKey, Material
from server.jobs.exit_codes import PREREQUISITE_FETCH_REFUSED, classify
from simulator.fetch_policy import ALLOWED_NETWORKS_ENV, FetchPolicy
from simulator.prereqs import MaterialError, MaterialKind, MaterialStore, UnservableMaterial
from tests.simulated import Collector, backend, job, log_text, role

LOOPBACK = FetchPolicy.parse("127.0.0.1")
PASSWORD = "p@ss:w0rd"  # an @ and a : as people type them; quoted in URLs where it must be


class FtpSite:
    """A directory served over FTP on loopback: anonymous read, and user bob with PASSWORD.
    Counts connections and files sent, so a test can tell whether the server was asked."""

    def __init__(self, root: Path, masquerade: str | None = None) -> None:
        self.root = root
        self.connections = 0
        self.sent: Counter[str] = Counter()
        site = self
        authorizer = DummyAuthorizer()
        authorizer.add_anonymous(str(root / "public"))
        authorizer.add_user("bob", PASSWORD, str(root / "bob"), perm="elr")

        class Handler(FTPHandler):
            def on_connect(self) -> None:
                site.connections += 1

            def on_file_sent(self, file: str) -> None:
                site.sent[Path(file).name] += 1

        Handler.authorizer = authorizer
        Handler.auth_failed_timeout = 0.05  # pyftpdlib waits 3 s after a wrong password
        Handler.banner = "test ftp"
        Handler.masquerade_address = masquerade  # the address its PASV replies name
        self.server = FTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.address[1]
        self.url = f"ftp://127.0.0.1:{self.port}"
        self.thread = threading.Thread(
            target=self.server.serve_forever,
            kwargs={"timeout": 0.05, "handle_exit": False},
            daemon=True,
        )
        self.thread.start()

    def close(self) -> None:
        self.server.close_all()
        self.thread.join(5)


@pytest.fixture
def ftp_site(tmp_path: Path) -> Iterator[FtpSite]:
    public = tmp_path / "ftp" / "public"
    (public / "code" / "lib").mkdir(parents=True)
    (public / "labels.txt").write_text("cat\ndog\n")
    (public / "train.bin").write_bytes(os.urandom(300_000))
    (public / "code" / "train.sh").write_text("echo training from ftp\n")
    (public / "code" / "lib" / "util.sh").write_text("echo util\n")
    bob = tmp_path / "ftp" / "bob"
    bob.mkdir()
    (bob / "private.csv").write_text("1,2,3\n")
    site = FtpSite(tmp_path / "ftp")
    yield site
    site.close()


@pytest.fixture
def store(tmp_path: Path) -> MaterialStore:
    return MaterialStore(
        tmp_path / "cache", storage_dir=tmp_path / "storage", http_timeout=5, fetch_policy=LOOPBACK
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cache_entries(store: MaterialStore) -> list[Path]:
    found: list[Path] = []
    for part in ("download", ".tmp"):
        folder = store.cache_dir / part
        if folder.is_dir():
            found.extend(folder.iterdir())
    return found


# --- what is fetched --------------------------------------------------------------------------


def test_anonymous_files_are_downloaded_once_and_reported(
    store: MaterialStore, ftp_site: FtpSite
) -> None:
    uris = [f"{ftp_site.url}/labels.txt", f"{ftp_site.url}/train.bin"]
    said: list[str] = []
    mount = store.materialize(
        "mnist", MaterialKind.DOWNLOAD, uris, progress=lambda _n, m: said.append(m)
    )
    assert (mount.host_path / "labels.txt").read_text() == "cat\ndog\n"
    public = ftp_site.root / "public"
    assert (mount.host_path / "train.bin").read_bytes() == (public / "train.bin").read_bytes()
    assert f"downloading data 'mnist' (300.0 kB) from {ftp_site.url}/train.bin" in said
    again = store.materialize("mnist", MaterialKind.DOWNLOAD, uris)
    assert again == mount
    assert ftp_site.sent == {"labels.txt": 1, "train.bin": 1}  # the second came from the cache


def test_a_user_and_password_log_in_and_the_password_is_never_shown(
    store: MaterialStore, ftp_site: FtpSite
) -> None:
    quoted = f"ftp://bob:p%40ss%3Aw0rd@127.0.0.1:{ftp_site.port}/private.csv"
    mount = store.materialize("mine", MaterialKind.DOWNLOAD, [quoted])
    assert (mount.host_path / "private.csv").read_text() == "1,2,3\n"
    typed = f"ftp://bob:{PASSWORD}@127.0.0.1:{ftp_site.port}/private.csv"  # raw @ and :
    assert store.materialize("typed", MaterialKind.DOWNLOAD, [typed]).host_path.is_dir()

    said: list[str] = []
    wrong = f"ftp://bob:{PASSWORD}x@127.0.0.1:{ftp_site.port}/private.csv"
    with pytest.raises(MaterialError) as err:
        store.materialize(
            "mine2", MaterialKind.DOWNLOAD, [wrong], progress=lambda _n, m: said.append(m)
        )
    message = str(err.value)
    assert message == (
        f"prerequisite 'mine2': ftp://***@127.0.0.1:{ftp_site.port}/private.csv: "
        "login refused (530) for user 'bob'"
    )
    assert "p@ss" not in message + "".join(said) and "w0rd" not in message + "".join(said)


def test_a_directory_is_copied_as_a_tree(store: MaterialStore, ftp_site: FtpSite) -> None:
    for url in (f"{ftp_site.url}/code", f"{ftp_site.url}/code/"):
        mount = store.materialize("data", MaterialKind.DOWNLOAD, [url])
        assert (mount.host_path / "code" / "train.sh").read_text() == "echo training from ftp\n"
        assert (mount.host_path / "code" / "lib" / "util.sh").read_text() == "echo util\n"


def test_a_script_on_ftp_is_copied_into_the_script_directory_itself(
    store: MaterialStore, ftp_site: FtpSite
) -> None:
    store.check("pytorch_example", MaterialKind.CLONE, [f"{ftp_site.url}/code"])
    mount = store.materialize("pytorch_example", MaterialKind.CLONE, [f"{ftp_site.url}/code"])
    assert sorted(p.name for p in mount.host_path.iterdir()) == ["lib", "train.sh"]
    assert mount.read_only
    # the same URL as data is another entry, with the directory inside
    data = store.materialize("pytorch_example", MaterialKind.DOWNLOAD, [f"{ftp_site.url}/code"])
    assert data.host_path != mount.host_path
    assert (data.host_path / "code" / "train.sh").is_file()
    # a v1 codeDir on FTP is copied to code/ the same way
    code = store.materialize(
        "code", MaterialKind.DOWNLOAD, [f"{ftp_site.url}/code/"], as_directory=True
    )
    assert sorted(p.name for p in code.host_path.iterdir()) == ["lib", "train.sh"]
    # the login directory itself, as the OpenPAI examples write it (ftp://host)
    top = store.materialize("all", MaterialKind.CLONE, [ftp_site.url])
    assert (top.host_path / "code" / "lib" / "util.sh").is_file()
    assert (top.host_path / "labels.txt").is_file()


# --- what is refused, and how it is said --------------------------------------------------------


def test_a_missing_file_names_the_prerequisite_url_and_reply(
    store: MaterialStore, ftp_site: FtpSite
) -> None:
    url = f"{ftp_site.url}/missing.tar.gz"
    with pytest.raises(MaterialError) as err:
        store.materialize("imagenet", MaterialKind.DOWNLOAD, [f"{ftp_site.url}/labels.txt", url])
    assert str(err.value) == (
        f"prerequisite 'imagenet': {url} returned FTP 550: no such file or directory, "
        "or not readable"
    )
    assert cache_entries(store) == []


def test_a_loopback_ftp_host_is_refused_by_the_fetch_policy_as_http_is(
    tmp_path: Path, ftp_site: FtpSite
) -> None:
    store = MaterialStore(tmp_path / "cache", storage_dir=tmp_path / "st")  # the default policy
    url = f"ftp://bob:{PASSWORD}@127.0.0.1:{ftp_site.port}/private.csv"
    with pytest.raises(MaterialError) as err:
        store.materialize("secrets", MaterialKind.DOWNLOAD, [url])
    message = str(err.value)
    assert message.startswith(
        f"prerequisite 'secrets': ftp://***@127.0.0.1:{ftp_site.port}/private.csv: refused: "
    )
    assert "127.0.0.1 is a loopback address" in message
    assert f"adding 127.0.0.1 to {ALLOWED_NETWORKS_ENV}" in message
    assert "w0rd" not in message
    with pytest.raises(MaterialError, match=r"host localhost resolves to .*, a loopback address"):
        store.materialize("s2", MaterialKind.CLONE, [f"ftp://localhost:{ftp_site.port}/code"])
    assert ftp_site.connections == 0  # the server never saw a connection
    assert cache_entries(store) == []


def test_a_passive_reply_naming_another_address_is_not_followed(tmp_path: Path) -> None:
    """The data connection goes to the checked peer, whatever address the server names."""
    (tmp_path / "ftp" / "public").mkdir(parents=True)
    (tmp_path / "ftp" / "bob").mkdir()
    (tmp_path / "ftp" / "public" / "x.csv").write_text("4,5\n")
    site = FtpSite(tmp_path / "ftp", masquerade="192.0.2.1")  # TEST-NET-1: nothing there
    try:
        store = MaterialStore(
            tmp_path / "cache", storage_dir=tmp_path / "st", http_timeout=5, fetch_policy=LOOPBACK
        )
        mount = store.materialize("d", MaterialKind.DOWNLOAD, [f"{site.url}/x.csv"])
        assert (mount.host_path / "x.csv").read_text() == "4,5\n"
    finally:
        site.close()


def test_an_unreachable_host_and_the_size_cap(tmp_path: Path, ftp_site: FtpSite) -> None:
    store = MaterialStore(
        tmp_path / "cache",
        storage_dir=tmp_path / "st",
        fetch_policy=LOOPBACK,
        max_download_bytes=100_000,
    )
    port = free_port()
    with pytest.raises(MaterialError) as err:
        store.materialize("d", MaterialKind.DOWNLOAD, [f"ftp://127.0.0.1:{port}/x.csv"])
    assert str(err.value).startswith(f"prerequisite 'd': ftp://127.0.0.1:{port}/x.csv: could not")
    assert "refused" in str(err.value).lower()
    with pytest.raises(MaterialError) as err:
        store.materialize("big", MaterialKind.DOWNLOAD, [f"{ftp_site.url}/train.bin"])
    assert str(err.value) == (
        f"prerequisite 'big': {ftp_site.url}/train.bin is 300.0 kB, over the download limit "
        "of 100.0 kB per prerequisite"
    )
    with pytest.raises(
        MaterialError, match=rf"{ftp_site.url} goes over the download limit of 100\.0 kB"
    ):
        store.materialize("tree", MaterialKind.DOWNLOAD, [ftp_site.url + "/code", ftp_site.url])
    assert cache_entries(store) == []


def test_an_ftp_url_without_a_host_is_refused_at_the_check(store: MaterialStore) -> None:
    with pytest.raises(UnservableMaterial, match=r"prerequisite 'd': ftp:///x.csv has no host"):
        store.check("d", MaterialKind.DOWNLOAD, ["ftp:///x.csv"])


def test_ftp_failures_end_with_the_exit_codes_of_the_same_http_failures(
    tmp_path: Path, ftp_site: FtpSite
) -> None:
    """Refused by the policy, missing, unreachable: one exit code each, whatever the scheme."""
    web = tmp_path / "web"
    web.mkdir()
    http = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=web))
    threading.Thread(target=http.serve_forever, daemon=True).start()
    try:
        http_url = f"http://127.0.0.1:{http.server_address[1]}"
        closed = f"127.0.0.1:{free_port()}"
        allowing = MaterialStore(
            tmp_path / "c1", storage_dir=tmp_path / "s1", fetch_policy=LOOPBACK
        )
        default = MaterialStore(tmp_path / "c2", storage_dir=tmp_path / "s2")
        cases = [
            (default, "/x.csv", http_url, ftp_site.url),  # refused by the fetch policy
            (allowing, "/missing.csv", http_url, ftp_site.url),  # not found
            (allowing, "/x.csv", f"http://{closed}", f"ftp://{closed}"),  # nothing listens
        ]
        codes = []
        for store, path, web_base, ftp_base in cases:
            exits = []
            for base in (web_base, ftp_base):
                with pytest.raises(MaterialError) as err:
                    store.materialize("d", MaterialKind.DOWNLOAD, [base + path])
                exits.append(classify(None, start_failed_reason=str(err.value)).code)
            assert exits[0] == exits[1], (path, exits)
            codes.append(exits[0])
        assert codes[0] == PREREQUISITE_FETCH_REFUSED
    finally:
        http.shutdown()
        http.server_close()


# --- a job on the Docker simulator ----------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_job_reads_its_ftp_data_and_runs_its_ftp_script(
    tmp_path: Path, ftp_site: FtpSite
) -> None:
    materials = [
        Material(name="labels", kind=Fetch.DOWNLOAD, uris=[f"{ftp_site.url}/labels.txt"]),
        Material(
            name="mine",
            kind=Fetch.DOWNLOAD,
            uris=[f"ftp://bob:{PASSWORD}@127.0.0.1:{ftp_site.port}/private.csv"],
        ),
        Material(name="code", kind=Fetch.CLONE, uris=[f"{ftp_site.url}/code"]),
    ]
    commands = ["cat labels/labels.txt mine/private.csv", "sh code/train.sh", "sh code/lib/util.sh"]
    request = job(role("reader", commands, materials=materials))
    async with backend(tmp_path / "state", allowed_fetch_networks=["127.0.0.1"]) as sim:
        events = Collector(sim)
        await sim.launch(request)
        ended = await events.all_ended(request)
        assert {e.exit_code for e in ended.values()} == {0}, ended
        key = InstanceKey(job_id=request.job_id, attempt=1, role="reader", index=0)
        text = await log_text(sim, key)
        assert "cat\ndog\n1,2,3" in text
        assert "training from ftp" in text and "util" in text
        assert PASSWORD not in text and "w0rd" not in text
        await sim.forget(request.job_id, 1)
        events.close()


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_job_whose_ftp_host_the_policy_refuses_fails_to_start_saying_why(
    tmp_path: Path, ftp_site: FtpSite
) -> None:
    materials = [Material(name="labels", kind=Fetch.DOWNLOAD, uris=[f"{ftp_site.url}/labels.txt"])]
    request = job(role("reader", ["cat labels/labels.txt"], materials=materials))
    async with backend(tmp_path / "state") as sim:  # the default policy: public addresses only
        events = Collector(sim)
        await sim.launch(request)
        (end,) = (await events.all_ended(request)).values()
        assert end.kind is EventKind.START_FAILED, end
        assert "127.0.0.1 is a loopback address" in end.reason
        assert classify(None, start_failed_reason=end.reason).code == PREREQUISITE_FETCH_REFUSED
        assert ftp_site.connections == 0
        await sim.forget(request.job_id, 1)
        events.close()
