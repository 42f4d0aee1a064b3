"""What every resolver can reach: the running parts of the server and who is asking."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import strawberry
from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket

from server.api.auth import Authenticator
from server.api.broadcast import OUTBOX_LIMIT_BYTES, Broadcasts
from server.api.errors import ApiError, Unauthorized
from server.api.job_access import JobVisibility, may_read, reader_limit
from server.api.limits import UserSubscriptions
from server.api.loaders import Loaders
from server.api.open_sockets import OpenSockets
from server.api.timing import OperationTimings
from server.events import EventBus
from server.shapes.values import Job, User
from server.store import Store

if TYPE_CHECKING:
    from backends.base import Backend
    from server.app.usage_sampler import UsageSampler
    from server.jobs.service import JobService


@dataclass
class Runtime:
    """The parts a running server is made of; built by the app when it starts."""

    store: Store
    bus: EventBus
    auth: Authenticator
    service: JobService | None = None
    backend: Backend | None = None
    backend_name: str | None = None  # "docker", ...; None: the server runs no backend
    subscriptions: UserSubscriptions = field(default_factory=UserSubscriptions)
    job_visibility: JobVisibility = JobVisibility.ALL  # who may read which jobs (job_access)
    sockets: OpenSockets = field(default_factory=OpenSockets)  # closed when a token is revoked
    timings: OperationTimings | None = None  # how long operations take (server.api.timing)
    usage: UsageSampler | None = None  # measures running instances; None: nothing measures
    broadcasts: Broadcasts = field(default_factory=Broadcasts)  # subscriptions served together
    outbox_limit: int = OUTBOX_LIMIT_BYTES  # frames queued per websocket before it fell behind


class RuntimeSlot:
    """Holds the Runtime while the app runs (between the lifespan's start and end)."""

    def __init__(self) -> None:
        self.current: Runtime | None = None

    def get(self) -> Runtime:
        if self.current is None:
            raise ApiError("the server is starting or stopping; try again", "UNAVAILABLE")
        return self.current


# server.api.lookahead's answers for one execution: by the operation's id, the field's response
# path and the path asked about, the operation and variables each was found for, and the answer
LookaheadKey = tuple[int, tuple[tuple[str, str | None], ...], tuple[str, ...]]
LookaheadMemo = dict[LookaheadKey, tuple[object, object, bool]]


@dataclass
class Context:
    request: Request | WebSocket
    response: Response | WebSocket | None
    runtime: Runtime
    loaders: Loaders
    user: User | None = None
    connection_params: dict[str, Any] | None = field(default=None)
    lookahead: LookaheadMemo = field(default_factory=dict)
    # the cursor of the newest event a subscription of this context yielded: where a group of
    # subscribers alike stands, for newcomers to join it there (server.api.broadcast)
    position: str | None = None

    @property
    def viewer(self) -> User:
        if self.user is None:
            raise Unauthorized("not authenticated")
        return self.user

    def readable(self, job: Job | None) -> Job | None:
        """The job, when the viewer may read it (server.api.job_access); else None, as if
        there were no such job."""
        if job is None or not may_read(self.runtime.job_visibility, self.viewer, job.owner_id):
            return None
        return job

    @property
    def job_owner_limit(self) -> int | None:
        """The only owner whose jobs the viewer may list; None: every owner's."""
        return reader_limit(self.runtime.job_visibility, self.viewer)

    @property
    def store(self) -> Store:
        return self.runtime.store

    @property
    def service(self) -> JobService:
        if self.runtime.service is None:
            raise ApiError(
                "this server runs no backend: it shows stored jobs but cannot run or stop them",
                "UNAVAILABLE",
            )
        return self.runtime.service


Info = strawberry.Info[Context, None]
