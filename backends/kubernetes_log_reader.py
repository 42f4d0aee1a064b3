"""Pod log streams read asynchronously, so one event loop follows the logs of many pods.

The kubernetes client reads a stream with a blocking socket, which costs a thread per pod
followed. Here the same API (`GET .../pods/<pod>/log`) is read with httpx's async client,
from the kubernetes client's own configuration: its host, bearer token (refreshed through
the configuration's hook, as the client does), client certificate, CA and proxy.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from backends.kubernetes_log_lines import since_time

_CONNECT_SECONDS = 10.0


class LogNotReadable(Exception):
    """The API server answered the log request with an error (the pod is gone, its container
    does not run yet ...): `status` is its HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class PodLogReader:
    """Opens `container`'s log of pods (in `namespace` unless told another), with
    timestamps, from a cursor."""

    def __init__(self, configuration: Any, namespace: str, container: str) -> None:
        self.configuration = configuration
        self.namespace = namespace
        self.container = container
        self._client: httpx.AsyncClient | None = None

    def _make_client(self) -> httpx.AsyncClient:
        config = self.configuration
        context = ssl.create_default_context(cafile=config.ssl_ca_cert or None)
        if not config.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if config.cert_file:
            context.load_cert_chain(config.cert_file, config.key_file or None)
        return httpx.AsyncClient(
            base_url=config.host,
            verify=context,
            proxy=config.proxy or None,
            trust_env=False,  # as the kubernetes client: only its configuration's proxy
            # one connection per followed stream: the pool must not queue streams behind others
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=8),
            timeout=httpx.Timeout(None, connect=_CONNECT_SECONDS),
        )

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "*/*"}
        for setting in self.configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        return headers

    @asynccontextmanager
    async def open(
        self, pod: str, *, follow: bool, since_ns: int | None, namespace: str | None = None
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """The log's bytes as they come (call from the event loop that owns this reader);
        `namespace` when the pod is not in the reader's own (a virtual cluster's)."""
        if self._client is None:
            self._client = self._make_client()
        params = {"container": self.container, "timestamps": "true"}
        if follow:
            params["follow"] = "true"
        if since_ns is not None:
            params["sinceTime"] = since_time(since_ns)
        path = f"/api/v1/namespaces/{namespace or self.namespace}/pods/{pod}/log"
        request = self._client.build_request("GET", path, params=params, headers=self._headers())
        response = await self._client.send(request, stream=True)
        try:
            if response.status_code != 200:
                body = await response.aread()
                raise LogNotReadable(response.status_code, body.decode(errors="replace")[:300])
            yield response.aiter_raw()
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
