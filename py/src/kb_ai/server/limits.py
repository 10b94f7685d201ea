"""Limits for serving many readers: no one user's questions can starve the others'.

- Per server: the model calls one ``kaas serve`` has in flight, all users together
  (``serve_concurrency``, the gateway's semaphore; ``app.create_app`` sizes it). A server answers
  many chats at once, so this is larger than a compile's ``concurrency``: with 200 concurrent chats
  against a slow model, a small shared limit made every chat wait for the answers ahead of it.
- Per user (a reader named by a token in ``kaas.toml``'s ``[users]``): answers in flight
  (``user_concurrency``: POST ``/api/chat`` and ``/mcp``) and questions per minute (``user_rate``:
  POST ``/api/chat``, a token bucket holding a minute's questions). Past either, the request is
  answered ``429`` with ``Retry-After`` (seconds) before anything is read or any model is called.
  An admin (``KAAS_API_TOKEN``, or a server without tokens: the owner at the keyboard) is not
  limited per user. 0 turns a per-user limit off.

A pure ASGI middleware inside the request guard (which has put the reader in the scope).
"""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from kb_ai.server.guard import READER_KEY, SECURITY_HEADERS

RATED = {("POST", "/api/chat")}  # each one a question (a model call or more)
COUNTED = RATED | {("POST", "/mcp")}  # answers in flight (an MCP tool call holds its POST open)


class UserLimits:
    def __init__(self, app: ASGIApp, *, user_concurrency: int, user_rate: int,
                 clock: Callable[[], float] = time.monotonic):
        self.app = app
        self.user_concurrency = user_concurrency
        self.user_rate = user_rate
        self._clock = clock
        self._lock = threading.Lock()
        self._in_flight: dict[str, int] = {}
        self._buckets: dict[str, tuple[float, float]] = {}  # user -> (tokens, at)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = (scope.get("method", ""), scope.get("path", "")) if scope["type"] == "http" else None
        reader = scope.get(READER_KEY)
        if route not in COUNTED or reader is None or reader.admin:
            await self.app(scope, receive, send)
            return
        user = reader.name
        refusal = self._admit(user, rated=route in RATED)
        if refusal is not None:
            await _send_limited(send, *refusal)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            with self._lock:
                left = self._in_flight.get(user, 1) - 1
                if left > 0:
                    self._in_flight[user] = left
                else:
                    self._in_flight.pop(user, None)

    def _admit(self, user: str, *, rated: bool) -> tuple[int, str] | None:
        """None, and the request counted as in flight; or (seconds to wait, message)."""
        with self._lock:
            if self.user_concurrency and self._in_flight.get(user, 0) >= self.user_concurrency:
                return 1, f"{self.user_concurrency} answers of yours are in progress; wait for one to finish"
            if rated and self.user_rate:
                capacity, per_second = float(self.user_rate), self.user_rate / 60.0
                now = self._clock()
                tokens, at = self._buckets.get(user, (capacity, now))
                tokens = min(capacity, tokens + (now - at) * per_second)
                if tokens < 1.0:
                    self._buckets[user] = (tokens, now)
                    wait = max(1, math.ceil((1.0 - tokens) / per_second))
                    return wait, f"more than {self.user_rate} questions a minute; try again in {wait} s"
                self._buckets[user] = (tokens - 1.0, now)
            self._in_flight[user] = self._in_flight.get(user, 0) + 1
        return None


async def _send_limited(send: Send, retry_after: int, message: str) -> None:
    body = json.dumps({"error": {"code": "rate_limited", "message": message}}).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"retry-after", str(retry_after).encode()), (b"cache-control", b"no-store"), *SECURITY_HEADERS]
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
                await _send_limited(send, wait, f"more than {self.buckets.per_minute} {self.what} a minute; "
                                                f"try again in {wait} s")
                return
        await self.app(scope, receive, send)
