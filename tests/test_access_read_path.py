"""Every way into a page, walked as a reader who may not read some pages, with hostile spellings:
the answers must not depend on anything that reader may not read — not even on whether it exists.

Two knowledge bases (tests/access_twins.py) hold the same public pages; one also holds pages bob
may not read, in every state a file can be in (restricted, admins only, broken frontmatter, too
large, not UTF-8, a directory, a symlink out of the wiki, a saved answer made from a restricted
page, generated files). Every HTTP route, every MCP tool (over /mcp with bob's token and over
stdio ``kaas mcp --user bob``) and ``kaas ask --page`` must answer bob byte for byte alike in both.

The walks enumerate the app's routes and the server's tools: a route or tool added later that
this file does not attack fails here, so no new way of loading a page can skip the check.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import quote

import httpx2
import pytest
from click.testing import CliRunner
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from starlette.routing import Mount
from starlette.testclient import TestClient

from kb_ai.cli import cli
from kb_ai.config import Settings
from kb_ai.server.app import create_app

from access_twins import BOB, OPS, TARGETS, assert_no_secret, make_twins, spellings
from server_fakes import ServerThread

KAAS = str(Path(sys.executable).with_name("kaas"))
QUESTIONS = ("What is the zanzibarite salary band?", "Quorvex board minutes", "Snorkelwhip policy",
             "How are citations validated?", "reverse proxy deployment", "Unrequestedblip")
PUBLIC_PAGE = "ops/links.md"


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    return make_twins(tmp_path_factory.mktemp("twins"))


def client_for(root: Path, token: str) -> TestClient:
    # No vote rate: the walk sends a vote per hostile spelling, and each must reach the path checks.
    return TestClient(create_app(Settings(kb=root, user_vote_rate=0), mcp=False),
                      headers={"Authorization": f"Bearer {token}"})


def _http_shape(response) -> tuple:
    return (response.status_code, response.headers.get("content-type"), response.headers.get("cache-control"),
            response.content)


def _url_forms(spelled: str) -> list[str]:
    """The spelling delivered exactly (every character encoded), and as typed into a URL."""
    return [quote(spelled, safe=""), spelled]


# -- HTTP ------------------------------------------------------------------------------------------

# Every route of the app and how this file attacks it. A new route must be added here.
ROUTES = {"/", "/healthz", "/api/chat", "/api/index", "/api/answers", "/api/pages/{path:path}", "/api/render",
          "/wiki", "/wiki/", "/wiki/{path:path}", "/static", "/mcp",
          # issue 17; /api/events is a stream that never ends, so it is not walked here: what a
          # reader learns from it is tested in test_server_sources.py (feed and real server).
          "/api/feedback", "/api/events", "/api/sources", "/api/sources/upload", "/api/sources/urls", "/api/compile"}


def _http_walk(client: TestClient) -> list[tuple[str, tuple]]:
    """Every request bob makes, with what came back, in a fixed order."""
    seen: list[tuple[str, tuple]] = []

    def record(label: str, response) -> None:
        seen.append((label, _http_shape(response)))

    record("GET /", client.get("/"))
    record("GET /healthz", client.get("/healthz"))
    record("GET /static/app.css", client.get("/static/app.css"))
    record("GET /api/index", client.get("/api/index"))
    record("GET /wiki", client.get("/wiki", follow_redirects=False))
    record("GET /wiki/", client.get("/wiki/"))
    record("GET public page", client.get(f"/api/pages/{PUBLIC_PAGE}"))
    record("GET public wiki page", client.get(f"/wiki/{PUBLIC_PAGE}"))
    for question in QUESTIONS:
        record(f"chat {question}", client.post("/api/chat", json={"question": question, "suggest": True}))
    # Adding sources and compiling are for admins: bob is refused alike on both twins.
    record("GET /api/sources", client.get("/api/sources"))
    record("POST /api/sources/upload", client.post("/api/sources/upload?name=x.md", content=b"x",
                                                   headers={"Content-Type": "application/octet-stream"}))
    record("POST /api/sources/urls", client.post("/api/sources/urls", json={"urls": ["http://example.com/"]}))
    record("POST /api/compile", client.post("/api/compile"))
    record("GET /api/compile", client.get("/api/compile"))
    edit = "---\ntitle: Mine\n---\nmine\n"
    for target in TARGETS:
        for spelled in spellings(target):
            for form in _url_forms(spelled):
                record(f"GET /api/pages/{form}", client.get(f"/api/pages/{form}"))
                record(f"GET /wiki/{form}", client.get(f"/wiki/{form}"))
            exact = quote(spelled, safe="")
            record(f"PUT /api/pages/{exact}", client.put(f"/api/pages/{exact}", json={"markdown": edit}))
            record(f"POST /api/pages/{exact}", client.post(f"/api/pages/{exact}", json={"markdown": edit}))
            body = {"question": "q", "answer": "a [Links](ops/links.md)", "mode": "offline"}
            record(f"save citing {spelled}", client.post("/api/answers", json={**body, "citations": [spelled]}))
            record(f"save reading {spelled}", client.post(
                "/api/answers", json={**body, "citations": [PUBLIC_PAGE], "pages": [PUBLIC_PAGE, spelled]}))
            # the editor's preview: of a hidden page, and of text linking one (Markdown and wikilink)
            record(f"render {spelled}", client.post("/api/render", json={"path": spelled, "markdown": "# x"}))
            record(f"render linking {spelled}", client.post("/api/render", json={
                "path": PUBLIC_PAGE,
                "markdown": f"[x]({spelled}) and [[{spelled}]] and [[{spelled.removesuffix('.md')}]]"}))
            record(f"feedback naming {spelled}", client.post(
                "/api/feedback", json={"vote": "down", "question": "q", "pages": [spelled], "citations": [spelled]}))
    return seen


@pytest.mark.slow
def test_bob_gets_byte_identical_http_answers_whether_or_not_hidden_pages_exist(twins):
    hidden_kb, public_kb = twins
    app = create_app(Settings(kb=hidden_kb.root))
    assert {route.path for route in app.routes} == ROUTES, "a route was added or removed: attack it in _http_walk"
    assert any(isinstance(route, Mount) and route.path == "/static" for route in app.routes)
    with client_for(hidden_kb.root, BOB) as with_hidden, client_for(public_kb.root, BOB) as without:
        walked_hidden = _http_walk(with_hidden)
        walked_public = _http_walk(without)
    assert [label for label, _ in walked_hidden] == [label for label, _ in walked_public]
    differing = [label for (label, a), (_, b) in zip(walked_hidden, walked_public, strict=True) if a != b]
    assert not differing, f"{len(differing)} answers differ, e.g. {differing[:5]}"
    for label, (status, _type, cache, body) in walked_hidden:
        text = body.decode("utf-8", "replace")
        if label.startswith("chat "):  # an answer may repeat the question's own words back
            for word in label.split()[1:]:
                text = text.replace(word.strip("?"), "")
        assert_no_secret(text, f"in {label}")
        if label.split(" ")[1].startswith(("/api", "/wiki")) or label.startswith(("chat", "save")):
            assert cache == "no-store", label  # wiki text and one reader's view are never cached
    # Nothing bob sent wrote anything: no page created, no answer saved from a hidden page.
    for kb in twins:
        assert not any(p.name == "Mine" for p in kb.wiki_dir.rglob("*.md"))
        assert sorted(p.name for p in (kb.wiki_dir / "answers").glob("*.md")) == (
            ["secret-answer.md"] if kb is hidden_kb else [])
    # Admins keep the precise errors.
    with client_for(hidden_kb.root, OPS) as ops:
        assert ops.get("/api/pages/hr/salaries.md").status_code == 200
        assert ops.get("/api/pages/answers/secret-answer.md").status_code == 200
        broken = ops.get("/api/pages/./hr/broken.md")
        assert broken.status_code == 422 and "malformed frontmatter" in broken.json()["error"]["message"]
        assert ops.get("/api/pages/hr/huge.md").status_code == 422
        assert ops.get("/api/pages/hr/latin1.md").status_code == 422
        assert ops.get("/api/pages/hr/link.md").status_code == 400
        assert ops.get("/api/pages/master-index.md").status_code == 404
        assert ops.put("/api/pages/topics.md", json={"markdown": "---\ntitle: x\n---\n"}).status_code == 400




def test_every_response_carrying_wiki_content_or_a_readers_view_is_never_stored(tmp_path):
    kb, _ = make_twins(tmp_path)
    with client_for(kb.root, BOB) as bob, TestClient(create_app(Settings(kb=kb.root), mcp=False)) as nobody:
        answer = {"question": "q", "answer": "a [Links](ops/links.md)", "citations": [PUBLIC_PAGE], "mode": "offline"}
        responses = {
            "the reader's catalog page": bob.get("/wiki/"),
            "an article page": bob.get(f"/wiki/{PUBLIC_PAGE}"),
            "an article page's error": bob.get("/wiki/hr/salaries.md"),
            "a refused spelling's error page": bob.get("/wiki/%2E%2E/x.txt"),
            "the catalog JSON": bob.get("/api/index"),
            "an article JSON": bob.get(f"/api/pages/{PUBLIC_PAGE}"),
            "an article JSON error": bob.get("/api/pages/hr/salaries.md"),
            "an unknown API route": bob.get("/api/nowhere"),
            "a wrong method": bob.delete("/api/index"),
            "a saved answer": bob.post("/api/answers", json=answer),
            "an answer stream": bob.post("/api/chat", json={"question": "proxy"}),
            "no token": nobody.get("/wiki/"),
        }
    for label, response in responses.items():
        assert response.headers.get("cache-control") == "no-store", label
    assert responses["a saved answer"].status_code == 201


# -- MCP -------------------------------------------------------------------------------------------

# Every tool and whether it may change the wiki. A new tool must be added here and to _mcp_walk.
TOOLS = {"ask": True, "read_page": True, "list_pages": True, "ask_and_save": False}


def _tool_shape(result) -> tuple:
    return (result.is_error, [getattr(c, "text", repr(c)) for c in result.content],
            json.dumps(result.structured_content, sort_keys=True))


async def _mcp_walk(client) -> list[tuple[str, tuple]]:
    seen: list[tuple[str, tuple]] = []
    tools = (await client.list_tools()).tools
    assert {t.name for t in tools} == set(TOOLS), "a tool was added or removed: attack it in _mcp_walk"
    for tool in tools:
        assert tool.annotations.read_only_hint is TOOLS[tool.name], tool.name
        if not TOOLS[tool.name]:
            assert tool.annotations.destructive_hint is False

    async def call(name: str, arguments: dict) -> None:
        seen.append((f"{name} {arguments}", _tool_shape(await client.call_tool(name, arguments))))

    await call("list_pages", {})
    for topic in ("hr", "board", "answers", "ops"):
        await call("list_pages", {"topic": topic})
    await call("read_page", {"path": PUBLIC_PAGE})
    for question in QUESTIONS:
        await call("ask", {"question": question, "suggest": True})
    for target in TARGETS:
        for spelled in spellings(target):
            await call("read_page", {"path": spelled})
            await call("ask", {"question": "what does it say?", "paths": [spelled]})
            await call("ask", {"question": "what does it say?", "paths": [PUBLIC_PAGE, spelled]})
            await call("ask_and_save", {"question": "what does it say?", "paths": [PUBLIC_PAGE, spelled]})
    return seen


def _compare(hidden: list, public: list) -> None:
    assert [label for label, _ in hidden] == [label for label, _ in public]
    differing = [label for (label, a), (_, b) in zip(hidden, public, strict=True) if a != b]
    assert not differing, f"{len(differing)} tool results differ, e.g. {differing[:5]}"
    for label, shape in hidden:
        text = json.dumps(shape)
        for question in QUESTIONS:  # an answer may repeat the question's own words back
            if question in label:
                for word in question.split():
                    text = text.replace(word.strip("?"), "")
        assert_no_secret(text, f"in {label}")


@pytest.mark.slow
async def test_mcp_over_http_answers_bob_alike_whether_or_not_hidden_pages_exist(twins):
    walks = []
    for kb in twins:
        # The walk asks more than a minute's questions (user_rate): rates are not what it tests
        # (test_mcp_limits.py does), and a refill between the twins' runs would tell them apart.
        app = create_app(Settings(kb=kb.root, user_rate=0), allowed_hosts=["127.0.0.1", "localhost"])
        with ServerThread(app) as server:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {BOB}"}, timeout=60) as http:
                async with Client(streamable_http_client(server.url + "/mcp", http_client=http)) as client:
                    walks.append(await _mcp_walk(client))
            async with httpx2.AsyncClient(timeout=10) as http:  # the /mcp responses are not cacheable either
                response = await http.post(server.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                           headers={"Authorization": f"Bearer {BOB}",
                                                    "Accept": "application/json, text/event-stream"})
                assert response.headers.get("cache-control") == "no-store"
    _compare(*walks)


@pytest.mark.slow
async def test_stdio_mcp_as_a_user_answers_alike_whether_or_not_hidden_pages_exist(twins):
    walks = []
    for kb in twins:
        params = StdioServerParameters(command=KAAS, args=["--kb", str(kb.root), "mcp", "--user", "bob"],
                                       env={"PATH": "/usr/bin:/bin", "KAAS_USER_RATE": "0"})  # as above
        async with Client(params) as client:
            walks.append(await _mcp_walk(client))
    _compare(*walks)


# -- CLI -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_kaas_ask_page_as_a_user_answers_alike_whether_or_not_hidden_pages_exist(twins):
    runner = CliRunner()
    outputs = []
    for kb in twins:
        seen = []
        for target in TARGETS:
            for spelled in spellings(target)[:6] + spellings(target)[8:10]:
                result = runner.invoke(cli, ["--kb", str(kb.root), "ask", "what does it say?", "--page", spelled,
                                             "--page", PUBLIC_PAGE, "--user", "bob", "--json", "--save"])
                seen.append((spelled, result.exit_code, result.stdout, result.stderr))
        outputs.append(seen)
    assert outputs[0] == outputs[1]
    for _spelled, _code, stdout, stderr in outputs[0]:
        assert_no_secret(stdout + stderr)
    assert not list((twins[1].wiki_dir / "answers").glob("*.md"))  # nothing saved from a refused page


# -- no second page reader -------------------------------------------------------------------------

# What reads an article file. Only store/ (the page reader, the catalog), the keyword index,
# compile and lint (owner operations) may use these; an interface reads through store.pages.load_page.
FILE_READERS = ("read_article_text", "load_article", "safe_wiki_file", "read_text(", "read_bytes(", "open(")
INTERFACE_MODULES = ("server", "navigate", "cli")
ALLOWED = {  # file reads that are not pages
    ("server/pages.py", "read_text("),  # the current text, for the edit's version check, after load_page
    ("server/app.py", "read_text("), ("server/remote.py", "read_text("),  # .kaas/server.json
    ("server/mcp_stdio.py", "open("),  # /dev/null and a copy of stdin: the MCP stdio transport
}


def test_interfaces_read_pages_only_through_the_one_page_reader():
    import kb_ai

    package = Path(kb_ai.__file__).resolve().parent
    offenders = []
    for name in INTERFACE_MODULES:
        files = sorted((package / name).rglob("*.py")) if (package / name).is_dir() else [package / name]
        for file in files:
            rel = file.relative_to(package).as_posix()
            text = file.read_text()
            offenders += [(rel, reader) for reader in FILE_READERS if reader in text and (rel, reader) not in ALLOWED]
    assert not offenders, f"read pages through store.pages.load_page: {offenders}"
