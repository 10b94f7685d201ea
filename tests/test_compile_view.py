"""What a reader learns of compiles (``server/compile_view.py``): nothing. Every route and MCP tool
is walked with a reader's token while a compile runs (the Compile button's job and the writer
lock held) and while only another writer holds the lock (a save, a re-index): the reader's
answers are byte for byte the same, and every read answers as when nothing runs. Admins still
learn everything. A route or tool added later fails here until it is walked."""

from __future__ import annotations

import contextlib
import json
import os
import socket

import httpx
from mcp import Client

from kb_ai.config import Settings
from kb_ai.server import create_app
from kb_ai.server.compile_view import BUSY
from kb_ai.server.mcp import build_mcp_server
from kb_ai.store.access import Reader
from kb_ai.store.lock import CompileLock

from helpers import ADMIN, READER, USERS, build_kb
from server_fakes import ServerThread

PAGE = "ops/deployment.md"
WALKED = {"/", "/healthz", "/api/chat", "/api/index", "/api/answers", "/api/pages/{path:path}", "/api/render", "/wiki",
          "/wiki/", "/wiki/{path:path}", "/static", "/api/feedback", "/api/events", "/api/sources",
          "/api/sources/upload", "/api/sources/urls", "/api/compile"}
WRITES = ("PUT /api/pages", "POST /api/answers")  # the reader's writes: they need the writer lock
TOOLS = {"ask", "read_page", "list_pages", "ask_and_save"}


@contextlib.contextmanager
def compile_running(app, kb):
    """What a compile from the Compile button holds while it runs: its job and the writer lock."""
    job = app.state.kaas.compile_job
    assert job._running.acquire(blocking=False)
    try:
        with CompileLock(kb.state_dir):
            yield
    finally:
        job._running.release()


@contextlib.contextmanager
def another_writer(app, kb):
    """A save, a re-index or the watcher: the writer lock only."""
    with CompileLock(kb.state_dir):
        yield


def _first_event(http: httpx.Client, url: str) -> str:
    with http.stream("GET", url + "/api/events") as response:
        for line in response.iter_lines():
            if line.startswith("event:"):
                return f"{response.status_code} {line}"
    return str(response.status_code)


def _walk(http: httpx.Client, url: str, n: int) -> list[tuple[str, int, str]]:
    """Every route, as the reader; the writes last (in the idle walk they succeed)."""
    seen: list[tuple[str, int, str]] = []

    def record(label: str, response: httpx.Response) -> None:
        seen.append((label, response.status_code, response.text))

    record("GET /", http.get(url + "/"))
    record("GET /static/app.css", http.get(url + "/static/app.css"))
    record("GET /healthz", http.get(url + "/healthz"))
    record("GET /api/index", http.get(url + "/api/index"))
    record("GET /api/sources", http.get(url + "/api/sources"))
    record("GET /api/compile", http.get(url + "/api/compile"))
    record("POST /api/compile", http.post(url + "/api/compile"))
    record("POST /api/sources/upload", http.post(url + "/api/sources/upload?name=x.md", content=b"x",
                                                 headers={"Content-Type": "application/octet-stream"}))
    record("POST /api/sources/urls", http.post(url + "/api/sources/urls", json={"urls": ["http://example.com/"]}))
    record(f"GET /api/pages/{PAGE}", http.get(f"{url}/api/pages/{PAGE}"))
    record("POST /api/render", http.post(url + "/api/render", json={"path": PAGE, "markdown": "# Preview"}))
    record("GET /wiki", http.get(url + "/wiki"))
    record("GET /wiki/", http.get(url + "/wiki/"))
    record(f"GET /wiki/{PAGE}", http.get(f"{url}/wiki/{PAGE}"))
    record("POST /api/chat", http.post(url + "/api/chat", json={"question": "reverse proxy deployment"}))
    record("POST /api/feedback", http.post(url + "/api/feedback", json={"vote": "up", "question": "proxy?"}))
    seen.append(("GET /api/events", 200, _first_event(http, url)))
    page = http.get(f"{url}/api/pages/{PAGE}").json()
    record("PUT /api/pages", http.put(f"{url}/api/pages/{PAGE}", json={
        "markdown": page["markdown"] + f"\nEdit {n}.\n", "version": page["version"]}))
    record("POST /api/answers", http.post(url + "/api/answers", json={
        "question": f"where does it run {n}?", "answer": f"Behind a proxy [Deployment]({PAGE}).",
        "citations": [PAGE], "mode": "offline"}))
    return seen


def test_a_reader_learns_nothing_of_a_compile_on_any_route(tmp_path):
    kb = build_kb(tmp_path / "kb", toml=USERS)
    app = create_app(Settings(kb=kb.root), mcp=False)
    assert {route.path for route in app.routes} == WALKED, "a route was added or removed: walk it in _walk"
    with ServerThread(app) as server, httpx.Client(headers={"Authorization": f"Bearer {READER}"}, timeout=30) as rita, \
            httpx.Client(headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30) as boss:
        with compile_running(app, kb):
            during = _walk(rita, server.url, 1)
            admin_sources = boss.get(server.url + "/api/sources").json()
            admin_page = boss.get(f"{server.url}/api/pages/{PAGE}").json()
            admin_save = boss.put(f"{server.url}/api/pages/{PAGE}", json={"markdown": admin_page["markdown"]})
        with another_writer(app, kb):
            other = _walk(rita, server.url, 1)
        idle = _walk(rita, server.url, 2)
    assert [label for label, *_ in during] == [label for label, *_ in other] == [label for label, *_ in idle]
    differing = [label for (label, *a), (_, *b) in zip(during, other, strict=True) if a != b]
    assert not differing, f"a reader can tell a compile from another writer by {differing}"
    changed = [label for (label, *a), (_, *b) in zip(during, idle, strict=True)
               if a != b and not label.startswith(WRITES)]
    assert not changed, f"a reader can tell that a compile runs by {changed}"
    answers = dict((label, (status, body)) for label, status, body in during)
    assert "compiling" not in json.loads(answers["GET /api/sources"][1])
    for label in WRITES:
        status, body = answers[label]
        assert status == 409 and json.loads(body)["error"] == {"code": "locked", "message": BUSY}, label
        assert str(os.getpid()) not in body and socket.gethostname() not in body and "compil" not in body.lower()
    assert [status for label, status, _ in idle if label.startswith(WRITES)] == [200, 201]  # nothing held: saved
    # Admins learn everything: that a compile runs, and who holds the lock.
    assert admin_sources["compiling"] is True
    assert admin_save.status_code == 409 and f"pid {os.getpid()}" in admin_save.json()["error"]["message"]


async def test_no_mcp_tool_tells_a_reader_of_a_compile(tmp_path):
    kb = build_kb(tmp_path / "kb", toml=USERS)
    rita = Reader("rita", frozenset({"staff"}))
    server = build_mcp_server(Settings(kb=kb.root), stdio_reader=rita)

    async def walk() -> list[tuple[str, bool, str]]:
        seen = []
        async with Client(server) as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS, "a tool was added: walk it here"
            for name, arguments in (("list_pages", {}), ("list_pages", {"topic": "nowhere"}),
                                    ("read_page", {"path": PAGE}), ("read_page", {"path": "x/none.md"}),
                                    ("ask", {"question": "reverse proxy"}),
                                    ("ask_and_save", {"question": "reverse proxy", "paths": [PAGE]})):
                result = await client.call_tool(name, arguments)
                seen.append((name, result.is_error, json.dumps([getattr(c, "text", "") for c in result.content])
                             + json.dumps(result.structured_content, sort_keys=True)))
        return seen

    app = create_app(Settings(kb=kb.root), mcp=False)
    with compile_running(app, kb):
        during = await walk()
    with another_writer(app, kb):
        other = await walk()
    assert during == other
    saved = during[-1][2]
    assert BUSY in saved and str(os.getpid()) not in saved and "compil" not in saved.lower()
