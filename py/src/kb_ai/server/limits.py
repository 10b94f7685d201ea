"""Limits for serving many readers: no one user's questions or streams can starve the others'.

- Per server: the model calls one ``kaas serve`` has in flight, all users together
  (``serve_concurrency``, the gateway's semaphore; ``app.create_app`` sizes it). A server answers
  many chats at once, so this is larger than a compile's ``concurrency``: with 200 concurrent chats
  against a slow model, a small shared limit made every chat wait for the answers ahead of it.
  And at most ``events.MAX_STREAMS`` change streams (``/api/events``) are open at once (503 beyond).
- Per user (a reader named by a token in ``kaas.toml``'s ``[users]``, or ``kaas mcp --user``):
  answers in flight (``user_concurrency``), questions per minute (``user_rate``, a token bucket
  holding a minute's questions) and open streams (``user_streams``: change streams and chats
  together, so one reader cannot take the server's ``MAX_STREAMS`` for itself). Past one, the
  request is refused with a ``LimitedError`` (HTTP: ``429`` with ``Retry-After``; MCP: a tool
  error) before anything is read or any model is called. An admin (``KAAS_API_TOKEN``, or a
  server without tokens: the owner at the keyboard) is not limited per user. 0 turns a per-user
  limit off.

The rule: a slot is held by the work it counts, for exactly as long as that work runs.
``POST /api/chat``'s answer is its response (the answer's stream is closed with it, chat.py), so
the middleware holds the chat's slot for the request. An MCP tool call is not its request: the
SDK's session runs the tool in a task of its own, which can outlive the POST that asked for it.
So ``ask`` and ``ask_and_save`` take their slot themselves, around the answer (``UserLimits.held``,
mcp.py), over every transport (streamable HTTP with or without sessions, stdio).

The counters are one process's: with ``kaas serve --workers N`` each worker counts its own
(docs/server.md, "Several worker processes").
"""

from __future__ import annotations

import json
import math
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kb_ai.config import Settings
from kb_ai.errors import LimitedError
from kb_ai.server.guard import READER_KEY, SECURITY_HEADERS
from kb_ai.store.access import Reader

RATED = {("POST", "/api/chat")}  # each one a question (a model call or more)
ANSWERS = RATED  # an answer in flight for as long as its request (MCP tools count their own)
STREAMS = {("GET", "/api/events"), ("POST", "/api/chat"), ("GET", "/mcp")}  # held open: streams
STREAM_RETRY_SECONDS = 30  # a stream ends when its reader closes it, not by itself


class UserLimits:
    """The per-user counters of one server process: answers in flight, questions a minute, open
    streams. Thread-safe (a lock around every count)."""

    def __init__(self, *, user_concurrency: int, user_rate: int, user_streams: int = 0,
                 clock: Callable[[], float] = time.monotonic):
        self.user_concurrency = user_concurrency
        self.user_rate = user_rate
        self.user_streams = user_streams
        self._lock = threading.Lock()
        self._answers: dict[str, int] = {}
        self._streams: dict[str, int] = {}
        self._questions = UserBuckets(user_rate, clock)

    @classmethod
    def of(cls, settings: Settings) -> "UserLimits":
        return cls(user_concurrency=settings.user_concurrency, user_rate=settings.user_rate,
                   user_streams=settings.user_streams)

    def admit(self, reader: Reader, *, answer: bool = False, rated: bool = False,
              stream: bool = False) -> Callable[[], None]:
        """Count ``reader``'s work (an answer, a question, a stream) and return what uncounts it
        (call it once, when the work ends); or raise ``LimitedError``, counting nothing, when
        one of the reader's limits is reached."""
        if reader.admin:
            return _nothing
        user = reader.name
        self._admit(user, answer=answer, rated=rated, stream=stream)

        def release() -> None:
            with self._lock:
                if answer:
                    _take(self._answers, user)
                if stream:
                    _take(self._streams, user)

        return release

    @contextmanager
    def held(self, reader: Reader, **kinds: bool) -> Iterator[None]:
        """``admit`` for the block's duration."""
        release = self.admit(reader, **kinds)
        try:
            yield
        finally:
            release()

    def _admit(self, user: str, *, answer: bool, rated: bool, stream: bool) -> None:
        with self._lock:
            if answer and self.user_concurrency and self._answers.get(user, 0) >= self.user_concurrency:
                raise LimitedError(f"{self.user_concurrency} answers of yours are in progress; wait for one to finish", 1)
            if stream and self.user_streams and self._streams.get(user, 0) >= self.user_streams:
                raise LimitedError(f"{self.user_streams} streams of yours are open (change streams and chats); "
                                   "close one first", STREAM_RETRY_SECONDS, code="too_many_streams")
            if rated and self.user_rate:
                self._spend_question(user)
            if answer:
                self._answers[user] = self._answers.get(user, 0) + 1
            if stream:
                self._streams[user] = self._streams.get(user, 0) + 1

    def _spend_question(self, user: str) -> None:
        wait = self._questions.take(user)
        if wait is not None:
            raise LimitedError(f"more than {self.user_rate} questions a minute; try again in {wait} s", wait)


def _nothing() -> None:
    """An admin's work: nothing was counted."""


def _take(counts: dict[str, int], user: str) -> None:
    left = counts.get(user, 1) - 1
    if left > 0:
        counts[user] = left
    else:
        counts.pop(user, None)


class UserLimitsMiddleware:
    """A pure ASGI middleware inside the request guard (which has put the reader in the scope):
    the routes of ``ANSWERS``, ``RATED`` and ``STREAMS`` are counted for as long as they run."""

    def __init__(self, app: ASGIApp, *, limits: UserLimits):
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = (scope.get("method", ""), scope.get("path", "")) if scope["type"] == "http" else None
        reader = scope.get(READER_KEY)
        kinds = {"answer": route in ANSWERS, "rated": route in RATED, "stream": route in STREAMS}
        if reader is None or not any(kinds.values()):
            await self.app(scope, receive, send)
            return
        try:
            release = self.limits.admit(reader, **kinds)
        except LimitedError as exc:
            await _send_limited(send, exc)
            return
        released = False

        def release_once() -> None:
            nonlocal released
            if not released:
                released = True
                release()

        async def send_releasing(message: Message) -> None:
            # The work is over once its last byte is handed on: free the slot before the client
            # can see the end, so a question asked right after is never refused by this one.
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                release_once()
            await send(message)

        try:
            await self.app(scope, receive, send_releasing)
        finally:
            release_once()


async def _send_limited(send: Send, exc: LimitedError) -> None:
    body = json.dumps({"error": {"code": exc.code, "message": exc.message}}).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"retry-after", str(exc.retry_after).encode()), (b"cache-control", b"no-store"), *SECURITY_HEADERS]
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class UserBuckets:
    """A token bucket per user: at most ``per_minute`` a minute, the bucket holding a minute's
    worth (a burst is fine, a flood is not). ``per_minute`` 0: no limit. Thread-safe."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic):
        self.per_minute = per_minute
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # user -> (tokens, at)

    def take(self, user: str) -> int | None:
        """None, and one taken from ``user``'s bucket; or the whole seconds until one is there."""
        if not self.per_minute:
            return None
        capacity, per_second = float(self.per_minute), self.per_minute / 60.0
        with self._lock:
            now = self._clock()
            tokens, at = self._buckets.get(user, (capacity, now))
            tokens = min(capacity, tokens + (now - at) * per_second)
            if tokens < 1.0:
                self._buckets[user] = (tokens, now)
                return max(1, math.ceil((1.0 - tokens) / per_second))
            self._buckets[user] = (tokens - 1.0, now)
        return None


class UserRouteRate:
    """Per-user rate of some routes (``routes``: (method, path) pairs), e.g. votes on answers
    (``user_vote_rate``): past it, 429 ``rate_limited`` with ``Retry-After`` before anything is
    read. Admins are not limited per user, as for ``UserLimits``."""

    def __init__(self, app: ASGIApp, *, routes: set[tuple[str, str]], per_minute: int, what: str,
                 clock: Callable[[], float] = time.monotonic):
        self.app = app
        self.routes = routes
        self.what = what
        self.buckets = UserBuckets(per_minute, clock)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = (scope.get("method", ""), scope.get("path", "")) if scope["type"] == "http" else None
        reader = scope.get(READER_KEY)
        if route in self.routes and reader is not None and not reader.admin:
            wait = self.buckets.take(reader.name)
            if wait is not None:
                await _send_limited(send, LimitedError(f"more than {self.buckets.per_minute} {self.what} a minute; "
                                                       f"try again in {wait} s", wait))
                return
        await self.app(scope, receive, send)
