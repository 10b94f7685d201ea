"""Bad model output never reaches a file: output the reader could not read back, implausible
titles and summaries (echoes of kaas's own prompt, placeholders), rewrites that lose an
article's facts or its supersession trail. Each is refused (reported as left alone, exit 1) or
replaced by a deterministic value, never written as is."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kb_ai.cli import cli
from kb_ai.compile.pipeline import run_compile
from kb_ai.config import Settings
from kb_ai.store.articles import MAX_ARTICLE_BYTES, iter_article_paths, load_article
from kb_ai.store.catalog import parse_master_index

from compile_checks import assert_consistent, manifest
from fixtures.compile.fake_model import PLAN_MARKER, WRITE_MARKER, compile_responder
from helpers import llm_settings
from llm_fakes import API_BASE, MODEL, FakeOpenAI, all_text, chat_json


def compile_with(root: Path, responder):
    with FakeOpenAI() as fake:
        fake.add(responder, repeat=True)
        report = run_compile(llm_settings(root, cache=True), progress=False)
    return report, fake


def writing(make_reply):
    def responder(request):
        if WRITE_MARKER in all_text(request):
            return chat_json(json.dumps(make_reply(request)))
        return compile_responder(request)
    return responder


def one_source(root: Path, text: str, name: str = "alpha.md") -> Path:
    (root / "raw").mkdir(exist_ok=True)
    file = root / "raw" / name
    file.write_text(text)
    return file


ALPHA = "# Alpha\n\nAlpha is the first project of the team and ships in May.\n"


# -- the reader's limits, before writing ----------------------------------------------------------


def test_model_output_larger_than_the_reader_accepts_is_not_written(tmp_path):
    one_source(tmp_path, ALPHA)
    huge = "# Alpha\n\n" + ("Alpha ships in May. " * 160_000)  # 3.2 MB
    assert len(huge.encode()) > MAX_ARTICLE_BYTES
    report, _ = compile_with(tmp_path, writing(lambda r: {"summary": "Alpha.", "tags": [], "body": huge}))
    assert not (tmp_path / "wiki" / "general" / "alpha.md").exists()
    # The gateway stops it first: a write reply may be at most what 6,000 tokens can hold, so a
    # server that ignores max_tokens is cut off there (bad output, one repair round) and the
    # source fails; the writer's own check (larger than the reader accepts) is the second wall.
    assert report.created == [] and [f["path"] for f in report.failed] == ["general/alpha.md"]
    assert "ignored max_tokens" in report.failed[0]["reason"]
    assert report.exit_code == 1
    assert manifest(tmp_path)["sources"]["raw/alpha.md"]["status"] == "planned"
    report, _ = compile_with(tmp_path, compile_responder)  # a sane answer next time is written
    assert report.created == ["general/alpha.md"]
    assert_consistent(tmp_path)


def test_a_nul_character_from_the_model_is_refused_like_in_a_hand_edit(tmp_path):
    one_source(tmp_path, ALPHA)
    report, _ = compile_with(tmp_path, writing(
        lambda r: {"summary": "Alpha.", "tags": [], "body": "# Alpha\n\nAlpha ships\x00 in May with the team."}))
    assert not (tmp_path / "wiki" / "general" / "alpha.md").exists()
    assert "NUL" in report.held[0]["reason"]


def test_offline_output_the_reader_could_not_read_is_not_written_either(tmp_path, monkeypatch):
    # Ingest cuts a source to fit an article (tests/test_ingest_edges.py); without that cut, the
    # writer's own check still refuses an article the reader could not read.
    from kb_ai.compile import ingest

    monkeypatch.setattr(ingest, "MAX_TEXT_BYTES", 10_000_000)
    one_source(tmp_path, "# Big\n\n" + ("é" * 60 + " ") * 20_000)  # 1.2 M characters, 2.4 MB as UTF-8
    report = run_compile(Settings(kb=tmp_path), progress=False)
    assert report.created == [] and "larger than" in report.held[0]["reason"]
    assert list(iter_article_paths(tmp_path / "wiki")) == []
    assert report.exit_code == 1


# -- plausible titles and summaries ---------------------------------------------------------------


def test_an_echo_of_kaas_refusal_text_does_not_become_a_summary(tmp_path):
    one_source(tmp_path, ALPHA)
    report, _ = compile_with(tmp_path, writing(lambda r: {"summary": "x", "tags": [], "body": "   "}))
    assert "empty article" in report.held[0]["reason"]

    def echo(request):
        user = request["messages"][-1]["content"]
        refusal = next(line for line in user.splitlines() if line.startswith("Your previous answer"))
        return {"summary": refusal, "tags": [], "body": "# Alpha\n\nAlpha is the first project of the team and ships in May."}

    report, _ = compile_with(tmp_path, writing(echo))
    assert report.created == ["general/alpha.md"]
    article = load_article(tmp_path / "wiki", "general/alpha.md")
    assert article.summary == "Alpha is the first project of the team and ships in May."
    assert any("repeats kaas's own prompt" in w for w in report.warnings)


def test_placeholder_summaries_fall_back_to_the_lead_sentence(tmp_path):
    for n, placeholder in enumerate(["...", "12345", "N/A"]):
        root = tmp_path / str(n)
        root.mkdir()
        one_source(root, ALPHA)
        compile_with(root, writing(lambda r, p=placeholder: {"summary": p, "tags": [], "body": ALPHA}))
        assert load_article(root / "wiki", "general/alpha.md").summary.startswith("Alpha is the first project")


def test_implausible_planned_titles_and_summaries_are_replaced(tmp_path):
    one_source(tmp_path, ALPHA)

    def plan(request):
        if PLAN_MARKER in all_text(request):
            return chat_json(json.dumps({"updates": [], "creates": [
                {"topic": "projects", "slug": "alpha", "title": "...",
                 "summary": "Decide which articles this source updates and which it creates."},
                {"topic": "projects", "slug": "alpha-again", "title": "Alpha", "summary": "Alpha again."}]}))
        return compile_responder(request)

    report, _ = compile_with(tmp_path, plan)
    assert report.created == ["projects/alpha.md"]  # the second "Alpha" is the same page, not a twin
    article = load_article(tmp_path / "wiki", "projects/alpha.md")
    assert article.title == "Alpha"
    rejected = " | ".join(r["detail"] for r in report.rejected)
    assert "title '...' has no words" in rejected and "summary" in rejected and "repeats kaas's own prompt" in rejected
    catalog = parse_master_index((tmp_path / "wiki" / "master-index.md").read_text())
    assert [e.title for e in catalog.entries] == ["Alpha"]


# -- rewrites that lose facts or the trail --------------------------------------------------------


PRICING = """# Pricing

The Solo plan costs $12 per month and includes three projects, unlimited viewers, email support
and a shared calendar. The Team plan costs $30 per month for up to ten people, with priority
support. Annual billing saves two months on either plan. Refunds are possible within 30 days.
"""


def trailed_article(root: Path) -> Path:
    """A small article (under 120 words) with a supersession trail, as a compile leaves it."""
    (root / "raw" / "product").mkdir(parents=True)
    source = root / "raw" / "product" / "pricing.md"
    source.write_text(PRICING.replace("$12", "$9"))
    compile_with(root, compile_responder)
    source.write_text(PRICING)
    compile_with(root, compile_responder)
    article = root / "wiki" / "product" / "pricing.md"
    text = article.read_text()
    assert "[Superseded" in text and len(load_article(root / "wiki", "product/pricing.md").body.split()) < 120
    source.write_text(PRICING + "\nStudents get 50% off the Solo plan.\n")
    return article


def test_a_small_article_is_not_rewritten_to_one_sentence(tmp_path):
    article = trailed_article(tmp_path)
    before = article.read_text()
    report, _ = compile_with(tmp_path, writing(lambda r: {
        "summary": "Pricing.", "tags": [], "body": "# Pricing\n\nStudents get 50% off the Solo plan."}))
    assert article.read_text() == before
    assert [h["path"] for h in report.held] == ["product/pricing.md"] and report.updated == []
    assert report.exit_code == 1


def test_a_rewrite_never_drops_a_supersession_trail_line(tmp_path):
    article = trailed_article(tmp_path)
    before = article.read_text()
    body_without_trail = "\n".join(line for line in load_article(tmp_path / "wiki", "product/pricing.md").body.splitlines()
                                   if not line.startswith("[Superseded"))
    report, _ = compile_with(tmp_path, writing(lambda r: {
        "summary": "Pricing.", "tags": [], "body": body_without_trail + "\n\nStudents get 50% off the Solo plan.\n"}))
    assert article.read_text() == before
    assert "trail line" in report.held[0]["reason"]


# -- the CLI says so ------------------------------------------------------------------------------


def test_cli_exit_status_says_when_model_output_was_refused(tmp_path, monkeypatch):
    one_source(tmp_path, ALPHA)
    monkeypatch.setenv("KAAS_MODEL", MODEL)
    monkeypatch.setenv("KAAS_API_BASE", API_BASE)
    monkeypatch.setenv("KAAS_API_KEY", "sk-test")
    monkeypatch.setenv("KAAS_MAX_RETRIES", "0")
    with FakeOpenAI() as fake:
        fake.add(writing(lambda r: {"summary": "x", "tags": [], "body": " "}), repeat=True)
        result = CliRunner().invoke(cli, ["--kb", str(tmp_path), "compile", "--json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["exit_code"] == 1 and data["held"][0]["path"] == "general/alpha.md"


def test_the_http_save_applies_the_same_checks_and_says_what_is_wrong(sample_kb):
    """A lone surrogate (which no UTF-8 file can hold) in a hand-edit save is a clear error, not a
    failed write: the one JSON body reader refuses it (400, issue 12 item 16) before the article
    check that both writers share would (422)."""
    from starlette.testclient import TestClient

    from kb_ai.server import create_app

    page = sample_kb.wiki_dir / "ops" / "deployment.md"
    before = page.read_text()
    body = '{"markdown": "---\\ntitle: Deployment\\n---\\n# Deployment\\n\\nBroken \\ud800 text.\\n"}'
    with TestClient(create_app(Settings(kb=sample_kb.root))) as client:
        saved = client.put("/api/pages/ops/deployment.md", content=body, headers={"Content-Type": "application/json"})
    assert saved.status_code == 400, saved.text
    assert saved.json()["error"]["code"] == "bad_request" and "lone surrogate" in saved.json()["error"]["message"]
    assert page.read_text() == before
