"""One question can neither name unbounded pages nor freeze the server for everybody else.

Pages named for a question (MCP ``paths``, ``kaas ask --page``) are capped at
``MAX_PAGES_PER_QUESTION`` before any is loaded, and read once each. Reading pages, keyword
search and extractive answers run in worker threads: while one slow question runs, another
client's ``/healthz`` (and a second question) is answered at once.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import httpx
import httpx2
import pytest
from click.testing import CliRunner

from kb_ai.cli import cli
from kb_ai.config import Settings
from kb_ai.server.app import create_app

from helpers import llm_settings
from server_fakes import ServerThread

MAX_PAGES_PER_QUESTION = 20  # navigate.ask.MAX_PAGES_PER_QUESTION, the cap /api/chat has for max_pages
SLOW = 1.2      # seconds the first slow step takes (a page on a slow disk, a huge index, ...)
PROMPT = 0.5    # what another client may wait meanwhile (it takes milliseconds when nothing blocks)
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _mcp_session(client: httpx.Client) -> dict[str, str]:
    init = client.post("/mcp", headers=MCP_HEADERS, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    headers = dict(MCP_HEADERS, **{"mcp-session-id": init.headers["mcp-session-id"]})
    client.post("/mcp", headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return headers


def _call_ask(client: httpx.Client, headers: dict, arguments: dict) -> dict:
    response = client.post("/mcp", headers=headers, json={
        "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "ask", "arguments": arguments}})
    text = response.text
    data = text[text.index("{"):text.rindex("}") + 1] if "data:" in text else text
    return json.loads(data)["result"]


@pytest.fixture
def served(sample_kb):
    app = create_app(Settings(kb=sample_kb.root))
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        yield sample_kb, server, client


def test_mcp_ask_refuses_more_named_pages_than_a_question_may_read(served):
    kb, server, client = served
    headers = _mcp_session(client)
    started = time.monotonic()
    result = _call_ask(client, headers, {"question": "citations?", "paths": ["retrieval/citations.md"] * 400})
    assert result["isError"] and f"at most {MAX_PAGES_PER_QUESTION}" in result["content"][0]["text"]
    assert time.monotonic() - started < 10
    repeated = _call_ask(client, headers, {"question": "How are citations validated?",
                                           "paths": ["retrieval/citations.md", "./retrieval/citations.md"] * 3})
    assert not repeated["isError"], repeated
    assert [p["path"] for p in repeated["structuredContent"]["pages"]] == ["retrieval/citations.md"]


def test_the_cap_is_the_one_the_code_uses():
    from kb_ai.navigate.ask import MAX_PAGES_PER_QUESTION as used
    from kb_ai.server.chat import MAX_PAGES_LIMIT

    assert used == MAX_PAGES_LIMIT == MAX_PAGES_PER_QUESTION


def test_kaas_ask_page_is_capped_too(sample_kb):
    args = ["--kb", str(sample_kb.root), "ask", "citations?", "--json"]
    for _ in range(MAX_PAGES_PER_QUESTION + 1):
        args += ["--page", "retrieval/citations.md"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0 and f"at most {MAX_PAGES_PER_QUESTION} pages" in result.stderr, result.output


def _slow_once(real):
    """``real``, but the first call takes ``SLOW`` seconds longer."""
    calls = []

    def slow(*args, **kwargs):
        if not calls:
            calls.append(1)
            time.sleep(SLOW)
        return real(*args, **kwargs)

    return slow


def _slow_page_reads(monkeypatch):
    import kb_ai.store.pages as pages

    monkeypatch.setattr(pages, "read_article_text", _slow_once(pages.read_article_text))


def _slow_search(monkeypatch):
    from kb_ai.offline.lexical import LexicalIndex

    monkeypatch.setattr(LexicalIndex, "search", _slow_once(LexicalIndex.search))


def _slow_extract(monkeypatch):
    import kb_ai.offline.extractive as extractive

    slow = _slow_once(extractive.best_units)
    monkeypatch.setattr(extractive, "best_units", slow)
    import kb_ai.navigate.offline_navigator as offline_navigator

    monkeypatch.setattr(offline_navigator, "best_units", slow)


def _while_running(request, client: httpx.Client, url: str) -> float:
    """Start ``request`` in a thread; once it is under way, time a /healthz from another client."""
    done = threading.Event()
    outcome: list = []

    def run():
        try:
            outcome.append(request())
        finally:
            done.set()

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    time.sleep(0.3)
    assert not done.is_set(), "the slow request ended before it could be measured"
    started = time.monotonic()
    with urllib.request.urlopen(url + "/healthz", timeout=30) as health:  # not httpx: respx may mock it
        assert health.status == 200
    waited = time.monotonic() - started
    worker.join(timeout=60)
    assert outcome, "the slow request failed"
    return waited


@pytest.mark.parametrize("slow_step", [_slow_page_reads, _slow_search, _slow_extract])
def test_a_slow_question_over_http_does_not_freeze_other_clients(served, monkeypatch, slow_step):
    kb, server, client = served
    slow_step(monkeypatch)

    def ask():
        response = client.post("/api/chat", json={"question": "How are citations validated?"})
        assert "event: done" in response.text, response.text
        return response

    assert _while_running(ask, client, server.url) < PROMPT


def test_a_slow_mcp_question_with_named_pages_does_not_freeze_other_clients(served, monkeypatch):
    kb, server, client = served
    headers = _mcp_session(client)
    _slow_page_reads(monkeypatch)

    def ask():
        result = _call_ask(client, headers, {"question": "How are citations validated?",
                                             "paths": ["retrieval/citations.md", "ops/deployment.md"]})
        assert not result["isError"], result
        return result

    assert _while_running(ask, client, server.url) < PROMPT


def test_the_keyword_shortlist_of_a_model_selection_runs_off_the_loop(sample_kb, monkeypatch):
    from llm_fakes import FakeOpenAI

    # A selection budget smaller than the catalog: the model is shown a keyword shortlist (BM25).
    settings = llm_settings(sample_kb.root, select_budget=40)
    with FakeOpenAI() as fake, ServerThread(create_app(settings, mcp=False)) as server, \
            httpx2.Client(base_url=server.url, timeout=60) as client:  # httpx2: respx mocks httpx
        fake.reply_json({"paths": ["retrieval/citations.md"]}, repeat=True)
        fake.reply_stream(["See [Citations](retrieval/citations.md)."], repeat=True)
        _slow_search(monkeypatch)

        def ask():
            response = client.post("/api/chat", json={"question": "How are citations validated?"})
            assert "event: done" in response.text and "keyword matches" in response.text, response.text
            return response

        assert _while_running(ask, client, server.url) < PROMPT
