"""The UI's "Add sources" panel and Compile button (DESIGN.md, "HTTP"):

    GET  /api/sources                    {can_add, compiling, ...}: what the panel shows
    POST /api/sources/upload?name=NAME   the request body is the file (Content-Type:
                                         application/octet-stream), stored in raw/ by the
                                         rules of ``compile/add.py``
    POST /api/sources/urls               {"urls": [...]}: fetch web pages into raw/web/
    POST /api/compile                    compile raw/ -> wiki/, its progress as Server-Sent Events
    GET  /api/compile                    follow the compile that runs (started by another tab or
                                         admin): where each stage stands, then its events; or
                                         one ``idle`` event when none runs

All three change the knowledge base, so they are for admins only once tokens are configured
(``Reader.admin``: a ``KAAS_API_TOKEN`` holder or a kaas.toml user with ``admin = true``; on a
loopback server without tokens, the owner). An upload is at most ``MAX_UPLOAD_BYTES``, read in
chunks and refused as soon as it is larger; its name is cleaned to one component of raw/ and it
must be a document compile reads (``compile/add.py: check_document``: the one registry of formats
and ``raw/.kaasignore``). A URL is fetched under the server's ``FetchPolicy``: public
addresses only (every redirect hop and the address actually connected to are checked), unless
the server was started with ``KAAS_ADD_PRIVATE_URLS=1``.

One compile at a time: a second request while one runs is answered 409 ``compile_running`` (the
UI then follows the running one); a compile started elsewhere (``kaas compile``) holds
``.kaas/compile.lock`` and the stream says so. The compile runs in a worker thread and finishes
even if the page that started it is closed; its events are ``stage`` ({stage, count, total,
done?}), ``report`` (the summary counts), then ``done``, or ``error``. Every stream of it gets
them: the one that started it and those that follow it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import threading
from typing import Any, AsyncIterator, Callable

import anyio
from sse_starlette import ServerSentEvent
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kb_ai.compile.add import UPLOAD, store_source
from kb_ai.compile.fetch import FetchPolicy, add_url
from kb_ai.compile.kaasignore import left_out_lines
from kb_ai.compile.progress import Progress
from kb_ai.errors import BadRequestError, KaasError
from kb_ai.server.chat import AnswerStreamResponse, read_json
from kb_ai.server.compile_view import compile_facts, learns_of_compiles
from kb_ai.server.guard import reader_of
from kb_ai.server.pages import error_response
from kb_ai.untrusted_text import as_text

log = logging.getLogger(__name__)

MAX_UPLOAD_BYTES = 20_000_000
MAX_URLS = 10
PRIVATE_URLS_ENV = "KAAS_ADD_PRIVATE_URLS"


class ForbiddenError(KaasError):
    code = "forbidden"
    http_status = 403


class CompileRunningError(KaasError):
    code = "compile_running"
    http_status = 409


def server_fetch_policy() -> FetchPolicy:
    return FetchPolicy.for_server(allow_private=os.environ.get(PRIVATE_URLS_ENV) == "1")


def _require_admin(request: Request) -> None:
    if not reader_of(request).admin:
        raise ForbiddenError("adding sources and compiling are for admins (a token with admin = true)")


async def sources_info_endpoint(request: Request) -> Response:
    """What the UI shows: whether this reader may add sources and compile, and (to those who may
    learn of compiles, ``compile_view``) whether a compile runs."""
    state = request.app.state.kaas
    reader = reader_of(request)
    return JSONResponse({"can_add": reader.admin, **compile_facts(reader, state.compile_job.running),
                         "max_upload_bytes": MAX_UPLOAD_BYTES, "max_urls": MAX_URLS,
                         "private_urls": state.fetch_policy.allow_private})


async def upload_endpoint(request: Request) -> Response:
    state = request.app.state.kaas
    try:
        _require_admin(request)
        kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if kind != "application/octet-stream":  # a cross-site form cannot send this without a preflight
            raise BadRequestError("send the file as the body (Content-Type: application/octet-stream)")
        name = request.query_params.get("name") or ""
        folder = request.query_params.get("folder") or ""
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > MAX_UPLOAD_BYTES:
            raise BadRequestError(f"the file is larger than {MAX_UPLOAD_BYTES // 1_000_000} MB")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_UPLOAD_BYTES:
                raise BadRequestError(f"the file is larger than {MAX_UPLOAD_BYTES // 1_000_000} MB")
            chunks.append(chunk)
        data = b"".join(chunks)
        added = await anyio.to_thread.run_sync(
            lambda: store_source(state.kb.raw_dir, name, data, folder=folder, via=UPLOAD))
    except KaasError as exc:
        return error_response(exc, reader_of(request))
    except OSError as exc:
        log.warning("upload failed: %s", exc)
        return error_response(KaasError(f"could not store the file: {exc.strerror or exc}"), reader_of(request))
    return JSONResponse(added.to_json(), status_code=201 if added.status != "unchanged" else 200)


async def urls_endpoint(request: Request) -> Response:
    state = request.app.state.kaas
    try:
        _require_admin(request)
        payload = await read_json(request, 64_000, "the URLs")
        urls = payload.get("urls") if isinstance(payload, dict) else None
        if not isinstance(urls, list) or not urls or len(urls) > MAX_URLS or not all(isinstance(u, str) for u in urls):
            raise BadRequestError(f"send {{\"urls\": [...]}} with 1 to {MAX_URLS} URLs")
    except KaasError as exc:
        return error_response(exc, reader_of(request))
    policy = state.fetch_policy
    results: list[dict[str, Any]] = []
    for url in urls:
        try:
            added = await anyio.to_thread.run_sync(lambda u=url: add_url(state.kb.raw_dir, u, policy))
            results.append({"url": url, **added.to_json()})
        except KaasError as exc:
            results.append({"url": url, "error": {"code": exc.code, "message": exc.message}})
        except OSError as exc:
            results.append({"url": url, "error": {"code": "storage_error", "message": str(exc.strerror or exc)}})
    return JSONResponse({"results": results})


def _frame(name: str, data: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(event=name, data=as_text(json.dumps(data, ensure_ascii=False, default=str)))


def _summary(report) -> dict[str, Any]:
    return {"mode": report.mode, "sources": report.sources, "created": len(report.created),
            "updated": len(report.updated), "failed": [f"{f['path']}: {f['reason']}" for f in report.failed][:20],
            "skipped": ([f"{s['path']}: {s['reason']}" for s in report.skipped] + left_out_lines(report.left_out))[:20],
            "left_out": report.left_out,
            "notes": (report.notes + ([] if not report.nothing_to_compile else ["raw/ is empty: nothing to compile"]))[:20],
            "usage": report.usage, "seconds": report.seconds, "exit_code": report.exit_code}


class CompileJob:
    """The one compile this server runs at a time, in a worker thread, and the streams that get
    its events: the request that started it and any that follow it (``follow``: another tab,
    another admin). A stream that follows mid-way first gets where each stage stands."""

    def __init__(self) -> None:
        self._running = threading.Lock()
        self._guard = threading.Lock()  # the events so far and the followers (worker thread and loop)
        self._so_far: dict[str, tuple[str, dict]] = {}  # per stage (and report/error): its latest event, in order
        self._followers: list[Callable[[tuple[str, dict]], None]] = []

    @property
    def running(self) -> bool:
        return self._running.locked()

    def _tell(self, name: str, data: dict) -> None:
        """An event of the running compile, from the worker thread, to every stream of it."""
        with self._guard:
            if name != "end":
                self._so_far[f"stage:{data.get('stage')}" if name == "stage" else name] = (name, data)
            followers = list(self._followers)
        for deliver in followers:
            deliver((name, data))

    def _stream(self, replay: list[tuple[str, dict]]) -> AsyncIterator[ServerSentEvent]:
        """A new stream of the running compile's events, after ``replay``. Call with ``_guard`` held."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        for item in replay:
            queue.put_nowait(item)

        def deliver(item: tuple[str, dict]) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the server's loop is closed (shutting down): nobody to tell
                pass

        self._followers.append(deliver)

        async def events() -> AsyncIterator[ServerSentEvent]:
            try:
                while True:
                    name, data = await queue.get()
                    if name == "end":
                        yield _frame("done", {})
                        return
                    yield _frame(name, data)
            finally:  # the client left (or the compile ended): it is told nothing more
                with self._guard:
                    if deliver in self._followers:
                        self._followers.remove(deliver)

        return events()

    def follow(self) -> AsyncIterator[ServerSentEvent] | None:
        """The running compile's events, starting with where each stage stands; None when no
        compile runs."""
        with self._guard:
            if not self.running:
                return None
            return self._stream(list(self._so_far.values()))

    def start(self, state) -> AsyncIterator[ServerSentEvent]:
        if not self._running.acquire(blocking=False):
            raise CompileRunningError("a compile is already running (started from another tab or by another "
                                      "admin); no second compile was started")
        loop = asyncio.get_running_loop()
        with self._guard:
            self._so_far = {}
            self._followers = []
            events = self._stream([])

        def work() -> None:
            from kb_ai.compile.pipeline import run_compile  # noqa: PLC0415 (heavy; only when compiling)

            try:
                settings = dataclasses.replace(state.settings)
                report = run_compile(settings, progress=Progress(False, listener=lambda e: self._tell("stage", e)))
                self._tell("report", _summary(report))
            except KaasError as exc:
                self._tell("error", {"code": exc.code, "message": exc.message})
            except Exception:  # noqa: BLE001 (a bug: logged whole, told briefly)
                log.exception("compile from the UI failed")
                self._tell("error", {"code": "internal_error", "message": "the compile failed; see the server log"})
            finally:
                with self._guard:  # a stream that follows from now on finds no compile running
                    self._running.release()
                if state.watcher is not None:  # the compile's pages: re-indexed and announced now
                    asyncio.run_coroutine_threadsafe(state.watcher.check(), loop)
                self._tell("end", {})

        threading.Thread(target=work, name="kaas-compile", daemon=True).start()
        return events


async def compile_endpoint(request: Request) -> Response:
    state = request.app.state.kaas
    try:
        if request.method == "GET":  # follow the compile that runs, if any
            if not learns_of_compiles(reader_of(request)):
                raise ForbiddenError("following a compile is for admins (a token with admin = true)")
            events = state.compile_job.follow()
            if events is None:
                events = _idle()
        else:
            _require_admin(request)
            events = state.compile_job.start(state)
    except KaasError as exc:
        return error_response(exc, reader_of(request))
    return AnswerStreamResponse(events)


async def _idle() -> AsyncIterator[ServerSentEvent]:
    yield _frame("idle", {"message": "no compile is running"})
