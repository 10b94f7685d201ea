"""Saved answers (wiki/answers/, kind: answer) are navigation, not evidence: they can be
selected and lead to the articles they cite, but no answer may cite them."""

from __future__ import annotations

import json

import frontmatter
from click.testing import CliRunner
from mcp import Client

from kb_ai.cli import cli
from kb_ai.config import Settings, load_settings
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest
from kb_ai.navigate.save import save_answer
from kb_ai.server.mcp import build_mcp_server

from helpers import llm_settings, page_refs
from llm_fakes import FakeOpenAI


async def _save_via_service(kb, question="How are citations validated?"):
    result = await ask(build_service(load_settings(kb.root, env={})), AskRequest(question=question))
    return save_answer(kb, question, result)


def _save_via_cli(kb, question="How are citations validated?"):
    result = CliRunner().invoke(cli, ["--kb", str(kb.root), "ask", question, "--save", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_cli_save_files_an_answer_article(sample_kb):
    data = _save_via_cli(sample_kb)
    path = data["saved_path"]
    assert path == "answers/how-are-citations-validated.md"
    post = frontmatter.load(sample_kb.wiki_dir / path)
    assert post["kind"] == "answer" and post["question"] == "How are citations validated?"
    assert post["citations"] == ["retrieval/citations.md"]
    assert "[Citations](../retrieval/citations.md)" in post.content  # links work from answers/
    assert f"]({path})" in sample_kb.master_index.read_text()  # indexed at once
    again = _save_via_cli(sample_kb)
    assert again["saved_path"] == "answers/how-are-citations-validated-2.md"  # never overwrites


async def test_saved_answer_leads_to_evidence_but_is_never_cited_offline(sample_kb):
    await _save_via_service(sample_kb)
    result = await ask(build_service(load_settings(sample_kb.root, env={})), AskRequest(question="How are citations validated?"))
    paths = [p["path"] for p in result.pages]
    assert "answers/how-are-citations-validated.md" in paths and "retrieval/citations.md" in paths
    assert all(not c["path"].startswith("answers/") for c in result.citations)
    assert page_refs(result.citations) == [{"path": "retrieval/citations.md", "title": "Citations"}]


async def test_a_model_citing_a_saved_answer_gets_that_citation_rejected(sample_kb):
    await _save_via_service(sample_kb)
    settings = llm_settings(sample_kb.root)
    with FakeOpenAI() as fake:
        fake.reply_json({"paths": ["answers/how-are-citations-validated.md"]}, when="navigator of a wiki")
        fake.reply_stream(["As answered before [Saved](answers/how-are-citations-validated.md) ",
                           "and stated in [Citations](retrieval/citations.md)."], when="You answer questions")
        result = await ask(build_service(settings), AskRequest(question="How are citations validated?"))
    answer_prompt = next(r for r in fake.requests if r.get("stream"))
    text = "\n".join(m["content"] for m in answer_prompt["messages"])
    assert 'kind="saved-answer"' in text and "never cite it" in text
    assert '<page path="retrieval/citations.md"' in text  # the saved answer led to its evidence
    assert page_refs(result.citations) == [{"path": "retrieval/citations.md", "title": "Citations"}]
    assert result.invalid_citations == ["answers/how-are-citations-validated.md"]


def test_an_answer_without_citations_is_not_saved(sample_kb):
    result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "ask", "Xyzzy frobnicator?", "--save"])
    assert result.exit_code == 0
    assert "not saved" in result.stderr
    assert not (sample_kb.wiki_dir / "answers").exists()


async def test_mcp_ask_and_save_files_the_answer(sample_kb):
    async with Client(build_mcp_server(load_settings(sample_kb.root, env={}))) as client:
        result = await client.call_tool("ask_and_save", {"question": "Which variable selects the language model?"})
    saved = result.structured_content["saved_path"]
    assert saved and (sample_kb.wiki_dir / saved).is_file()
    assert f"Saved as {saved}." in result.content[0].text


def test_http_save_answer_endpoint(sample_kb):
    from starlette.testclient import TestClient

    from kb_ai.server.app import create_app

    with TestClient(create_app(Settings(kb=sample_kb.root, api_token="t0ken"), mcp=False)) as client:
        auth = {"Authorization": "Bearer t0ken"}
        body = {"question": "How are citations validated?", "answer": "Only pages read [Citations](retrieval/citations.md).",
                "citations": ["retrieval/citations.md"], "mode": "offline"}
        assert client.post("/api/answers", json=body).status_code == 401
        saved = client.post("/api/answers", json=body, headers=auth)
        assert saved.status_code == 201
        path = saved.json()["path"]
        post = frontmatter.load(sample_kb.wiki_dir / path)
        assert post["kind"] == "answer" and post["citations"] == ["retrieval/citations.md"]
        assert f"]({path})" in client.get("/api/index", headers=auth).text or path in sample_kb.master_index.read_text()
        bad = client.post("/api/answers", json={**body, "citations": ["../../etc/passwd"]}, headers=auth)
        unknown = client.post("/api/answers", json={**body, "citations": ["ops/nope.md"]}, headers=auth)
        chained = client.post("/api/answers", json={**body, "citations": [path]}, headers=auth)
        empty = client.post("/api/answers", json={**body, "answer": " "}, headers=auth)
        # Like every JSON route: a cross-site form (urlencoded, no preflight) is refused.
        as_form = client.post("/api/answers", data={"question": "q", "answer": "a"}, headers=auth)
    assert as_form.status_code == 400 and "Content-Type: application/json" in as_form.json()["error"]["message"]
    assert bad.status_code == 400 and unknown.status_code == 404
    assert chained.status_code == 400 and "saved answer" in chained.json()["error"]["message"]
    assert empty.status_code == 400
