"""Which network addresses paigraph may fetch from on a user's behalf.

A job names the URL but the server makes the request, so non-public addresses are refused
unless `PAIGRAPH_ALLOWED_FETCH_NETWORKS` allows them, and the check is made on the address the
socket connects to (``GuardedTransport``) so DNS rebinding and redirects cannot bypass it
(docs/security.md, What the server fetches for a job).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import httpcore
import httpx

ALLOWED_NETWORKS_ENV = "PAIGRAPH_ALLOWED_FETCH_NETWORKS"

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]

_HOST_NAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?(\.[A-Za-z0-9_-]+)*"
)

# (rule, test), first match wins: the order makes ::1 "loopback" rather than "reserved"
_RULES: tuple[tuple[str, Callable[[Address], bool]], ...] = (
    ("unspecified", lambda a: a.is_unspecified),
    ("loopback", lambda a: a.is_loopback),
    ("link-local", lambda a: a.is_link_local),
    ("multicast", lambda a: a.is_multicast),
    ("reserved", lambda a: a.is_reserved),
    ("private", lambda a: a.is_private),
    ("shared (carrier-grade NAT)", lambda a: not a.is_global),
)


class FetchPolicyError(ValueError):
    """The allow-list setting has an entry that is neither a network nor a host name."""


class BlockedAddress(Exception):
    """A fetch would connect to an address the policy refuses; the message says how to allow
    it. Raised from inside the transport, so httpx passes it through unchanged."""

    def __init__(self, host: str, address: str, rule: str) -> None:
        self.host = host
        self.address = address
        self.rule = rule
        where = f"{address} is" if host == address else f"host {host} resolves to {address},"
        article = "an" if rule[0] in "aeiou" else "a"
        allow = address if host == address else f"{address} or the host name {host}"
        super().__init__(
            f"{where} {article} {rule} address, and paigraph does not fetch from loopback, "
            "private, link-local, multicast or reserved addresses; an operator can allow it by "
            f"adding {allow} to {ALLOWED_NETWORKS_ENV}"
        )


def parse_entry(entry: str) -> Network | str:
    """One allow-list entry: a network (a bare address is a /32 or /128) or a host name."""
    text = entry.strip()
    try:
        return ipaddress.ip_network(text)
    except ValueError as exc:
        if "/" in text or ":" in text or text.replace(".", "").isdigit():
            raise FetchPolicyError(f"{text!r} is not a network: {exc}") from None
    if not _HOST_NAME.fullmatch(text):
        raise FetchPolicyError(f"{text!r} is neither a network (like 10.0.0.0/8) nor a host name")
    return text.lower().rstrip(".")


def _system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for host, in its order, without duplicates."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class FetchPolicy:
    """The addresses outside the public internet that fetches may still reach."""

    networks: tuple[Network, ...] = ()
    hosts: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, entries: str | Iterable[str]) -> FetchPolicy:
        """A policy from comma-separated text or a list of entries; FetchPolicyError if bad."""
        items = entries.split(",") if isinstance(entries, str) else list(entries)
        parsed = [parse_entry(item) for item in items if item.strip()]
        return cls(
            networks=tuple(p for p in parsed if not isinstance(p, str)),
            hosts=frozenset(p for p in parsed if isinstance(p, str)),
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> FetchPolicy:
        """The policy ``PAIGRAPH_ALLOWED_FETCH_NETWORKS`` gives (empty: public addresses only)."""
        env = os.environ if environ is None else environ
        try:
            return cls.parse(env.get(ALLOWED_NETWORKS_ENV, ""))
        except FetchPolicyError as exc:
            raise FetchPolicyError(f"{ALLOWED_NETWORKS_ENV}: {exc}") from None

    def check(self, host: str, address: str) -> None:
        """Raise BlockedAddress unless connecting to address (found for host) is allowed."""
        if host.lower().rstrip(".") in self.hosts:
            return
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 reaches 127.0.0.1
        if any(ip in network for network in self.networks):
            return
        rule = next((name for name, test in _RULES if test(ip)), None)
        if rule is not None:
            raise BlockedAddress(host, str(ip), rule)

    def addresses(self, host: str, port: int, resolve: Resolver = _system_resolver) -> list[str]:
        """host resolved once, every address checked: all of them may be connected to.

        One refused address refuses the host, so a name cannot mix a public address with an
        internal one and hope the internal one is tried.
        """
        found = resolve(host, port)
        for address in found:
            self.check(host, address)
        return found


class _GuardedBackend(httpcore.NetworkBackend):
    """The system's sockets, connecting only to addresses the policy has just checked."""

    def __init__(self, policy: FetchPolicy, resolve: Resolver) -> None:
        self._policy = policy
        self._resolve = resolve
        self._sockets = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        """Connect to the first checked address that answers (an IP literal, never re-resolved)."""
        try:
            addresses = self._policy.addresses(host, port, self._resolve)
        except OSError as exc:  # the name does not resolve
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        failure: Exception = httpcore.ConnectError(f"{host} has no address")
        for address in addresses:
            try:
                return self._sockets.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        raise failure

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        """Never used for fetches; refused so that no local socket is reachable either."""
        raise httpcore.ConnectError("fetching through a unix socket is not allowed")

    def sleep(self, seconds: float) -> None:
        self._sockets.sleep(seconds)


class GuardedTransport(httpx.HTTPTransport):
    """httpx's own transport, with its connection pool on the guarded network backend.

    httpx offers no public way to give its transport a network backend, so the pool it made is
    replaced; if a later httpx stops keeping it in ``_pool``, this refuses to start rather
    than fetch unchecked.
    """

    def __init__(self, policy: FetchPolicy, *, resolve: Resolver = _system_resolver) -> None:
        super().__init__()
        if not isinstance(getattr(self, "_pool", None), httpcore.ConnectionPool):
            raise RuntimeError("this httpx version keeps no connection pool in _pool")
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            keepalive_expiry=5.0,
            network_backend=_GuardedBackend(policy, resolve),
        )
