"""Provider faults for one source during `kaas compile` with a model: timeout, 429 with
Retry-After, 5xx, malformed JSON, truncated JSON, a truncated HTTP body, schema-invalid output.

A transient fault is retried (honouring Retry-After) and the source compiles; a fault that
persists is reported for that source in the compile report, no corrupt article is written, the
other sources compile, the wiki stays consistent, and the next run compiles the source.
(test_compile_llm.py covers a persistent 500 on one article and an unreachable server;
test_llm_gateway.py covers each fault at the gateway level.)
"""

from __future__ import annotations

import json

import httpx
import pytest

from kb_ai.compile.pipeline import run_compile
from kb_ai.llm.gateway import build_gateway
from kb_ai.store.articles import iter_article_paths, load_article
from kb_ai.store.kb import KnowledgeBase

from compile_checks import assert_consistent, manifest
from fixtures.compile.fake_model import PLAN_MARKER, WRITE_MARKER, compile_responder
from helpers import llm_settings, write_files
from llm_fakes import FakeOpenAI, all_text, chat_json, error_response

GARBAGE = "GARBAGE-7f3a"  # in every faulty reply, so a corrupt article would be found


def _truncated_body() -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "application/json"},
                          content=b'{"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0, "mess')


def _timeout() -> httpx.Response:
    raise httpx.ReadTimeout("timed out")


FAULTS = {
    "timeout": _timeout,
    "429": lambda: error_response(429, f"rate limited {GARBAGE}", headers={"Retry-After": "1"}),
    "500": lambda: error_response(500, f"internal error {GARBAGE}"),
    "503": lambda: error_response(503, f"overloaded {GARBAGE}"),
    "malformed-json": lambda: chat_json(f"Sure! Here is the JSON you asked for: {{{GARBAGE}"),
    "truncated-json": lambda: chat_json('{"summary": "Beta.", "tags": [], "body": "# Beta\\n\\n' + GARBAGE + ' is',
                                        finish_reason="length"),
    "truncated-body": _truncated_body,
    "schema-invalid": lambda: chat_json(json.dumps({"summary": 42, "tags": GARBAGE, "body": ["# Beta", GARBAGE],
                                                    "updates": GARBAGE, "creates": {"x": GARBAGE}})),
    "empty": lambda: chat_json(""),
}
# What the per-source report should say for a fault that persists.
REASONS = {
    "timeout": "did not answer", "429": "rate", "500": "internal error", "503": "overloaded",
    "malformed-json": "JSON", "truncated-json": "JSON", "truncated-body": "", "schema-invalid": "schema",
    "empty": "",
}


SOURCES = {
    "raw/eng/alpha.md": "# Alpha\n\nAlpha is the first project of the team and ships in May.\n",
    "raw/eng/beta.md": "# Beta\n\nBeta is the second project of the team and ships in July.\n",
    "raw/eng/gamma.md": "# Gamma\n\nGamma is the research prototype of the team, no date yet.\n",
}


def is_beta(stage: str):
    marker = PLAN_MARKER if stage == "plan" else WRITE_MARKER
    return lambda body: marker in all_text(body) and 'path="raw/eng/beta.md"' in all_text(body)


SLEEPS: list[float] = []


async def record_sleep(seconds: float) -> None:
    SLEEPS.append(seconds)


@pytest.fixture(autouse=True)
def no_real_sleeps():
    """Retry delays are recorded, not waited (Retry-After must still be honoured): every compile
    here runs with a gateway built with ``record_sleep``."""
    SLEEPS.clear()
    return SLEEPS


def healthy_model(body):
    """The fake compile model; a repair round (bad reply + what was wrong) is answered as the
    original request would have been."""
    messages = body.get("messages") or []
    if len(messages) >= 4 and messages[-2].get("role") == "assistant":
        body = {**body, "messages": messages[:-2]}
    return compile_responder(body)


def compile_with(root, fake_setup, *, retries: int = 0):
    settings = llm_settings(root, max_retries=retries, timeout=2.0)
    gateway = build_gateway(settings, KnowledgeBase(root), sleep=record_sleep)
    with FakeOpenAI() as fake:
        fake_setup(fake)
        fake.add(healthy_model, repeat=True)
        report = run_compile(settings, progress=False, gateway=gateway)
    assert not fake.unmatched
    return report, fake


def assert_no_garbage(root):
    for file in (root / "wiki").rglob("*"):
        if file.is_file():
            assert GARBAGE not in file.read_text(encoding="utf-8"), file


@pytest.mark.parametrize("stage", ["plan", "write"])
@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_persistent_fault_fails_only_that_source(tmp_path, kind, stage):
    write_files(tmp_path, SOURCES)
    report, fake = compile_with(tmp_path, lambda f: f.add(lambda body: FAULTS[kind](), when=is_beta(stage), repeat=True))
    beta = "raw/eng/beta.md" if stage == "plan" else "eng/beta.md"
    assert [f["path"] for f in report.failed] == [beta], (report.failed, report.held)
    assert REASONS[kind] in report.failed[0]["reason"]
    assert "\n" not in report.failed[0]["reason"] and "Traceback" not in report.failed[0]["reason"]
    assert sorted(report.created) == ["eng/alpha.md", "eng/gamma.md"]
    assert not (tmp_path / "wiki" / "eng" / "beta.md").exists()
    assert_no_garbage(tmp_path)
    assert_consistent(tmp_path)
    assert manifest(tmp_path)["sources"]["raw/eng/beta.md"]["status"] != "compiled"
    assert "failed" in report.render_text() and beta in report.render_text()

    # The provider recovers: the next run compiles beta, and only beta.
    report, fake = compile_with(tmp_path, lambda f: None)
    assert report.created == ["eng/beta.md"] and not report.failed
    compile_calls = [r for r in fake.requests if PLAN_MARKER in all_text(r) or WRITE_MARKER in all_text(r)]
    assert compile_calls and all('path="raw/eng/beta.md"' in all_text(r) for r in compile_calls)
    assert "ships in July" in (tmp_path / "wiki" / "eng" / "beta.md").read_text()
    assert_consistent(tmp_path)


@pytest.mark.parametrize("kind", ["timeout", "429", "500", "503", "truncated-body"])
@pytest.mark.parametrize("stage", ["plan", "write"])
def test_transient_fault_is_retried_and_the_source_compiles(tmp_path, no_real_sleeps, kind, stage):
    write_files(tmp_path, SOURCES)
    report, fake = compile_with(tmp_path, lambda f: f.add(lambda body: FAULTS[kind](), when=is_beta(stage)), retries=2)
    assert not report.failed and not report.held
    assert sorted(report.created) == ["eng/alpha.md", "eng/beta.md", "eng/gamma.md"]
    assert len([r for r in fake.requests if is_beta(stage)(r)]) == 2  # the fault, then the retry
    if kind == "429":
        assert 1.0 in no_real_sleeps  # Retry-After was honoured
    assert_no_garbage(tmp_path)
    assert_consistent(tmp_path)


@pytest.mark.parametrize("kind", ["malformed-json", "truncated-json", "schema-invalid"])
@pytest.mark.parametrize("stage", ["plan", "write"])
def test_one_bad_output_gets_a_repair_call_and_the_source_compiles(tmp_path, kind, stage):
    write_files(tmp_path, SOURCES)
    report, fake = compile_with(tmp_path, lambda f: f.add(lambda body: FAULTS[kind](), when=is_beta(stage)))
    assert not report.failed and not report.held, (report.failed, report.held)
    assert sorted(report.created) == ["eng/alpha.md", "eng/beta.md", "eng/gamma.md"]
    assert len([r for r in fake.requests if is_beta(stage)(r)]) == 2  # the bad reply, then the repair
    assert_no_garbage(tmp_path)
    assert_consistent(tmp_path)


@pytest.mark.parametrize("kind", ["timeout", "500", "malformed-json", "schema-invalid"])
def test_fault_on_an_update_keeps_the_previous_article(tmp_path, kind):
    write_files(tmp_path, SOURCES)
    compile_with(tmp_path, lambda f: None)
    article = tmp_path / "wiki" / "eng" / "beta.md"
    before = article.read_text()
    (tmp_path / "raw" / "eng" / "beta.md").write_text("# Beta\n\nBeta is the second project; it now ships in August.\n")
    report, _ = compile_with(tmp_path, lambda f: f.add(lambda body: FAULTS[kind](), when=is_beta("write"), repeat=True))
    assert [f["path"] for f in report.failed] == ["eng/beta.md"]
    assert article.read_text() == before  # the previous text, intact
    assert load_article(tmp_path / "wiki", "eng/beta.md").title == "Beta"
    assert_no_garbage(tmp_path)
    assert_consistent(tmp_path)
    report, _ = compile_with(tmp_path, lambda f: None)
    assert report.updated == ["eng/beta.md"] and "August" in article.read_text()
    assert set(iter_article_paths(tmp_path / "wiki")) == {"eng/alpha.md", "eng/beta.md", "eng/gamma.md"}
