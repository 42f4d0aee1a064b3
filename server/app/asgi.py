"""The Starlette application that serves the GraphQL API.

The app's lifespan builds the running parts (store, event bus, backend, job service) when the
server starts and closes them when it stops, so nothing is opened at import time and a test
can run several apps side by side.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route, WebSocketRoute

from server.api.auth import Authenticator, is_loopback
from server.api.context import Runtime, RuntimeSlot
from server.api.endpoint import GraphQLEndpoint
from server.api.job_access import job_visibility_setting
from server.api.jobs.exec_socket import ExecEndpoint
from server.api.limits import MAX_BODY_BYTES, MAX_SUBSCRIPTIONS_PER_USER, UserSubscriptions
from server.api.schema import executor_setting, schema_for
from server.app.exec_frames import PATH as EXEC_PATH
from server.app.latest_usage import LatestUsage
from server.app.security_headers import SecurityHeaders
from server.app.usage_sampler import usage_interval_setting
from server.app.webapp import Assets, app_page, build_dir
from server.events import bus_for
from server.metrics import AppMetrics, MetricsSettings, metrics_endpoint
from server.metrics.scrape import LatestUsage as LatestUsageSource
from server.store import database_url, open_store

if TYPE_CHECKING:
    from backends.base import Backend
    from server.jobs.observer import JobObserver
    from server.jobs.service import JobService
    from server.marketplace.references import ReferenceResolver
    from server.store import Store

BACKENDS = ("docker", "kubernetes")


class BackendUnavailable(ValueError):
    """The backend named on the command line cannot be used; the message says why."""


def check_backend(name: str) -> None:
    """Raise BackendUnavailable, saying why, unless `name` is a backend jobs can run on."""
    if name not in BACKENDS:
        raise BackendUnavailable(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")


def make_backend(
    name: str,
    *,
    namespace: str | None = None,
    kubeconfig: str | None = None,
    serving: str = "",
) -> Backend:
    """The backend called `name`, not started yet; BackendUnavailable when it cannot be made
    (no Docker engine answers, no cluster answers, the settings are wrong, another server
    drives the simulator state directory, ...). `namespace` and `kubeconfig` override the
    kubernetes backend's settings (PAIGRAPH_K8S_*). The docker backend holds its state
    directory for this server until it is closed; `serving` (the address) is what a second
    server on that directory is told about this one."""
    check_backend(name)
    if name == "kubernetes":
        return _kubernetes_backend(namespace=namespace, kubeconfig=kubeconfig)
    from backends.base import BackendError
    from backends.docker import DockerBackend
    from simulator.containers import EngineError
    from simulator.settings import SettingsError, load_settings

    try:
        settings = load_settings()
        return DockerBackend(settings, owner=server_owner(settings.state_dir), exclusive=serving)
    except (EngineError, SettingsError, BackendError, OSError) as exc:
        raise BackendUnavailable(f"the docker backend cannot start: {exc}") from None


def _kubernetes_backend(namespace: str | None, kubeconfig: str | None) -> Backend:
    """The kubernetes backend on the cluster its settings name, once the cluster answers."""
    from backends.base import BackendError
    from backends.kubernetes import KubernetesBackend
    from backends.kubernetes_settings import SettingsError, load_settings

    try:
        backend = KubernetesBackend(load_settings(namespace=namespace, kubeconfig=kubeconfig))
        backend.check()
    except (SettingsError, BackendError) as exc:
        raise BackendUnavailable(f"the kubernetes backend cannot start: {exc}") from None
    return backend


def server_owner(state_dir: Path) -> str:
    """The owner label of a server's containers and networks: one per state directory, so a
    server never takes the containers of a server on another state directory (another user's,
    a test's) for orphans and removes them."""
    digest = hashlib.sha256(str(Path(state_dir).resolve()).encode()).hexdigest()[:12]
    return f"server-{digest}"


# Young collections every 50,000 net allocations instead of 700: a server answering a page of
# jobs or fanning an event out to a thousand subscribers allocates that much in one go, and
# each collection would walk every live websocket connection's objects again.
COLLECTOR_THRESHOLDS = (50_000, 20, 100)


def tune_collector() -> None:
    """Take what a started server holds for good (modules, the schema, the engines: some 100k
    objects) out of the cyclic garbage collector's sweeps, once per process, and collect less
    often. Everything still dies by reference counting as soon as it is dropped; only garbage
    in reference cycles waits longer, and full collections (which walk the whole heap and once
    cost a delivery to 1,000 subscribers hundreds of milliseconds) become rare.
    """
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()
        gc.set_threshold(*COLLECTOR_THRESHOLDS)


async def healthz(_: Request) -> JSONResponse:
    """Liveness: the process answers. It stays 200 while the backend's engine is away (a
    restart of paigraph would not bring the engine back); /health says that."""
    return JSONResponse({"status": "ok"})


def health_endpoint(slot: RuntimeSlot) -> Callable[[Request], Awaitable[JSONResponse]]:
    """Readiness: 200 when the server runs jobs normally; 503 with the reason when it cannot
    (starting or stopping, or the backend's engine unreachable: jobs wait meanwhile)."""

    async def health(_: Request) -> JSONResponse:
        runtime = slot.current
        if runtime is None:
            return JSONResponse(
                {"status": "unavailable", "reason": "the server is starting or stopping"}, 503
            )
        body: dict[str, object] = {"status": "ok", "backend": runtime.backend_name}
        if runtime.service is None:
            return JSONResponse(body)
        state = runtime.service.health()
        if state.healthy:
            return JSONResponse(body)
        body |= {
            "status": "unavailable",
            "reason": state.reason,
            "since": state.since.isoformat() if state.since else None,
            "detail": state.detail,
        }
        return JSONResponse(body, 503)

    return health


def create_app(
    service: JobService | None = None,
    *,
    db_url: str | None = None,
    host: str = "127.0.0.1",
    backend: str | Backend | None = "docker",
    max_body: int = MAX_BODY_BYTES,
    max_subscriptions_per_user: int = MAX_SUBSCRIPTIONS_PER_USER,
    on_stop: Callable[[Store], None] | None = None,
    executor: str | None = None,
    job_visibility: str | None = None,
    metrics: MetricsSettings | None = None,
    latest_usage: LatestUsageSource | None = None,
    usage_interval: float | None = None,
) -> Starlette:
    """The app: /graphql (GraphiQL in a browser), /exec, /healthz, /health, /metrics and the web UI.

    With `service` the app starts and closes that service; without, it builds the store, bus and
    backend from the settings and closes them at the end (`backend=None` serves stored jobs only).
    Every other argument overrides the setting of that name (docs/configuration.md); `on_stop` gets
    the store before anything is closed.
    """
    interval = usage_interval if usage_interval is not None else usage_interval_setting()
    schema = schema_for(executor_setting(executor))
    visibility = job_visibility_setting(job_visibility)
    slot = RuntimeSlot()
    loopback = is_loopback(host)
    subscriptions = UserSubscriptions(max_subscriptions_per_user)
    sampled = LatestUsage(slot)  # each running instance's latest use
    measured = AppMetrics(metrics, latest_usage or sampled)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            if service is not None:
                service.observer = measured.jobs  # before it starts: resumed jobs count too
                await service.start()
                stack.push_async_callback(service.close)
                runtime = Runtime(
                    store=service.store,
                    bus=service.bus,
                    auth=Authenticator(service.store, loopback_only=loopback),
                    service=service,
                    backend=service.backend,
                    backend_name=_backend_name(service.backend),
                    subscriptions=subscriptions,
                )
            else:
                runtime = await _build(stack, db_url, backend, loopback, measured.jobs)
                runtime.subscriptions = subscriptions
            runtime.job_visibility = visibility
            runtime.timings = measured.api
            await _start_sampler(stack, runtime, interval)
            slot.current = runtime
            stack.push_async_callback(runtime.sockets.close)
            tune_collector()
            try:
                yield
            finally:
                slot.current = None
                if on_stop is not None:
                    await asyncio.to_thread(on_stop, runtime.store)

    endpoint = GraphQLEndpoint(schema, slot, max_body=max_body)
    app = Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/health", health_endpoint(slot)),
            Route("/metrics", metrics_endpoint(slot, measured), methods=["GET"]),
            Route("/graphql", endpoint, methods=["GET", "POST"]),
            WebSocketRoute("/graphql", endpoint),
            WebSocketRoute(EXEC_PATH, ExecEndpoint(slot)),
            Mount("/assets", Assets(build_dir())),
            Route("/{path:path}", app_page, methods=["GET", "HEAD"]),
        ],
        lifespan=lifespan,
        middleware=[Middleware(SecurityHeaders)],  # server.app.security_headers says why each
    )
    app.state.runtime = slot  # the running parts, for operators and tests: .get()
    app.state.metrics = measured  # what /metrics serves (server.metrics)
    app.state.latest_usage = sampled
    return app


async def _start_sampler(stack: AsyncExitStack, runtime: Runtime, interval: float) -> None:
    """Measure what running instances use every `interval` seconds, when the backend can."""
    from backends.usage import SamplesUsage
    from server.app.usage_sampler import UsageSampler

    if interval <= 0 or not isinstance(runtime.backend, SamplesUsage):
        return
    sampler = UsageSampler(runtime.store, runtime.backend, interval)
    await sampler.start()
    stack.push_async_callback(sampler.close)
    runtime.usage = sampler


async def _build(
    stack: AsyncExitStack,
    db_url: str | None,
    chosen: str | Backend | None,
    loopback: bool,
    observer: JobObserver,
) -> Runtime:
    """Open the store, the bus and the backend, and start a job service on them."""
    url = database_url(db_url)
    store = await asyncio.to_thread(open_store, url)
    stack.callback(store.close)
    bus = bus_for(url)
    stack.push_async_callback(bus.close)
    runtime = Runtime(store=store, bus=bus, auth=Authenticator(store, loopback_only=loopback))
    if chosen is None:
        return runtime
    from server.jobs.service import JobService

    backend = make_backend(chosen) if isinstance(chosen, str) else chosen
    stack.push_async_callback(backend.close)
    service = JobService(store, backend, bus, references=marketplace_references(store))
    service.observer = observer
    await service.start()
    stack.push_async_callback(service.close)
    runtime.service = service
    runtime.backend = backend
    runtime.backend_name = chosen if isinstance(chosen, str) else _backend_name(backend)
    return runtime


def marketplace_references(store: Store) -> ReferenceResolver:
    """Resolution of marketplace:// and http(s):// references against this server's items and
    admin-defined storages (http(s) fetching as PAIGRAPH_* settings say)."""
    from server.marketplace.references import ReferenceResolver
    from server.marketplace.store_lookup import StoreItemLookup, StoreStorageAccess

    return ReferenceResolver(StoreItemLookup(store), StoreStorageAccess(store))


def _backend_name(backend: Backend) -> str:
    name = type(backend).__name__.removesuffix("Backend").lower()
    return name or type(backend).__name__
