"""`/exec`: a command in a running task instance over a websocket (server.app.exec_frames).

Who may: the job's owner or an admin, with the same bearer tokens as `/graphql` (the upgrade
request's Authorization header, or `token` in the start message), and on a fresh loopback
server the local admin, from this machine's own clients only (server.api.loopback). The
backend runs the command (Docker's exec API on the simulator, the Kubernetes exec API on a
cluster); this module only checks, then pumps bytes both ways.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, TypeGuard

from starlette.websockets import WebSocket, WebSocketDisconnect

from backends.base import BackendError, InstanceKey, UnknownInstance
from backends.instance_exec import ExecRequest, ExecSession, ExecsInstances
from server.api.auth import bearer_token
from server.api.context import RuntimeSlot
from server.api.errors import ApiError, Unauthorized
from server.api.ids import BadId, expect_global_id
from server.api.job_access import may_read
from server.api.loopback import local_admin_refusal
from server.api.open_sockets import REVOKED_CLOSE, REVOKED_REASON
from server.app import exec_frames as frames
from server.shapes.values import User

log = logging.getLogger(__name__)
MAX_SESSIONS_PER_USER = 16  # exec sessions one user has open at once, over all connections
# Connections from one client address that have not yet said who they are (no start message
# read, or its user not yet known): a client needs one per session it opens.
MAX_ANONYMOUS_PER_ADDRESS = 8
_QUEUED_CHUNKS = 64  # output chunks waiting for a slow client before the reader waits too


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Left(Exception):
    """The client went away before its session started."""


@dataclass(frozen=True)
class _Start:
    job_id: str
    role: str
    index: int
    request: ExecRequest
    token: str | None


class ExecEndpoint:
    """The ASGI websocket app at /exec."""

    def __init__(
        self,
        slot: RuntimeSlot,
        max_sessions_per_user: int = MAX_SESSIONS_PER_USER,
        max_anonymous_per_address: int = MAX_ANONYMOUS_PER_ADDRESS,
    ):
        self.slot = slot
        self.max_sessions_per_user = max_sessions_per_user
        self.max_anonymous_per_address = max_anonymous_per_address
        self._sessions: dict[int, int] = {}  # user id: sessions open (or opening)
        self._anonymous: dict[str, int] = {}  # client address: connections not yet identified

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        websocket = WebSocket(scope, receive, send)
        offered = scope.get("subprotocols") or []
        await websocket.accept(frames.SUBPROTOCOL if frames.SUBPROTOCOL in offered else None)
        address = _address(scope)
        anonymous = self._anonymous.get(address, 0)
        if anonymous >= self.max_anonymous_per_address:
            await _refuse(
                websocket,
                "too-many-connections",
                f"{address} has {anonymous} exec connections that have not sent their start "
                f"message yet, the most one address may have (limit "
                f"{self.max_anonymous_per_address}); send `start` on those first",
            )
            return
        self._anonymous[address] = anonymous + 1
        unidentified = [address]  # emptied once the connection's user is known
        opened: list[int] = []  # the user whose session this is, once counted
        tokens: list[str] = []  # the token it was opened with (none: the local admin)
        try:
            session = await self._open(websocket, opened, unidentified, tokens)
        except _Refused as refused:
            self._release(opened)
            await _refuse(websocket, refused.code, str(refused))
            return
        except _Left:
            self._release(opened)
            log.info("exec: a client at %s left before its session started", address)
            return
        except BaseException:
            self._release(opened)
            raise
        finally:
            self._identified(unidentified)
        runtime = self.slot.get()

        async def revoked() -> None:  # the token was revoked while the session ran
            await websocket.close(REVOKED_CLOSE, reason=REVOKED_REASON)
            await asyncio.to_thread(session.close)

        handle = runtime.sockets.register(runtime.store, tokens[0], revoked) if tokens else None
        try:
            await _pump(websocket, session)
        finally:
            runtime.sockets.unregister(handle)
            self._release(opened)
            await asyncio.to_thread(session.close)

    def _identified(self, unidentified: list[str]) -> None:
        """The connection no longer counts as anonymous for its address."""
        for address in unidentified:
            left = self._anonymous.get(address, 1) - 1
            if left > 0:
                self._anonymous[address] = left
            else:
                self._anonymous.pop(address, None)
        unidentified.clear()

    def _count(self, user: User, opened: list[int]) -> None:
        """Count a session of `user`; _Refused when they have as many as one user may."""
        running = self._sessions.get(user.id, 0)
        if running >= self.max_sessions_per_user:
            raise _Refused(
                "too-many-sessions",
                f"you have {running} exec sessions open, the most one user may "
                f"(limit {self.max_sessions_per_user}); end one before starting another",
            )
        self._sessions[user.id] = running + 1
        opened.append(user.id)

    def _release(self, opened: list[int]) -> None:
        for user_id in opened:
            left = self._sessions.get(user_id, 1) - 1
            if left > 0:
                self._sessions[user_id] = left
            else:
                self._sessions.pop(user_id, None)
        opened.clear()

    async def _open(
        self,
        websocket: WebSocket,
        opened: list[int],
        unidentified: list[str],
        tokens: list[str],
    ) -> ExecSession:
        """Read the start message, check who asks (then the connection leaves
        `unidentified`, and `tokens` holds the token it was opened with), and start the command
        (counted in `opened` as a session of its user). _Left when the client goes away before
        its start message."""
        try:
            runtime = self.slot.get()
        except ApiError as exc:
            raise _Refused("unavailable", str(exc)) from None
        try:
            first = await asyncio.wait_for(websocket.receive_text(), frames.START_TIMEOUT_SECONDS)
        except TimeoutError:
            raise _Refused(
                "bad-request",
                f"no start message within {frames.START_TIMEOUT_SECONDS:g} seconds",
            ) from None
        except KeyError:  # a binary frame first
            raise _Refused("bad-request", "the first message must be a start message") from None
        except WebSocketDisconnect:
            raise _Left from None
        start = _start(first)
        user, token = await self._user(websocket, runtime, start.token)
        self._identified(unidentified)
        if token is not None:
            tokens.append(token)
        job = await asyncio.to_thread(runtime.store.get_job, start.job_id)
        if job is None or not may_read(runtime.job_visibility, user, job.owner_id):
            raise _Refused("not-found", f"no job has id {start.job_id!r}")
        if not user.admin and job.owner_id != user.id:
            raise _Refused(
                "forbidden",
                f"job {job.name!r} belongs to {job.owner}; only its owner or an admin may run "
                "commands in its instances",
            )
        backend = runtime.backend
        if not isinstance(backend, ExecsInstances):
            raise _Refused(
                "unavailable", "this server runs no backend that can run commands in instances"
            )
        if job.state.is_final:
            raise _Refused(
                "not-running", f"job {job.name!r} has ended ({job.state}); its instances are gone"
            )
        key = InstanceKey(job_id=job.id, attempt=job.attempt, role=start.role, index=start.index)
        request = start.request
        self._count(user, opened)
        log.info("exec by %s in %s (tty %s): %s", user.name, key, request.tty, request.command)
        try:
            return await asyncio.to_thread(backend.exec_session, key, start.request)
        except UnknownInstance as exc:
            raise _Refused("not-found", f"job {job.name!r}: {exc}") from None
        except BackendError as exc:
            raise _Refused("not-running", f"job {job.name!r}: {exc}") from None

    async def _user(
        self, websocket: WebSocket, runtime: Any, token: str | None
    ) -> tuple[User, str | None]:
        """Who asks, and with which token (None: the local admin of a loopback server)."""
        try:
            if token is None:
                token = bearer_token(websocket.headers.get("authorization"))
            if token is None and await runtime.auth.serves_local_admin():
                refusal = local_admin_refusal(websocket.scope)
                if refusal is not None:
                    raise _Refused("forbidden", refusal)
            return await runtime.auth.user(token), token
        except Unauthorized as exc:
            raise _Refused("unauthorized", str(exc)) from None


def _address(scope: Any) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "an unknown address"


def _start(text: str) -> _Start:
    """The start message's fields, checked; _Refused naming the field and the rule."""
    message = _start_message(text)
    job_id = _start_job(message)
    role = _start_role(message)
    index = _start_index(message)
    command = _start_command(message)
    tty = _start_tty(message)
    size = _start_size(message)
    token = _start_token(message)
    request = ExecRequest(command=command, tty=tty, **size)
    return _Start(job_id, role, index, request, token)


def _start_message(text: str) -> dict[str, Any]:
    """The parsed first message, which must be of type "start"."""
    try:
        message = frames.parse_control(text)
    except frames.FrameError as exc:
        raise _Refused("bad-request", f"start message: {exc}") from None
    if message["type"] != "start":
        kind = message["type"]
        raise _Refused("bad-request", f'the first message must be of type "start", not {kind!r}')
    return message


def _start_job(message: dict[str, Any]) -> str:
    """The database ID of the job in start.job, a global Job ID."""
    job = message.get("job")
    if not isinstance(job, str) or not job:
        raise _Refused("bad-request", "start.job: must be the job's ID")
    try:
        return expect_global_id(job, "Job", argument="start.job")
    except BadId as exc:
        raise _Refused("bad-request", str(exc)) from None


def _start_role(message: dict[str, Any]) -> str:
    role = message.get("role")
    if not isinstance(role, str) or not role:
        raise _Refused("bad-request", "start.role: must be the name of a task role")
    return role


def _is_int(value: Any) -> TypeGuard[int]:
    """Whether `value` is an integer in JSON's sense (true and false are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _start_index(message: dict[str, Any]) -> int:
    index = message.get("index")
    if not _is_int(index) or index < 0:
        raise _Refused("bad-request", "start.index: must be an instance index (an integer >= 0)")
    return index


def _start_command(message: dict[str, Any]) -> list[str]:
    command = message.get("command")
    if (
        not isinstance(command, list)
        or not command
        or len(command) > frames.MAX_COMMAND_ARGS
        or not all(isinstance(arg, str) and "\0" not in arg for arg in command)
    ):
        raise _Refused(
            "bad-request",
            f"start.command: must be a list of 1 to {frames.MAX_COMMAND_ARGS} strings "
            "without NUL bytes",
        )
    return command


def _start_tty(message: dict[str, Any]) -> bool:
    tty = message.get("tty", False)
    if not isinstance(tty, bool):
        raise _Refused("bad-request", "start.tty: must be true or false")
    return tty


def _start_size(message: dict[str, Any]) -> dict[str, int]:
    """The terminal's rows and columns, those the message gives."""
    size = {}
    for field in ("rows", "columns"):
        value = message.get(field)
        if value is None:
            continue
        if not _is_int(value) or not 1 <= value <= 1000:
            raise _Refused("bad-request", f"start.{field}: must be an integer from 1 to 1000")
        size[field] = value
    return size


def _start_token(message: dict[str, Any]) -> str | None:
    """The token in the message, stripped; None when it gives none."""
    token = message.get("token")
    if token is None:
        return None
    if not isinstance(token, str) or not token.strip():
        raise _Refused("bad-request", "start.token: must be a non-empty string")
    return token.strip()


class _Workers:
    """A session's blocking calls on threads of its own: a reader that blocks for as long as
    the command runs, and one worker for input (a write blocks while the command does not read
    its stdin). Neither holds a thread of the event loop's shared pool, which the store's
    queries need. The output queue is bounded: a slow client slows the reader down."""

    def __init__(self, session: ExecSession) -> None:
        self.session = session
        self.loop = asyncio.get_running_loop()
        self.output: asyncio.Queue[tuple[Any, Any]] = asyncio.Queue(maxsize=_QUEUED_CHUNKS)
        self.closed = threading.Event()
        self._input = ThreadPoolExecutor(max_workers=1, thread_name_prefix="exec-in")
        threading.Thread(target=self._read_all, name="exec-out", daemon=True).start()

    def _read_all(self) -> None:
        """Every chunk of output, then ("exit", code) or ("error", BackendError)."""
        try:
            while (chunk := self.session.read()) is not None:
                if not self._put(chunk):
                    return
            end: tuple[Any, Any] = ("exit", self.session.exit_code())
        except BackendError as exc:
            end = ("error", exc)
        except Exception as exc:  # a bug or a broken connection: told, and logged with its trace
            log.exception("exec: reading the command's output failed")
            end = ("error", BackendError(f"reading the command's output failed: {exc}"))
        self._put(end)

    def _put(self, item: tuple[Any, Any]) -> bool:
        """Queue `item` for the event loop, waiting while the queue is full; False once the
        session is closed."""
        try:
            future = asyncio.run_coroutine_threadsafe(self.output.put(item), self.loop)
        except RuntimeError:  # the loop has closed
            return False
        while not self.closed.is_set():
            try:
                future.result(timeout=1)
                return True
            except FutureTimeout:
                continue
        future.cancel()
        return False

    async def call(self, method: Any, *args: Any) -> None:
        await self.loop.run_in_executor(self._input, method, *args)

    def close(self) -> None:
        self.closed.set()
        self._input.shutdown(wait=False, cancel_futures=True)


async def _pump(websocket: WebSocket, session: ExecSession) -> None:
    """Output to the client and the client's input to the command, until the command ends
    (then its exit code) or the client leaves."""
    try:
        await websocket.send_text(frames.control("started"))
    except (WebSocketDisconnect, RuntimeError):
        return
    workers = _Workers(session)
    inbound = asyncio.create_task(_forward_input(websocket, workers))
    try:
        while True:
            kind, value = await workers.output.get()
            if kind == "exit":
                await websocket.send_text(frames.control("exit", code=value))
                await websocket.close(1000)
                return
            if kind == "error":
                log.warning("exec session failed: %s", value)
                await _refuse(websocket, "unavailable", str(value))
                return
            await websocket.send_bytes(frames.data(kind, value))
    except (WebSocketDisconnect, RuntimeError):
        return  # the client left: nothing to tell
    finally:
        workers.close()
        inbound.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await inbound


async def _forward_input(websocket: WebSocket, workers: _Workers) -> None:
    """Stdin, resizes and the end of stdin from the client, as they come."""
    session = workers.session
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            await asyncio.to_thread(session.close)  # not behind a write that blocks
            return
        if message.get("bytes") is not None:
            stream, payload = frames.split_data(message["bytes"])
            if stream == frames.STDIN and payload:
                await workers.call(session.write, payload)
            continue
        try:
            control = frames.parse_control(message.get("text") or "")
        except frames.FrameError as exc:
            await _refuse(websocket, "bad-request", str(exc))
            await asyncio.to_thread(session.close)
            return
        if control["type"] == "resize":
            rows, columns = control.get("rows"), control.get("columns")
            if isinstance(rows, int) and isinstance(columns, int) and rows > 0 and columns > 0:
                await workers.call(session.resize, min(rows, 1000), min(columns, 1000))
        elif control["type"] == "eof":
            await workers.call(session.close_stdin)


async def _refuse(websocket: WebSocket, code: str, message: str) -> None:
    """Tell the client why (an error message, then the close code that goes with it)."""
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        await websocket.send_text(frames.control("error", code=code, message=message))
        await websocket.close(frames.ERROR_CLOSE.get(code, 4500), reason=message[:120])
