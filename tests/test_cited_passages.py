"""Passage-level citations (issue 15, item 3): every citation says where in its page the evidence
is — the quoted text (a passage of the page, never words of the answer), its offsets in the page
body and the id of the heading it is under in the rendered page — offline and with a model, in
the SSE ``citations`` event, ``kaas ask --json`` and the MCP ``ask`` tool."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner
from mcp import Client
from starlette.testclient import TestClient

from kb_ai.cli import cli
from kb_ai.config import load_settings
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest
from kb_ai.server.app import create_app
from kb_ai.server.mcp import build_mcp_server
from kb_ai.server.render import render_markdown
from kb_ai.store.anchors import heading_anchors
from kb_ai.store.articles import split_frontmatter
from kb_ai.store.markdown_text import plain_text

from helpers import llm_settings
from llm_fakes import ANSWER, SELECT, FakeOpenAI
from server_fakes import parse_sse


POOL_BODY = (
    "# Connection pool\n\n"
    "The client keeps connections open between requests so that a second request to the same host "
    "does not pay for a new handshake.\n\n"
    "## Limits\n\n"
    "The `max_connections` setting caps how many connections the pool keeps open at once. "
    "Defaults to `100`.\n\n"
    "The `keepalive_expiry` setting closes idle connections after a number of seconds.\n\n"
    "## Limits\n\n"
    "Retries are not part of the pool: a failed request is retried by the transport, three times.\n\n"
    "## Proxies and *TLS*\n\n"
    "A proxy URL such as `http://localhost:3128` routes every request through the proxy.\n"
)
POOL = ("http/connection-pool.md", "Connection pool", "How the client reuses connections.", POOL_BODY)


def _body(kb, path: str) -> str:
    return split_frontmatter((kb.wiki_dir / path).read_text(encoding="utf-8"), path)[1]


def _rendered_text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", "", html).replace("&amp;", "&").split())


def _check_passage(kb, path: str, passage: dict) -> None:
    """The passage is the page's own text: the quote is what a reader sees of body[start:end]
    (and is in the rendered page), and the anchor is the id the renderer gives its heading."""
    body = _body(kb, path)
    assert 0 <= passage["start"] < passage["end"] <= len(body)
    source = body[passage["start"]:passage["end"]]
    # cut at a word when long; a code line is quoted as it is (`__name__` is not emphasis there)
    assert passage["quote"] and (plain_text(source).startswith(passage["quote"]) or source.strip() == passage["quote"])
    rendered = render_markdown(body, from_path=path)
    assert " ".join(passage["quote"].split()) in _rendered_text(rendered.html)
    ids = re.findall(r'<h[1-6] id="([^"]+)"', rendered.html)
    if passage["anchor"] is not None:
        assert passage["anchor"] in ids
        # the heading it names is the last heading before the passage
        before = [a for a in heading_anchors(body) if a.start < passage["start"]]
        assert before and before[-1].id == passage["anchor"] and before[-1].title == passage["heading"]


def test_offline_json_citations_carry_a_verbatim_passage_and_its_heading_anchor(make_kb):
    kb = make_kb(POOL)
    result = CliRunner().invoke(cli, ["--kb", str(kb.root), "ask", "--json", "--offline",
                                      "how many connections does the pool keep open at once?"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    cited = {c["path"]: c for c in data["citations"]}
    pool = cited["http/connection-pool.md"]
    assert pool["passages"], pool
    for passage in pool["passages"]:
        _check_passage(kb, "http/connection-pool.md", passage)
    assert "max_connections setting caps how many connections" in pool["quote"]
    assert pool["anchor"] == "h-limits" and pool["heading"] == "Limits"
    assert pool["passages"][0]["links"] == [0]


def test_a_model_answer_is_matched_to_the_passage_it_paraphrases(make_kb):
    kb = make_kb(POOL)
    with FakeOpenAI() as fake:
        fake.reply_json({"paths": ["http/connection-pool.md"]}, when=SELECT)
        fake.reply_stream([
            "Idle connections are closed after the keep-alive expiry [Connection pool](http/connection-pool.md). ",
            "Failed requests are retried by the transport three times ([Connection pool](http/connection-pool.md)).",
        ], when=ANSWER)
        result = _run(ask(build_service(llm_settings(kb)), AskRequest(question="What happens to idle connections?")))
    assert result.error is None, result.error
    [pool] = result.citations
    quotes = {p["quote"]: p for p in pool["passages"]}
    idle = quotes["The keepalive_expiry setting closes idle connections after a number of seconds."]
    retries = quotes["Retries are not part of the pool: a failed request is retried by the transport, three times."]
    assert idle["links"] == [0] and retries["links"] == [1]
    assert idle["anchor"] == "h-limits"
    assert retries["anchor"] == "h-limits_1"  # the second "Limits" heading: the renderer's own suffix
    for passage in pool["passages"]:
        _check_passage(kb, "http/connection-pool.md", passage)
        # never the answer's words: the model wrote "keep-alive expiry", the page "keepalive_expiry"
        assert "keep-alive expiry" not in passage["quote"]


def test_a_sentence_that_matches_nothing_in_the_page_cites_the_page_only(make_kb):
    kb = make_kb(POOL)
    with FakeOpenAI() as fake:
        fake.reply_json({"paths": ["http/connection-pool.md"]}, when=SELECT)
        fake.reply_stream(["Bananas grow on tall herbaceous plants [Connection pool](http/connection-pool.md)."],
                          when=ANSWER)
        result = _run(ask(build_service(llm_settings(kb)), AskRequest(question="bananas?")))
    [pool] = result.citations
    assert pool["path"] == "http/connection-pool.md" and "passages" not in pool and "quote" not in pool


def test_sse_citations_event_carries_passages_with_a_model(make_kb):
    kb = make_kb(POOL)
    with FakeOpenAI() as fake, TestClient(create_app(llm_settings(kb.root))) as client:
        fake.reply_json({"paths": ["http/connection-pool.md"]}, when=SELECT)
        fake.reply_stream(["Requests can go through a proxy URL [Connection pool](http/connection-pool.md)."],
                          when=ANSWER)
        response = client.post("/api/chat", json={"question": "How do I use a proxy?"})
        page = client.get("/api/pages/http/connection-pool.md").json()
    events = parse_sse(response.text)
    citations = dict(events)["citations"]["citations"]
    passage = citations[0]["passages"][0]
    assert passage["quote"] == "A proxy URL such as http://localhost:3128 routes every request through the proxy."
    assert passage["anchor"] == "h-proxies-and-tls" and passage["heading"] == "Proxies and TLS"
    assert passage["anchor"] in [t["id"] for t in page["toc"]]  # the id the page view scrolls to
    _check_passage(kb, "http/connection-pool.md", passage)


async def test_mcp_ask_returns_passages(make_kb):
    kb = make_kb(POOL)
    async with Client(build_mcp_server(load_settings(kb.root, env={}))) as client:
        result = await client.call_tool("ask", {"question": "how long until idle connections are closed?"})
    assert not result.is_error, result.content
    [pool] = [c for c in result.structured_content["citations"] if c["path"] == "http/connection-pool.md"]
    assert "keepalive_expiry" in pool["quote"] and pool["anchor"] == "h-limits"
    for passage in pool["passages"]:
        _check_passage(kb, "http/connection-pool.md", passage)
    assert '#h-limits): "The keepalive_expiry setting' in result.content[0].text


def test_heading_anchors_are_the_ids_the_renderer_gives(make_kb):
    body = ("# Guide\n\nLead.\n\n## Install\n\nText.\n\n## Install\n\nAgain.\n\n### Ünïcode *and* `code` [link](x.md)\n\n"
            "Text.\n\n```\n# not a heading\n```\n\n#. enumerated (a heading for Python-Markdown)\n\n"
            "## Install_1\n\nText.\n\n## Q&amp;A\n\n##### Deep\n\nText.\n\n## \n\n## !!!\n\nEnd.\n")
    rendered = re.findall(r'<h[1-6] id="([^"]+)"', render_markdown(body).html)
    assert [a.id for a in heading_anchors(body)] == rendered


def _run(coro):
    import asyncio

    return asyncio.run(coro)
