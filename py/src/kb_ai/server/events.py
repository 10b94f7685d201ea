"""``GET /api/events``: a Server-Sent Event stream of wiki changes, so an open Wiki tab and the
catalog refresh themselves when articles change on disk (a hand edit, a ``git pull``, a compile).

The watcher (``watch.py``) re-indexes after each batch of changes and hands the changed article
paths to the ``ChangeFeed``; each open stream then sends one ``wiki`` event, ``{"pages": [...]}``,
with only the paths its reader may know: pages it may read now, or could read before the change
(a page it could read that was removed or hidden). A batch that touches only pages a reader may
not read sends that reader nothing at all, not even an empty event, so a stream never tells a
reader that a hidden page exists, changed, or what it is called. A reader who can read nothing
that changed learns nothing from the timing either.

At most ``MAX_STREAMS`` streams are open at once (503 beyond), and at most ``user_streams`` of
one user's, chats included (429, ``server/limits.py``), so one reader cannot take them all.
Each keeps at most ``QUEUE_LIMIT`` batches waiting (a client too slow to read loses batches and
gets ``{"pages": [], "resync": true}``: reload everything).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, AsyncIterator

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kb_ai.errors import KaasError
from kb_ai.server.guard import reader_of
from kb_ai.store.access import Reader
from kb_ai.store.kb import KnowledgeBase

log = logging.getLogger(__name__)

MAX_STREAMS = 200
QUEUE_LIMIT = 50
PING_SECONDS = 15
RESYNC = object()


class ChangeFeed:
    """Batches of changed article paths, handed to every open stream. ``publish`` may be called
    from any thread once ``bind`` named the event loop."""

    def __init__(self) -> None:
        self._queues: set[asyncio.Queue] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def streams(self) -> int:
        return len(self._queues)

    def subscribe(self) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue()
        self._queues.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue) -> None:
        self._queues.discard(queue)

    def publish(self, paths: list[str]) -> None:
        loop = self._loop
        if loop is None or not paths:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._deliver(list(paths))
        else:
            loop.call_soon_threadsafe(self._deliver, list(paths))

    def _deliver(self, paths: list[str]) -> None:
        for queue in list(self._queues):
            if queue.qsize() >= QUEUE_LIMIT:
                while not queue.empty():
                    queue.get_nowait()
                queue.put_nowait(RESYNC)
            else:
                queue.put_nowait(paths)


def visible_paths(kb: KnowledgeBase, reader: Reader) -> set[str]:
    try:
        return {entry.path for entry in kb.catalog().visible_to(reader).entries}
    except KaasError:  # no wiki (yet): nothing is visible
        return set()


def _frame(name: str, data: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(event=name, data=json.dumps(data, ensure_ascii=False))


async def wiki_events(feed: ChangeFeed, kb: KnowledgeBase, reader: Reader) -> AsyncIterator[ServerSentEvent]:
    queue = feed.subscribe()
    try:
        before = await anyio.to_thread.run_sync(visible_paths, kb, reader)
        yield _frame("ready", {})
        while True:
            batch = await queue.get()
            now = await anyio.to_thread.run_sync(visible_paths, kb, reader)
            if batch is RESYNC:
                before = now
                yield _frame("wiki", {"pages": [], "resync": True})
                continue
            mine = [path for path in batch if path in now or path in before]
            before = now
            if mine:
                yield _frame("wiki", {"pages": mine})
    finally:
        feed.unsubscribe(queue)


async def events_endpoint(request: Request) -> Response:
    state = request.app.state.kaas
    if state.changes.streams >= MAX_STREAMS:
        return JSONResponse({"error": {"code": "too_many_streams", "message": "too many open change streams"}},
                            status_code=503, headers={"Retry-After": "30"})
    return EventSourceResponse(wiki_events(state.changes, state.kb, reader_of(request)), ping=PING_SECONDS,
                               headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
