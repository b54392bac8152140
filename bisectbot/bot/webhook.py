"""Receive GitHub ``issue_comment`` webhooks: verify, de-duplicate, hand over.

Why each step:

* **Signature first** (``X-Hub-Signature-256``, HMAC-SHA256 over the raw body, compared
  with :func:`hmac.compare_digest`): anything unsigned or forged gets 401 before its JSON
  is even parsed.
* **De-duplication by ``X-GitHub-Delivery``**: GitHub redelivers on timeouts and people
  press "Redeliver"; a command must not start two bisects. The state database
  (`bot.memory.BotMemory`) remembers the ids; the server only needs the two calls of `DeliveryStore`.
* **Answer fast**: ``on_command`` should enqueue and return (GitHub waits 10 s at most).
  202 = handed over, 200 = understood and ignored (ping, other events, edits, bots).
* **No client holds the server**: uvicorn serves it on one asyncio loop (a slow connection
  costs a socket and a few objects, not a thread); the request head, the body and idle
  keep-alive each have a deadline; the body is refused from its Content-Length and counted
  while read; POSTs in progress are limited while ``GET /healthz`` never waits; what blocks
  (HMAC, JSON, SQLite, ``on_command``) runs on a few threads; clients that hang up or send
  garbage are debug lines, never tracebacks; JSON nested past the interpreter's recursion
  limit is a 400.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import hashlib
import hmac
import json
import logging
import math
import resource
import socket
import threading
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, Mapping, NotRequired, Protocol, TypedDict, runtime_checkable

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

# GitHub caps payloads at 25 MB, but an issue_comment one is two bodies of at most 65,536
# characters (the issue's and the comment's) and metadata: under 1.6 MB even with every
# character escaped as a surrogate pair. A limit near 25 MB would let a few unsigned posts
# hold hundreds of MB.
MAX_BODY = 2 * 1024 * 1024
SIGNATURE_PREFIX = "sha256="


# The fields the bot reads from a comment event, with the JSON type GitHub sends (None: may be null)
_FIELDS: tuple[tuple[tuple[str, ...], type, bool], ...] = (
    (("comment", "id"), int, False),
    (("comment", "body"), str, True),
    (("comment", "author_association"), str, True),
    (("comment", "user"), dict, True),
    (("comment", "user", "login"), str, True),
    (("comment", "user", "type"), str, True),
    (("issue",), dict, False),
    (("issue", "number"), int, False),
    (("repository",), dict, True),
    (("repository", "full_name"), str, True),
)


def payload_problem(payload: Mapping[str, object]) -> str | None:
    """What is wrong with the fields of a comment event the bot reads ("comment.id is str, not a
    number"), or None. Checked before the event is handed over, so a payload of the wrong shape
    is a 400 for its sender, never a handler's traceback and a 500."""
    names = {int: "a number", str: "a string", dict: "an object"}
    for path, kind, nullable in _FIELDS:
        value = _at(payload, path)
        if value is None:
            if nullable or (len(path) > 1 and _at(payload, path[:-1]) is None):
                continue  # null where it may be, or under a null parent (said there)
            return f"{'.'.join(path)} is missing"
        if isinstance(value, bool) or not isinstance(value, kind):
            return f"{'.'.join(path)} is {type(value).__name__}, not {names[kind]}"
        if isinstance(value, int) and value <= 0:
            return f"{'.'.join(path)} is {value}, not a positive number"
    return None


def _at(payload: Mapping[str, object], path: tuple[str, ...]) -> object:
    """The value at a path of keys, None where a step is missing or not an object."""
    value: object = payload
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _text(payload: Mapping[str, object], path: tuple[str, ...], default: str = "") -> str:
    value = _at(payload, path)
    return value if isinstance(value, str) and value else default


@dataclass(frozen=True)
class CommentEvent:
    """What the bot reads of an ``issue_comment`` event: the comment, who wrote it, where.
    Made from a payload `payload_problem` passed (a null text is empty; a null user type, User)."""

    comment_id: int
    issue: int
    body: str
    association: str  # OWNER | MEMBER | COLLABORATOR | …, as GitHub sends it
    login: str
    user_type: str  # User | Bot | Organization
    repo: str  # owner/name, "" when the payload names none

    @classmethod
    def of(cls, payload: Mapping[str, object]) -> "CommentEvent":
        comment_id, issue = _at(payload, ("comment", "id")), _at(payload, ("issue", "number"))
        if not isinstance(comment_id, int) or not isinstance(issue, int):
            raise ValueError(f"not a checked issue_comment payload: {payload_problem(payload)}")
        return cls(
            comment_id=comment_id,
            issue=issue,
            body=_text(payload, ("comment", "body")),
            association=_text(payload, ("comment", "author_association")),
            login=_text(payload, ("comment", "user", "login")),
            user_type=_text(payload, ("comment", "user", "type"), "User"),
            repo=_text(payload, ("repository", "full_name")),
        )


def sign(secret: bytes, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub would send for ``body``."""
    return SIGNATURE_PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify_signature(secret: bytes, body: bytes, header: str | None) -> bool:
    """True only if ``header`` is GitHub's HMAC-SHA256 of ``body`` under ``secret``.

    An empty secret never verifies: a misconfigured server must refuse, not accept all.
    """
    if not secret or not header or not header.startswith(SIGNATURE_PREFIX):
        return False
    expected = sign(secret, body)
    return hmac.compare_digest(expected.encode("ascii"), header.strip().encode("ascii", "replace"))


@runtime_checkable
class DeliveryStore(Protocol):
    """Remembers webhook delivery ids so each delivery is handled once."""

    def add_delivery_if_new(self, delivery_id: str) -> bool:
        """Record ``delivery_id``; True if it was not seen before (atomic check-and-set)."""
        ...

    def forget_delivery(self, delivery_id: str) -> None:
        """Drop a delivery id (its handling failed, so a redelivery should be handled)."""
        ...


@dataclass(frozen=True)
class ServeLimits:
    """What one client can hold of `serve`: every wait has a deadline, every buffer a size.

    GitHub waits 10 s for an answer, so no honest delivery needs longer than these defaults.
    """

    head_timeout: float = 10.0  # request line and headers, from connect or from the last response
    body_timeout: float = 10.0  # a POST's whole body, from the end of its headers (then 408)
    keep_alive: int = 5  # an idle keep-alive connection after a response (uvicorn's timer)
    max_body: int = MAX_BODY  # refused from Content-Length at once, counted while reading (413)
    max_posts: int = 16  # POSTs in progress at once (503 beyond); GET /healthz never counts
    handler_threads: int = 4  # verify, parse, de-duplicate and on_command run on these threads


@dataclass
class ServeStats:
    """Counters of one server (written on its event loop), so tests and benches count, not time."""

    body_bytes: int = 0  # request-body bytes read
    head_timeouts: int = 0  # connections closed because their request head did not arrive in time
    body_timeouts: int = 0  # 408s
    busy: int = 0  # 503s (max_posts reached)


class _Headers(dict[str, str]):
    """A request's headers by lower-case name (the first of repeated ones, as http.server did)."""

    @classmethod
    def of(cls, scope: Scope) -> "_Headers":
        h = cls()
        for name, value in scope["headers"]:
            h.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        return h


class _BodyTooLarge(Exception):
    pass


# The ASGI messages this app reads and sends (https://asgi.readthedocs.io, HTTP): the fields used.
class Scope(TypedDict):
    type: str  # http (lifespan and websockets are off)
    method: NotRequired[str]
    path: NotRequired[str]
    headers: NotRequired[Iterable[tuple[bytes, bytes]]]
    client: NotRequired[tuple[str, int] | None]


class Received(TypedDict):
    type: str  # http.request | http.disconnect
    body: NotRequired[bytes]
    more_body: NotRequired[bool]


class ResponseStart(TypedDict):
    type: str  # http.response.start
    status: int
    headers: list[tuple[bytes, bytes]]


class ResponseBody(TypedDict):
    type: str  # http.response.body
    body: bytes


Receive = Callable[[], Awaitable[Received]]
Send = Callable[[ResponseStart | ResponseBody], Awaitable[None]]


async def _reply(send: Send, status: int, message: str, *, close: bool = False, retry_after: int | None = None) -> None:
    """A JSON ``{"message": …}`` answer; ``close`` when the request body was not read."""
    data = json.dumps({"message": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class WebhookApp:
    """The ASGI app: the cheap refusals on the event loop, everything that blocks on a thread."""

    def __init__(
        self,
        secret: bytes,
        on_command: Callable[[CommentEvent], None],
        seen: DeliveryStore,
        limits: ServeLimits,
        stats: ServeStats,
        executor: concurrent.futures.Executor,
    ) -> None:
        self.secret, self.on_command, self.seen = secret, on_command, seen
        self.limits, self.stats, self.executor = limits, stats, executor
        self.posts = 0  # in progress; only touched on the loop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan and websockets are off
            return
        method = scope["method"]
        if method in ("GET", "HEAD"):  # health checks are never limited
            if scope["path"].rstrip("/") in ("/healthz", ""):
                return await _reply(send, 200, "ok")
            return await _reply(send, 404, "not found")
        if method != "POST":
            return await _reply(send, 501, f"unsupported method {method}", close=True)
        if self.posts >= self.limits.max_posts:
            self.stats.busy += 1
            return await _reply(send, 503, "busy, try again", close=True, retry_after=1)
        self.posts += 1
        try:
            await self._post(scope, receive, send)
        finally:
            self.posts -= 1

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _Headers.of(scope)
        peer = scope.get("client")
        client = f"{peer[0]}:{peer[1]}" if peer else "?"
        try:
            length = int(headers.get("content-length", ""))
        except ValueError:
            return await _reply(send, 411, "Content-Length required", close=True)
        if length < 0 or length > self.limits.max_body:
            return await _reply(send, 413, "payload too large", close=True)
        if not headers.get("x-hub-signature-256", "").startswith(SIGNATURE_PREFIX):
            log.warning("webhook: bad or missing signature from %s", client)  # not worth reading the body
            return await _reply(send, 401, "bad signature", close=True)
        try:
            body = await asyncio.wait_for(self._read(receive, length), self.limits.body_timeout)
        except asyncio.TimeoutError:
            self.stats.body_timeouts += 1
            log.debug("webhook: %s sent its body too slowly", client)
            return await _reply(send, 408, "request body timed out", close=True)
        except _BodyTooLarge:
            return await _reply(send, 413, "payload too large", close=True)
        if body is None:
            return  # the client hung up
        loop = asyncio.get_running_loop()
        status, message = await loop.run_in_executor(self.executor, self.decide, headers, body, client)
        await _reply(send, status, message)

    async def _read(self, receive: Receive, length: int) -> bytes | None:
        """The body, counted as it arrives; None if the client hung up."""
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            self.stats.body_bytes += len(chunk)
            body += chunk
            if len(body) > length or len(body) > self.limits.max_body:
                raise _BodyTooLarge
            if not message.get("more_body", False):
                return bytes(body)

    def decide(self, headers: _Headers, body: bytes, client: str) -> tuple[int, str]:
        """A handler thread: the answer to one complete POST (signature before parsing)."""
        if not verify_signature(self.secret, body, headers.get("x-hub-signature-256")):
            log.warning("webhook: bad or missing signature from %s", client)
            return 401, "bad signature"
        event = headers.get("x-github-event", "")
        delivery = headers.get("x-github-delivery", "").strip()
        if event == "ping":
            return 200, "pong"
        if event != "issue_comment":
            return 200, f"ignored event {event or '(none)'}"
        if not delivery or len(delivery) > 200:
            return 400, "missing X-GitHub-Delivery"
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the interpreter's limit
            return 400, "body is not JSON"
        if not isinstance(payload, dict) or not isinstance(payload.get("comment"), dict):
            return 400, "not an issue_comment payload"
        if payload.get("action") != "created":
            return 200, f"ignored action {payload.get('action')}"
        if (wrong := payload_problem(payload)) is not None:
            log.warning("webhook: delivery %s refused: %s", delivery, wrong)
            return 400, f"not an issue_comment payload: {wrong}"
        comment = CommentEvent.of(payload)
        if comment.user_type == "Bot":
            return 200, "ignored comment by a bot"
        if not self.seen.add_delivery_if_new(delivery):
            return 200, "duplicate delivery ignored"
        try:
            self.on_command(comment)
        except Exception:
            log.exception("webhook: handler failed for delivery %s", delivery)
            self.seen.forget_delivery(delivery)
            return 500, "handler failed"
        return 202, "accepted"


class _HeadDeadline(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request head.

    uvicorn times only idle keep-alive connections, and any byte stops that timer: a client
    that sends half a request line and waits would hold its connection forever.
    """

    head_timeout = 10.0
    stats = ServeStats()
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if not self.transport.is_closing():
            self._head_timer = self.loop.call_later(self.head_timeout, self._head_timed_out)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
            self.stats.head_timeouts += 1  # no request under way: waiting for a head that is late
            self.transport.close()


class _QuietUvicorn(logging.Filter):
    """uvicorn's warnings and notices are about clients (invalid requests, upgrades) or routine
    (started, shutting down): debug lines of this module. Its errors (a bug in the app) stay."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        if log.isEnabledFor(logging.DEBUG):
            log.debug("uvicorn: %s", record.getMessage())
        return False


_QUIET = _QuietUvicorn()


def _loop_exception(loop: asyncio.AbstractEventLoop, context: Mapping[str, object]) -> None:
    """A connection failing is the client's business (debug); running out of descriptors is
    the operator's (one line, no traceback: asyncio pauses accepting for a second)."""
    exc = context.get("exception")
    if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
        log.warning("webhook: %s: %s", context.get("message", "socket error"), exc)
    elif isinstance(exc, OSError):
        log.debug("webhook: %s: %s", context.get("message", "connection error"), exc)
    else:
        loop.default_exception_handler(dict(context))


def _raise_open_file_limit() -> None:
    """Each connection holds a descriptor: the soft limit (often 1024) is raised to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 16
    if soft == resource.RLIM_INFINITY or soft >= target:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("webhook: could not raise the open-file limit from %d: %s", soft, exc)
        return
    log.info("webhook: raised the open-file limit from %d to %d (one per connection)", soft, target)


def _bind(host: str, port: int, backlog: int) -> socket.socket:
    """The listening socket, bound here so that ``port=0`` is known before serving."""
    family, _, _, _, address = socket.getaddrinfo(
        host or "0.0.0.0", port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    return socket.create_server(address, family=family, backlog=backlog)


class WebhookServer:
    """uvicorn on an asyncio loop of its own, in the thread that calls `serve_forever`.

    Keeps the socketserver calls its callers use: ``server_address``, ``serve_forever()``,
    ``shutdown()`` (from another thread; returns once stopped) and ``server_close()``.
    """

    BACKLOG = 4096

    def __init__(
        self,
        host: str,
        port: int,
        app: WebhookApp,
        limits: ServeLimits,
        executor: concurrent.futures.ThreadPoolExecutor,
    ) -> None:
        self.socket = _bind(host, port, self.BACKLOG)
        self.server_address: tuple[Any, ...] = self.socket.getsockname()
        self.app, self.stats, self._executor = app, app.stats, executor
        protocol = type("HeadDeadline", (_HeadDeadline,), {"head_timeout": limits.head_timeout, "stats": app.stats})
        config = uvicorn.Config(
            app,
            http=protocol,
            ws="none",
            lifespan="off",
            interface="asgi3",
            log_config=None,
            access_log=False,  # the app's logging stays as it is
            timeout_keep_alive=limits.keep_alive,
            timeout_graceful_shutdown=max(1, math.ceil(limits.body_timeout)),
            backlog=self.BACKLOG,
            server_header=False,
            headers=[("server", "bisectbot")],
        )
        self._uvicorn = uvicorn.Server(config)
        self._lock = threading.Lock()
        self._closing = self._serving = False
        self._stopped = threading.Event()

    @property
    def connections(self) -> int:
        """Open client connections (read from any thread)."""
        return len(self._uvicorn.server_state.connections)

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serve until `shutdown`. ``poll_interval`` is socketserver's; uvicorn looks every 0.1 s."""
        with self._lock:
            if self._closing:
                return
            self._serving = True
        try:
            asyncio.run(self._serve())
        finally:
            self._stopped.set()

    async def _serve(self) -> None:
        asyncio.get_running_loop().set_exception_handler(_loop_exception)
        try:
            await self._uvicorn.serve(sockets=[self.socket])
        finally:
            for conn in list(self._uvicorn.server_state.connections):  # past the graceful deadline
                transport = getattr(conn, "transport", None)
                if transport is not None:
                    transport.close()

    def shutdown(self) -> None:
        """Stop serving; returns once `serve_forever` has (at once if it never ran)."""
        with self._lock:
            self._closing = True
            serving = self._serving
        self._uvicorn.should_exit = True
        if serving:
            self._stopped.wait()

    def server_close(self) -> None:
        self.socket.close()
        self._executor.shutdown(wait=False, cancel_futures=True)


def make_webhook_server(
    host: str,
    port: int,
    secret: bytes,
    on_command: Callable[[CommentEvent], None],
    seen: DeliveryStore,
    *,
    limits: ServeLimits | None = None,
) -> WebhookServer:
    """An HTTP server (not yet serving) that passes new ``issue_comment`` events on, as CommentEvents.

    Call ``serve_forever()`` (e.g. in a thread) and ``shutdown()``/``server_close()``.
    ``port=0`` picks a free port: read it back from ``server.server_address``.
    Responses: 401 bad signature; 400 malformed; 202 handed to ``on_command``; 200 ignored
    (ping, other events, actions other than ``created``, comments by bots, redeliveries);
    500 if ``on_command`` raised (the delivery id is forgotten so a redelivery is retried);
    411 no Content-Length; 413 body over ``limits.max_body``; 408 body not in time; 503 too
    many POSTs at once. ``GET /healthz`` is 200 whenever the loop runs.
    """
    if not secret:
        raise ValueError("a webhook secret is required")
    limits = limits or ServeLimits()
    logger = logging.getLogger("uvicorn.error")
    if _QUIET not in logger.filters:
        logger.addFilter(_QUIET)
    _raise_open_file_limit()
    executor = concurrent.futures.ThreadPoolExecutor(limits.handler_threads, thread_name_prefix="webhook")
    app = WebhookApp(secret, on_command, seen, limits, ServeStats(), executor)
    return WebhookServer(host, port, app, limits, executor)
