"""The address policy of every fetch made for a user: what is refused, what an operator can
allow, and that the connection goes to the address that was checked."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from simulator.fetch_policy import (
    ALLOWED_NETWORKS_ENV,
    BlockedAddress,
    FetchPolicy,
    FetchPolicyError,
    GuardedTransport,
)


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd12:3456::1", "private"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "shared (carrier-grade NAT)"),
    ],
)
def test_addresses_that_are_not_public_are_refused_by_default(address: str, rule: str) -> None:
    with pytest.raises(BlockedAddress) as caught:
        FetchPolicy().check("data.example", address)
    assert caught.value.rule == rule
    assert f"resolves to {address.removeprefix('::ffff:')}," in str(caught.value)
    assert ALLOWED_NETWORKS_ENV in str(caught.value)


def test_public_addresses_and_allowed_networks_and_hosts_pass() -> None:
    FetchPolicy().check("example.org", "93.184.215.14")
    FetchPolicy().check("example.org", "2606:2800:21f:cb07:6820:80da:af6b:8b2c")
    policy = FetchPolicy.parse("10.0.0.0/8, fd00::/8, minio.lan")
    policy.check("10.9.9.9", "10.9.9.9")
    policy.check("store.lan", "fd00::5")
    policy.check("MINIO.lan.", "192.168.7.7")  # the name is allowed, whatever it resolves to
    with pytest.raises(BlockedAddress, match=r"192\.168\.7\.7"):
        policy.check("other.lan", "192.168.7.7")


def test_one_internal_answer_refuses_the_whole_name() -> None:
    def mixed(host: str, port: int) -> list[str]:
        return ["93.184.215.14", "127.0.0.1"]

    with pytest.raises(BlockedAddress, match=r"host data\.example resolves to 127\.0\.0\.1"):
        FetchPolicy().addresses("data.example", 80, mixed)


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("10.1.0.0/8", "has host bits set"),
        ("300.1.1.1", "is not a network"),
        ("files server", "neither a network"),
    ],
)
def test_bad_allow_list_entries_name_the_setting(entry: str, says: str) -> None:
    with pytest.raises(FetchPolicyError, match=f"^{ALLOWED_NETWORKS_ENV}: '{entry}' ") as caught:
        FetchPolicy.from_env({ALLOWED_NETWORKS_ENV: f"10.0.0.0/8,{entry}"})
    assert says in str(caught.value)


class _Answer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"served on {self.server.server_address[0]}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def second_loopback() -> Iterator[int]:
    """A server on 127.0.0.2 (its port): an address the tests can allow on its own."""
    server = ThreadingHTTPServer(("127.0.0.2", 0), _Answer)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_the_connection_goes_to_the_address_that_was_checked(second_loopback: int) -> None:
    answers = iter([["127.0.0.2"], ["127.0.0.1"]])  # a name that changes its answer (rebinding)
    asked: list[str] = []

    def rebinding(host: str, port: int) -> list[str]:
        asked.append(host)
        return next(answers)

    transport = GuardedTransport(FetchPolicy.parse("127.0.0.2"), resolve=rebinding)
    with httpx.Client(transport=transport) as client:
        response = client.get(f"http://files.example:{second_loopback}/")
    assert response.text == "served on 127.0.0.2"
    assert asked == ["files.example"]  # resolved once; the socket was not given the name
