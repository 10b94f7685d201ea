"""The Starlette app: routes, the request guard, static UI files, and start-up/shut-down.

Routes (DESIGN.md, "HTTP"):

    GET  /                      the chat UI (web/index.html)
    GET  /static/...            the UI's files
    GET  /wiki/, /wiki/<path>   the catalog and an article, rendered and sanitized
    POST /api/chat              one answer as Server-Sent Events
    GET  /api/index             the catalog as JSON, grouped by topic
    POST /api/answers           file a chat answer into wiki/answers/ (navigation only)
    GET  /api/pages/<path>      one article: frontmatter, markdown, html, toc
    PUT  /api/pages/<path>      save a hand edit (POST works too)
    POST /api/feedback          a thumbs-up/down on an answer -> .kaas/feedback.jsonl (feedback.py)
    GET  /api/events            wiki changes as Server-Sent Events (events.py)
    GET  /api/sources           may this reader add sources; is a compile running
    POST /api/sources/upload    add a file to raw/ (admins; sources.py)
    POST /api/sources/urls      fetch web pages into raw/web/ (admins)
    POST /api/compile           compile, its progress as Server-Sent Events (admins, one at a time)
    GET  /api/compile           follow the compile that runs (its progress so far, then its events)
    GET  /healthz               liveness
    POST /mcp                   the MCP tools over streamable HTTP (mcp.py)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Sequence

import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from kb_ai import __version__
from kb_ai.config import ConfigError, Settings
from kb_ai.navigate.ask import AskService, build_service
from kb_ai.server.assets import default_web_dir
from kb_ai.server.answers import save_answer_endpoint
from kb_ai.server.chat import chat_endpoint
from kb_ai.server.events import MAX_STREAMS, ChangeFeed, events_endpoint
from kb_ai.server.feedback import feedback_endpoint
from kb_ai.server.sources import (CompileJob, compile_endpoint, server_fetch_policy, sources_info_endpoint,
                                  upload_endpoint, urls_endpoint)
from kb_ai.compile.fetch import FetchPolicy
from kb_ai.server.guard import LOOPBACK_HOSTS, RequestGuard
from kb_ai.server.limits import UserLimits, UserLimitsMiddleware, UserRouteRate
from kb_ai.server.listen import bound_port, listen
from kb_ai.store.users import UserDirectory
from kb_ai.server.pages import index_endpoint, page_endpoint, preview_endpoint, template_env, wiki_page_endpoint
from kb_ai.server.watch import WikiWatcher
from kb_ai.files import DamagedFileError, read_state_json, write_state_bytes
from kb_ai.store.kb import KnowledgeBase

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
WATCH_SECONDS = 2.0


@dataclass
class ServerState:
    """What every request handler needs, kept on ``app.state.kaas``."""

    settings: Settings
    service: AskService
    web_dir: Path
    templates: jinja2.Environment
    watcher: WikiWatcher | None = None
    # This run's secret, announced in .kaas/server.json (0600): /healthz proves the server holds
    # it, so `kaas ask` never sends a question to whatever took a stale announcement's port.
    proof_secret: str | None = field(default=None, repr=False)
    changes: ChangeFeed = field(default_factory=ChangeFeed)  # wiki changes for /api/events
    compile_job: CompileJob = field(default_factory=CompileJob)  # the Compile button's one compile
    fetch_policy: FetchPolicy = field(default_factory=server_fetch_policy)  # the URLs the UI may add
    _save_lock: asyncio.Lock | None = field(default=None, repr=False)

    @property
    def kb(self) -> KnowledgeBase:
        return self.service.kb

    @property
    def mode(self) -> str:
        return self.service.navigator.mode

    @property
    def save_lock(self) -> asyncio.Lock:
        if self._save_lock is None:
            self._save_lock = asyncio.Lock()
        return self._save_lock

    def watcher_seen_now(self) -> None:
        if self.watcher is not None:
            self.watcher.mark_seen()


async def ui_endpoint(request: Request) -> Response:
    return FileResponse(request.app.state.kaas.web_dir / "index.html", headers={"Cache-Control": "no-cache"})


async def health_endpoint(request: Request) -> Response:
    """Liveness; with ``?challenge=<hex>``, also the proof that this is the announced server."""
    from kb_ai.server.remote import proof, valid_challenge

    state: ServerState = request.app.state.kaas
    data: dict[str, Any] = {"status": "ok", "version": __version__, "mode": state.mode}
    challenge = request.query_params.get("challenge")
    if state.proof_secret and valid_challenge(challenge):
        data["proof"] = proof(state.proof_secret, challenge)
    return JSONResponse(data, headers={"Cache-Control": "no-store"})


async def http_error(request: Request, exc: Exception) -> Response:
    """Unknown routes and wrong methods: JSON under /api, a plain page elsewhere."""
    status = getattr(exc, "status_code", 500)
    code = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
    message = {404: "no such route", 405: "method not allowed"}.get(status, "request failed")
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)
    template = request.app.state.kaas.templates.get_template("error.html")
    return HTMLResponse(template.render(status=status, message=message.capitalize() + "."), status_code=status)


async def wiki_root_redirect(request: Request) -> Response:
    return RedirectResponse("/wiki/", status_code=308)


def create_app(settings: Settings, *, service: AskService | None = None, web_dir: Path | None = None,
               allowed_hosts: Sequence[str] | None = None, watch_interval: float | None = None,
               warm_up: bool = False, extra_routes: Sequence[BaseRoute] = (), mcp: bool = True,
               announce_url: str | None = None, proof_secret: str | None = None,
               mcp_stateless: bool = False) -> Starlette:
    """The KaaS HTTP app for ``settings``.

    ``service`` replaces the navigator the settings call for (tests, benchmarks);
    ``allowed_hosts`` None answers any Host header; ``watch_interval`` seconds enables re-indexing
    on hand edits; ``warm_up`` prepares the model's transport at start-up, not at the first question;
    ``extra_routes`` are mounted too; ``mcp`` serves the MCP tools over streamable HTTP at ``/mcp``;
    ``announce_url`` is written to ``.kaas/server.json`` while the app runs, so that ``kaas ask``
    can send its questions here instead of loading everything itself; ``proof_secret`` is the
    secret of an announcement written by someone else (the parent of worker processes);
    ``mcp_stateless`` keeps no MCP session between requests (several worker processes)."""
    # A server's model calls in flight, all users together: sized for serving (server/limits.py).
    service = service or build_service(settings.with_overrides(
        concurrency=settings.serve_concurrency, stream_concurrency=min(settings.serve_streams, settings.serve_concurrency)))
    if settings.user_streams >= MAX_STREAMS:
        raise ConfigError(f"user_streams is {settings.user_streams}: it must be below the server's {MAX_STREAMS} "
                          "open streams (or 0: no per-user limit), else one reader can take them all")
    # One set of per-user counters for the whole app: the middleware's (chats, streams) and the
    # MCP tools' (each ask holds its slot while it runs, server/limits.py).
    limits = UserLimits.of(settings)
    mcp_endpoint = None
    if mcp:
        from kb_ai.server.mcp_mount import LazyMCPEndpoint

        # the MCP SDK is imported at the first /mcp request
        mcp_endpoint = LazyMCPEndpoint(settings, service, stateless=mcp_stateless, limits=limits)
    web = Path(web_dir) if web_dir else default_web_dir()
    state = ServerState(settings=settings, service=service, web_dir=web, templates=template_env(web))
    if announce_url:
        from kb_ai.server.remote import new_secret

        state.proof_secret = new_secret()
    elif proof_secret:
        state.proof_secret = proof_secret
    if watch_interval:
        state.watcher = WikiWatcher(service.kb, watch_interval, lambda: state.save_lock, warm=service.warm,
                                    on_change=state.changes.publish)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        tasks: list[asyncio.Task[Any]] = []
        state.changes.bind(asyncio.get_running_loop())
        if state.watcher is not None:
            tasks.append(asyncio.create_task(state.watcher.run(), name="kaas-wiki-watcher"))
        if warm_up and not settings.offline:
            threading.Thread(target=_prepare_transport, args=(service,), name="kaas-warm-up", daemon=True).start()
        if announce_url:
            _announce(service.kb.state_dir, announce_url, settings.model, state.proof_secret or "")
        try:
            # One pool of connections to the model for the server's life, closed at shutdown.
            async with _model_connections(service):
                if mcp_endpoint is not None:
                    async with mcp_endpoint.running():
                        yield
                else:
                    yield
        finally:
            if announce_url:
                _withdraw(service.kb.state_dir)
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    routes: list[BaseRoute] = [
        Route("/", ui_endpoint, methods=["GET"]),
        Route("/healthz", health_endpoint, methods=["GET"]),
        Route("/api/chat", chat_endpoint, methods=["POST"]),
        Route("/api/index", index_endpoint, methods=["GET"]),
        Route("/api/answers", save_answer_endpoint, methods=["POST"]),
        Route("/api/feedback", feedback_endpoint, methods=["POST"]),
        Route("/api/events", events_endpoint, methods=["GET"]),
        Route("/api/sources", sources_info_endpoint, methods=["GET"]),
        Route("/api/sources/upload", upload_endpoint, methods=["POST"]),
        Route("/api/sources/urls", urls_endpoint, methods=["POST"]),
        Route("/api/compile", compile_endpoint, methods=["GET", "POST"]),
        Route("/api/pages/{path:path}", page_endpoint, methods=["GET", "PUT", "POST"]),
        Route("/api/render", preview_endpoint, methods=["POST"]),  # the editor's preview
        Route("/wiki", wiki_root_redirect, methods=["GET"]),
        Route("/wiki/", wiki_page_endpoint, methods=["GET"]),
        Route("/wiki/{path:path}", wiki_page_endpoint, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=str(web), follow_symlink=False), name="static"),
        *([Route("/mcp", mcp_endpoint, methods=["GET", "POST", "DELETE"])] if mcp_endpoint else []),
        *extra_routes,
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: http_error, 405: http_error})
    app.state.kaas = state
    users = UserDirectory(settings.kb, settings.api_token)
    users.check()
    # Inside the guard (added first: the last added runs first), so the reader is known.
    app.add_middleware(UserLimitsMiddleware, limits=limits)
    app.add_middleware(UserRouteRate, routes={("POST", "/api/feedback")}, per_minute=settings.user_vote_rate,
                       what="votes")
    app.add_middleware(RequestGuard, users=users,
                       allowed_hosts=None if allowed_hosts is None else list(allowed_hosts))
    return app


def _announce(state_dir: Path, url: str, model: str | None, secret: str) -> None:
    """Write .kaas/server.json: atomically, and readable by the owner only (it holds the secret)."""
    from kb_ai.server.remote import SERVER_FILE, announcement

    try:
        write_state_bytes(state_dir / SERVER_FILE,
                          (json.dumps(announcement(url, model, secret)) + "\n").encode("utf-8"), mode=0o600)
    except OSError as exc:  # a read-only KB still serves; `kaas ask` just answers in-process
        log.warning("could not write %s: %s", state_dir / SERVER_FILE, exc)


def _withdraw(state_dir: Path) -> None:
    """Remove the announcement if it is still ours (another server may have replaced it)."""
    from kb_ai.server.remote import SERVER_FILE

    target = state_dir / SERVER_FILE
    try:
        info = read_state_json(target, 64_000)  # a FIFO in its place must not hold up the shutdown
        if isinstance(info, dict) and info.get("pid") == os.getpid():
            target.unlink()
    except (OSError, DamagedFileError):
        pass


def _model_connections(service: AskService) -> contextlib.AbstractAsyncContextManager:
    """The server's model calls share keep-alive connections while it runs (``LLMGateway.pooled``):
    no new client and TCP connection per call, which under 200 concurrent chats was a large part
    of each chat's CPU before its first event (docs/benchmarks.md, issue 17)."""
    gateway = getattr(service.navigator, "gateway", None)
    return gateway.pooled() if gateway is not None else contextlib.nullcontext()


def _prepare_transport(service: AskService) -> None:
    """What the model's transport sets up once, done now rather than in the first question: for
    litellm its import (seconds, ~150 MB); for an OpenAI-compatible server over httpx almost
    nothing — litellm is not imported at all."""
    gateway = getattr(service.navigator, "gateway", None)
    if gateway is None:
        return
    try:
        gateway.transport.prepare()
    except Exception:  # noqa: BLE001 (warm-up is an optimisation; the first question reports errors)
        log.debug("model client warm-up failed", exc_info=True)


def hosts_for(host: str) -> list[str] | None:
    """Loopback binds answer only to loopback names (DNS-rebinding defence); others to any."""
    if host in LOOPBACK_HOSTS or host.startswith("127."):
        return sorted({*LOOPBACK_HOSTS, host})
    return None


@dataclass(frozen=True)
class WorkerApp:
    """The app of one worker process of ``kaas serve --workers N``: uvicorn sends this object
    (pickled) to each worker, which calls it to build its own app — its own event loop, model
    connections, catalog cache, watcher and per-user counters. The announcement in
    ``.kaas/server.json`` is the parent's; every worker proves it with the same secret."""

    settings: Settings
    host: str
    proof_secret: str | None
    parent_pid: int = field(default_factory=os.getpid)

    def __call__(self) -> Starlette:
        _exit_with_parent(self.parent_pid)
        return create_app(self.settings, allowed_hosts=hosts_for(self.host), watch_interval=WATCH_SECONDS,
                          warm_up=True, proof_secret=self.proof_secret, mcp_stateless=True)


def _exit_with_parent(parent_pid: int) -> None:
    """In a worker: be sent SIGTERM (a graceful stop) when the parent process dies, however it
    dies (``kill -9`` included), rather than go on serving the port with nobody to stop it
    (Linux's ``PR_SET_PDEATHSIG``; elsewhere uvicorn's supervisor is all there is). A parent
    already gone before this ran is caught by comparing the parent's pid."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes  # noqa: PLC0415

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            log.debug("PR_SET_PDEATHSIG not set", exc_info=True)
    if os.getppid() != parent_pid:
        raise RuntimeError("the `kaas serve` process that started this worker is gone")


def run_server(settings: Settings, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *,
               log_level: str = "info", workers: int = 1,
               on_listening: Callable[[int], None] | None = None) -> None:
    """Serve the app with uvicorn until interrupted (``kaas serve``); ``workers`` > 1 runs that
    many processes on one listening socket (uvicorn's supervisor restarts one that dies).

    The socket is bound first (``ListenError`` for a busy or forbidden address), then
    ``on_listening(port)`` is called with the port bound, so nothing says "serving" before it is
    true."""
    import uvicorn

    if host not in LOOPBACK_HOSTS and not host.startswith("127.") and not UserDirectory(settings.kb, settings.api_token).required():
        log.warning("serving on %s without KAAS_API_TOKEN: anyone who can reach this port can read "
                    "and edit the wiki, add sources, fetch web pages into raw/ and run a compile", host)
    sock = listen(host, port)
    try:
        port = bound_port(sock)
        loopback = host in LOOPBACK_HOSTS or host.startswith("127.")
        bracketed = f"[{host}]" if ":" in host else host
        announce = f"http://{'127.0.0.1' if host == 'localhost' else bracketed}:{port}" if loopback else None
        if on_listening:
            on_listening(port)
        if workers > 1:
            _run_workers(settings, host, port, workers, announce, log_level, sock)
            return
        app = create_app(settings, allowed_hosts=hosts_for(host), watch_interval=WATCH_SECONDS, warm_up=True,
                         announce_url=announce)
        config = uvicorn.Config(app, host=host, port=port, log_level=log_level, proxy_headers=False,
                                timeout_graceful_shutdown=5)
        with contextlib.suppress(KeyboardInterrupt):
            uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()


def _run_workers(settings: Settings, host: str, port: int, workers: int, announce: str | None,
                 log_level: str, sock: socket.socket) -> None:
    """uvicorn's own multi-process supervisor on the bound ``sock``, given a picklable app
    factory (``WorkerApp``) instead of an import string, so the workers get exactly these
    settings."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from kb_ai.server.remote import new_secret

    secret = new_secret() if announce else None
    state_dir = KnowledgeBase(settings.kb).state_dir
    config = uvicorn.Config(WorkerApp(settings, host, secret), factory=True, host=host, port=port,
                            workers=workers, log_level=log_level, proxy_headers=False,
                            timeout_graceful_shutdown=5)
    if announce:
        _announce(state_dir, announce, settings.model, secret or "")
    try:
        Multiprocess(config, sockets=[sock]).run()
    finally:
        if announce:
            _withdraw(state_dir)
