"""`/graphql` over HTTP and websockets: size limit, authentication, then strawberry.

Refuses what strawberry should never see (a foreign Host or Origin for the local admin, an
oversized body or message, a missing or unknown token) with GraphQL's error shape or a close
code; the codes and the GraphiQL page's rules are in docs/security.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from typing import Any

import orjson
from cross_web import HTTPException
from graphql import GraphQLFormattedError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.schema.exceptions import InvalidOperationTypeError
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
    Operation,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.types import (
    ConnectionInitMessage,
    ErrorMessage,
    SubscribeMessage,
)
from strawberry.types import ExecutionResult
from strawberry.types.graphql import OperationType
from strawberry.types.unset import UNSET

from server.api.auth import bearer_token, token_from_params
from server.api.broadcast import Member, Outbox, shared_key
from server.api.context import Context, RuntimeSlot
from server.api.errors import ApiError, Unauthorized
from server.api.limits import (
    MAX_BODY_BYTES,
    MAX_SUBSCRIPTIONS_PER_CONNECTION,
    describe_body_limit,
)
from server.api.loaders import Loaders
from server.api.loopback import local_admin_refusal
from server.api.open_sockets import REVOKED_CLOSE, REVOKED_REASON
from server.api.request_body import BadRequest, check_request, check_variables, parse_json
from server.app.webapp import page, wants_html
from server.shapes.values import User

log = logging.getLogger(__name__)
USER_KEY = "paigraph.user"
UNAUTHORIZED_CLOSE = 4401
TOO_LARGE_CLOSE = 4413  # a websocket message over the body limit (HTTP's 413, as 4401 is 401)
SUBSCRIPTION_OVER_HTTP = (
    "a subscription cannot be sent over HTTP: open a websocket to /graphql with the "
    "graphql-transport-ws protocol and subscribe there"
)


class _TooLarge(Exception):
    pass


def error_response(status: int, message: str, code: str, **headers: str) -> JSONResponse:
    body = {"data": None, "errors": [{"message": message, "extensions": {"code": code}}]}
    return JSONResponse(body, status_code=status, headers=headers or None)


class _TransportWS(BaseGraphQLTransportWSHandler[Context, None]):
    """graphql-transport-ws with the credentials of `connection_init` checked first, the
    operations running at once limited per connection and per user, and subscriptions alike
    served together (server.api.broadcast): their frames go through the connection's outbox."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._running: dict[asyncio.Task[None], int] = {}  # operation task: user id
        self._socket: int | None = None  # its handle in the runtime's OpenSockets
        self.outbox = Outbox(self._send_text, self.context.runtime.outbox_limit)

    async def _send_text(self, frame: str) -> None:
        await self.websocket.ws.send_text(frame)  # type: ignore[attr-defined]

    async def run_operation(self, operation: Operation[Context, None]) -> None:
        """A subscription whose frames others may share joins their group and waits for its
        end; anything else runs on its own, as strawberry runs it."""
        key = self._shared_key(operation)
        if key is None:
            await super().run_operation(operation)
            return

        def ended() -> None:  # the id is free again before the last frame goes out
            operation.completed = True
            if self.operations.get(operation.id) is operation:
                del self.operations[operation.id]

        member = Member(self.outbox, operation.id, ended)
        context = dataclasses.replace(self.context)  # its own `position`

        def start() -> Any:
            return self.schema.stream(
                operation.query,
                variable_values=operation.variables,
                context_value=context,
                root_value=self.root_value,
                operation_name=operation.operation_name,
            )

        self.context.runtime.broadcasts.join(key, member, start, lambda: context.position)
        try:
            await member.done
        except asyncio.CancelledError:  # completed by the client, or the connection went
            member.leave()
            raise

    def _shared_key(self, operation: Operation[Context, None]) -> Any:
        user = self.context.user
        if user is None or not isinstance(operation.query, str):
            return None
        return shared_key(
            operation.query,
            operation.variables,
            operation.operation_name,
            self.context.job_owner_limit,
        )

    async def handle_connection_init(self, message: ConnectionInitMessage) -> None:
        payload = message.get("payload") or {}
        if (
            not self.connection_init_received
            and not self.connection_timed_out
            and isinstance(payload, dict)
        ):
            try:
                self.context.user, token = await _authenticate_ws(self.context, payload)
            except Unauthorized as exc:
                if self.connection_init_timeout_task:
                    self.connection_init_timeout_task.cancel()
                await self.websocket.close(code=UNAUTHORIZED_CLOSE, reason=str(exc)[:120])
                return
            if token is not None:  # closed as soon as the token is revoked
                runtime = self.context.runtime
                self._socket = runtime.sockets.register(runtime.store, token, self._revoked)
        await super().handle_connection_init(message)

    async def _revoked(self) -> None:
        await self.websocket.close(code=REVOKED_CLOSE, reason=REVOKED_REASON)

    async def shutdown(self) -> None:
        self.context.runtime.sockets.unregister(self._socket)
        await super().shutdown()

    async def handle_subscribe(self, message: SubscribeMessage) -> None:
        """Refuse a new operation over the limits with an `error` for its id; the running
        ones go on. Count the ones started until their task ends (completed or cancelled)."""
        refusal = self._over_limit(message["id"])
        if refusal is not None:
            error: GraphQLFormattedError = {
                "message": refusal,
                "extensions": {"code": "TOO_MANY_SUBSCRIPTIONS"},
            }
            await self.send_message(ErrorMessage(id=message["id"], type="error", payload=[error]))
            return
        await super().handle_subscribe(message)
        operation = self.operations.get(message["id"])
        if operation is not None and operation.task is not None and self.context.user:
            self._count(operation.task, self.context.user.id)

    def _over_limit(self, operation_id: str) -> str | None:
        """Why a new operation may not start; None when it may (or when strawberry refuses
        it anyway: not acknowledged yet, or an id in use)."""
        user = self.context.user
        if user is None or not self.connection_acknowledged or operation_id in self.operations:
            return None
        if len(self._running) >= MAX_SUBSCRIPTIONS_PER_CONNECTION:
            return (
                f"this connection runs {len(self._running)} subscriptions, the most one "
                f"connection may run (limit {MAX_SUBSCRIPTIONS_PER_CONNECTION}); complete one "
                "before starting another"
            )
        counts = self.context.runtime.subscriptions
        if counts.running(user.id) >= counts.limit:
            return (
                f"you run {counts.running(user.id)} subscriptions over all your connections, "
                f"the most one user may run (limit {counts.limit}); complete one before "
                "starting another"
            )
        return None

    def _count(self, task: asyncio.Task[None], user_id: int) -> None:
        self._running[task] = user_id
        self.context.runtime.subscriptions.started(user_id)
        task.add_done_callback(self._release)

    async def cleanup_operation(self, operation_id: str) -> None:
        """A completed (or, at the end, dropped) operation stops counting at once, not when
        its cancelled task gets round to ending: the client may start another right away."""
        operation = self.operations.get(operation_id)
        if operation is not None and operation.task is not None:
            self._release(operation.task)
        await super().cleanup_operation(operation_id)

    def _release(self, task: asyncio.Task[None]) -> None:
        user_id = self._running.pop(task, None)
        if user_id is not None:
            self.context.runtime.subscriptions.ended(user_id)


async def _authenticate_ws(context: Context, payload: dict[str, Any]) -> tuple[User, str | None]:
    """The user, and the token they came with (None: the local admin of a loopback server)."""
    token = token_from_params(payload)
    if token is None:  # a client that can set headers on the upgrade request may use them
        token = bearer_token(context.request.headers.get("authorization"))
    return await context.runtime.auth.user(token), token


class GraphQLView(GraphQL[Context, None]):
    graphql_transport_ws_handler_class = _TransportWS

    def __init__(self, schema: Any, slot: RuntimeSlot) -> None:
        super().__init__(
            schema, subscription_protocols=[GRAPHQL_TRANSPORT_WS_PROTOCOL], graphql_ide=None
        )
        self.slot = slot

    async def execute_single(self, *args: Any, **kwargs: Any) -> ExecutionResult:
        """strawberry's, with a subscription sent over HTTP refused saying where it goes."""
        try:
            return await super().execute_single(*args, **kwargs)
        except HTTPException as exc:
            cause = exc.__cause__
            if (
                isinstance(cause, InvalidOperationTypeError)
                and cause.operation_type is OperationType.SUBSCRIPTION
            ):
                raise HTTPException(400, SUBSCRIPTION_OVER_HTTP) from cause
            raise

    async def run(self, request: Any, context: Any = UNSET, root_value: Any = UNSET) -> Any:
        """strawberry's, with its refusals of an HTTP request (strawberry answers them as
        plain text) in GraphQL's error shape, as every other refusal here is."""
        try:
            return await super().run(request, context, root_value)
        except HTTPException as exc:
            code = "METHOD_NOT_ALLOWED" if exc.status_code == 405 else "BAD_REQUEST"
            return error_response(exc.status_code, exc.reason, code)

    def encode_json(self, data: object) -> str:
        """orjson: a page of jobs encodes in a tenth of the time. Text, not bytes, because
        websocket messages of graphql-transport-ws are text frames; the rare value orjson
        refuses (an integer beyond 64 bits in a JSON scalar) goes through the json module."""
        try:
            return orjson.dumps(data).decode()
        except TypeError:
            return json.dumps(data, separators=(",", ":"))

    def decode_json(self, data: str | bytes) -> object:
        """orjson, which refuses nesting past MAX_JSON_DEPTH where the json module recurses
        and overflows near 1,000 levels; its errors are json's JSONDecodeError too."""
        return orjson.loads(data)

    async def get_context(self, request: Request | WebSocket, response: Any) -> Context:
        runtime = self.slot.get()
        websocket = isinstance(request, WebSocket)
        return Context(
            request=request,
            response=response,
            runtime=runtime,
            loaders=Loaders(runtime.store, cache=not websocket),
            user=None if websocket else request.scope.get(USER_KEY),
        )


class GraphQLEndpoint:
    """The ASGI app at /graphql: checks HTTP requests, then hands everything to strawberry."""

    def __init__(self, schema: Any, slot: RuntimeSlot, *, max_body: int = MAX_BODY_BYTES) -> None:
        self.view = GraphQLView(schema, slot)
        self.slot = slot
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = await self._local_admin_refusal(scope)
        if refusal is not None:
            await _refuse(scope, receive, send, refusal)
            return
        if scope["type"] != "http":
            limited = _MessageLimit(receive, send, self.max_body)
            await self.view(scope, limited.receive, limited.send)
            return
        request = Request(scope, receive)
        if request.method == "GET" and "query" not in request.query_params and wants_html(request):
            await page("graphiql.html")(scope, receive, send)
            return
        try:
            response, body = await self._check(request)
        except ClientDisconnect:  # nothing to answer, and nothing went wrong here
            log.info("a client left before sending all of its request body")
            return
        if response is not None:
            await response(scope, receive, send)
            return
        await self.view(scope, _replay(body, receive), send)

    async def _local_admin_refusal(self, scope: Scope) -> str | None:
        """Why this request may not reach the local admin of a fresh loopback server (its Host
        or Origin is not this server's); None when it may, or when there is no local admin.
        The headers are checked first: the database is asked only about suspect requests."""
        refusal = local_admin_refusal(scope)
        if refusal is None or self.slot.current is None:
            return None
        return refusal if await self.slot.current.auth.serves_local_admin() else None

    async def _check(self, request: Request) -> tuple[Response | None, bytes]:
        try:
            body = await self._read_body(request)
        except _TooLarge:
            limit = describe_body_limit(self.max_body)
            message = (
                f"the request body is larger than {limit}, the most this server accepts; "
                "send large configs as a variable of a smaller query, or split the request"
            )
            return error_response(413, message, "REQUEST_TOO_LARGE"), b""
        try:
            runtime = self.slot.get()
            token = bearer_token(request.headers.get("authorization"))
            request.scope[USER_KEY] = await runtime.auth.user(token)
        except Unauthorized as exc:
            return error_response(401, str(exc), exc.code, **{"WWW-Authenticate": "Bearer"}), b""
        except ApiError as exc:
            return error_response(503, str(exc), exc.code), b""
        try:
            _check_document(request, body)
        except BadRequest as exc:
            return error_response(400, str(exc), "BAD_REQUEST"), b""
        return None, body

    async def _read_body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            raise _TooLarge
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body:
                raise _TooLarge
            chunks.append(chunk)
        return b"".join(chunks)


class _MessageLimit:
    """The HTTP body limit for each websocket message: a larger one closes the connection
    with TOO_LARGE_CLOSE and a reason, and strawberry sees the client leave."""

    def __init__(self, receive: Receive, send: Send, limit: int) -> None:
        self._receive = receive
        self._send = send
        self.limit = limit
        self.closed = False

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "websocket.receive" and self._too_large(message):
            reason = f"a message may be at most {describe_body_limit(self.limit)}"
            await self.send({"type": "websocket.close", "code": TOO_LARGE_CLOSE, "reason": reason})
            self.closed = True
            return {"type": "websocket.disconnect", "code": TOO_LARGE_CLOSE}
        return message

    async def send(self, message: Message) -> None:
        if not self.closed:  # what the operations still send after the close goes nowhere
            await self._send(message)

    def _too_large(self, message: Message) -> bool:
        text = message.get("text")
        if text is not None:  # a character takes 1 to 4 bytes: encode only when unsure
            if len(text) > self.limit or len(text) * 4 <= self.limit:
                return len(text) > self.limit
            return len(text.encode("utf-8", "surrogatepass")) > self.limit
        return len(message.get("bytes") or b"") > self.limit


async def _refuse(scope: Scope, receive: Receive, send: Send, message: str) -> None:
    """Answer 403 with `message`, as an HTTP response or as the websocket handshake's."""
    response = error_response(403, message, "FORBIDDEN")
    if scope["type"] == "http":
        await response(scope, receive, send)
        return
    websocket = WebSocket(scope, receive, send)
    if "websocket.http.response" in scope.get("extensions", {}):
        await websocket.send_denial_response(response)
    else:  # closing before accepting: the server answers the handshake with 403
        await websocket.close(code=1008, reason=message[:120])


def _check_document(request: Request, body: bytes) -> None:
    """BadRequest unless the request carries a readable GraphQL request (see request_body)."""
    if request.method == "GET":
        variables = request.query_params.get("variables")
        if variables is not None:
            check_variables(parse_json(variables, "the `variables` parameter"))
    elif "application/json" in request.headers.get("content-type", "").lower():
        check_request(parse_json(body, "the request body"))


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive channel that hands over the body already read, then the client's own
    messages (its disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
