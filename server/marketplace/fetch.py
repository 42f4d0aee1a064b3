"""Downloading YAML components named by http(s):// references.

The URL comes from a user, so each download has a deadline and a streamed size limit, each URL
is asked once per resolution, and an operator can refuse remote references altogether (the
PAIGRAPH_REFERENCE_* settings: docs/configuration.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import httpx

from simulator.fetch_policy import BlockedAddress, FetchPolicy, FetchPolicyError, GuardedTransport

ALLOW_ENV = "PAIGRAPH_ALLOW_REMOTE_REFERENCES"
TIMEOUT_ENV = "PAIGRAPH_REFERENCE_TIMEOUT"
MAX_BYTES_ENV = "PAIGRAPH_REFERENCE_MAX_BYTES"

DEFAULT_TIMEOUT = 10.0
DEFAULT_MAX_BYTES = 1024 * 1024
_CHUNK = 64 * 1024
_FALSE = ("0", "false", "no", "off")
_TRUE = ("1", "true", "yes", "on")


class FetchFailure(StrEnum):
    """Why a component could not be had; each is its own error code."""

    REFUSED = "remote-refused"  # this server does not fetch remote references
    ADDRESS = "address-refused"  # the URL (or a redirect) leads to a non-public address
    DOWNLOAD = "download-failed"  # the URL could not be downloaded (connect, timeout, HTTP)
    TOO_LARGE = "too-large"  # the body is over the size limit


class FetchError(Exception):
    """A URL could not be fetched; `message` says why in words, `failure` is the code."""

    def __init__(self, failure: FetchFailure, message: str) -> None:
        super().__init__(message)
        self.failure = failure
        self.message = message


class SettingsError(ValueError):
    """A fetch setting in the environment has a value that means nothing."""


@dataclass(frozen=True)
class FetchSettings:
    allow_remote: bool = True
    timeout: float = DEFAULT_TIMEOUT  # seconds for the whole download
    max_bytes: int = DEFAULT_MAX_BYTES
    policy: FetchPolicy = field(default_factory=FetchPolicy)  # non-public addresses allowed

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise SettingsError(f"the reference timeout must be above 0 s, got {self.timeout}")
        if self.max_bytes < 1:
            raise SettingsError(
                f"the reference size limit must be at least 1, got {self.max_bytes}"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> FetchSettings:
        """The settings the environment gives; SettingsError names a variable that is wrong."""
        env = os.environ if environ is None else environ
        allow = env.get(ALLOW_ENV, "").strip().lower()
        if allow and allow not in (*_FALSE, *_TRUE):
            raise SettingsError(f"{ALLOW_ENV} must be true or false, got {env[ALLOW_ENV]!r}")
        try:
            policy = FetchPolicy.from_env(env)
        except FetchPolicyError as exc:
            raise SettingsError(str(exc)) from None
        return cls(
            policy=policy,
            allow_remote=allow not in _FALSE,
            timeout=_number(env, TIMEOUT_ENV, DEFAULT_TIMEOUT, float),
            max_bytes=_number(env, MAX_BYTES_ENV, DEFAULT_MAX_BYTES, int),
        )


def _number(env: Mapping[str, str], name: str, default: float, kind: Callable[[str], float]) -> Any:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return kind(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, got {raw!r}") from None


class FetchSession:
    """The downloads of one resolution: one HTTP client, each URL fetched at most once (its
    failure is remembered too). Use it as a context manager, or call `close()`."""

    def __init__(self, settings: FetchSettings) -> None:
        self.settings = settings
        self._client: httpx.Client | None = None
        self._done: dict[str, bytes | FetchError] = {}

    def get(self, url: str) -> bytes:
        """The body at `url`; FetchError when it is refused, cannot be had, or is too large."""
        if url not in self._done:
            try:
                self._done[url] = self._download(url)
            except FetchError as exc:
                self._done[url] = exc
        found = self._done[url]
        if isinstance(found, FetchError):
            raise found
        return found

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> FetchSession:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _download(self, url: str) -> bytes:
        if not self.settings.allow_remote:
            raise FetchError(
                FetchFailure.REFUSED,
                f"this server does not download remote references ({url}); publish the "
                f"component to the marketplace instead (the operator set {ALLOW_ENV}=false)",
            )
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FetchError(FetchFailure.DOWNLOAD, f"{url} is not an http(s) URL with a host")
        limit = self.settings.max_bytes
        deadline = time.monotonic() + self.settings.timeout
        try:
            with self._http().stream("GET", url) as response:
                if response.status_code >= 400:
                    raise FetchError(
                        FetchFailure.DOWNLOAD,
                        f"the prerequisite cannot be downloaded from {url}: HTTP "
                        f"{response.status_code} {response.reason_phrase}",
                    )
                length = response.headers.get("content-length", "")
                if length.isdigit() and int(length) > limit:
                    raise FetchError(FetchFailure.TOO_LARGE, _too_large(url, limit, int(length)))
                body = bytearray()
                for chunk in response.iter_bytes(_CHUNK):
                    body += chunk
                    if len(body) > limit:
                        raise FetchError(FetchFailure.TOO_LARGE, _too_large(url, limit, None))
                    if time.monotonic() > deadline:
                        raise httpx.ReadTimeout("the whole download took too long")
                return bytes(body)
        except BlockedAddress as exc:
            raise FetchError(
                FetchFailure.ADDRESS, f"the component at {url} is not fetched: {exc}"
            ) from None
        except httpx.ConnectError as exc:
            raise FetchError(
                FetchFailure.DOWNLOAD,
                f"the prerequisite cannot be downloaded from {url}: cannot connect to "
                f"{parts.hostname} ({_reason(exc)})",
            ) from None
        except httpx.TimeoutException:
            raise FetchError(
                FetchFailure.DOWNLOAD,
                f"the prerequisite cannot be downloaded from {url}: no complete answer within "
                f"{self.settings.timeout:g} s",
            ) from None
        except httpx.HTTPError as exc:
            raise FetchError(
                FetchFailure.DOWNLOAD,
                f"the prerequisite cannot be downloaded from {url}: {_reason(exc)}",
            ) from None

    def _http(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(
                transport=GuardedTransport(self.settings.policy),  # every hop's address checked
                timeout=self.settings.timeout,
                follow_redirects=True,
                max_redirects=5,
                headers={
                    "Accept": "application/yaml, text/yaml, application/json, text/plain",
                    # uncompressed: the size limit then bounds what is held in memory too
                    "Accept-Encoding": "identity",
                },
            )
        return self._client


def _too_large(url: str, limit: int, size: int | None) -> str:
    what = f"is {size} bytes" if size is not None else "goes on"
    return f"the component at {url} {what}, over the limit of {limit} bytes"


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__
