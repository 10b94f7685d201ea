"""Usage counts every request sent to a model, failed ones too: eight 503s are eight calls, not
zero. For an ask (--json, SSE) and for a compile."""

from __future__ import annotations

import json

from click.testing import CliRunner

from kb_ai.cli import cli
from kb_ai.compile.pipeline import run_compile
from kb_ai.llm.gateway import build_gateway
from kb_ai.store.kb import KnowledgeBase

from helpers import llm_settings
from llm_fakes import API_BASE, JSON_MODE, MODEL, FakeOpenAI, all_text


# The server asks for no wait between retries: the CLI's gateway retries at once.
NO_WAIT = {"Retry-After": "0"}


def test_failed_calls_of_an_ask_are_counted_and_reported(sample_kb, monkeypatch):
    for name, value in (("KAAS_MODEL", MODEL), ("KAAS_API_BASE", API_BASE), ("KAAS_API_KEY", "k"),
                        ("KAAS_MAX_RETRIES", "3"), ("KAAS_CACHE", "false")):
        monkeypatch.setenv(name, value)
    with FakeOpenAI() as fake:
        fake.fail(503, "overloaded", repeat=True, headers=NO_WAIT)
        result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "ask", "--json", "How are citations validated?"])
    data = json.loads(result.stdout)
    # selection: 4 attempts, then the keyword fallback; answer: 4 attempts, then the error
    assert len(fake.requests) == 8
    assert data["usage"]["llm_calls"] == 8 and data["usage"]["failed_calls"] == 8, data["usage"]
    assert {c["error"] for c in data["usage"]["calls"]} == {"llm_server_error"}
    with FakeOpenAI() as fake:
        fake.fail(503, "overloaded", when=JSON_MODE, repeat=True, headers=NO_WAIT)
        fake.reply_stream(["Validated [Citations](retrieval/citations.md)."])
        result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "ask", "How are citations validated?"])
    assert result.exit_code == 0, result.output
    assert "kaas: 5 LLM calls (4 failed)" in result.stderr


def test_failed_calls_of_a_compile_are_counted_and_reported(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.md").write_text("# Alpha\n\nAlpha is the first project of the team and ships in May.\n")
    settings = llm_settings(tmp_path, max_retries=1)

    async def no_wait(seconds: float) -> None:
        return None

    gateway = build_gateway(settings, KnowledgeBase(tmp_path), sleep=no_wait)
    with FakeOpenAI() as fake:
        fake.fail(503, "overloaded", repeat=True)
        report = run_compile(settings, progress=False, gateway=gateway)
    plan_requests = [r for r in fake.requests if "decide where its knowledge belongs" in all_text(r)]
    assert plan_requests and report.failed
    assert report.usage["llm_calls"] == len(fake.requests) and report.usage["failed_calls"] == len(fake.requests)
    assert report.stage("plan").failed_calls == len(plan_requests)
    assert f"{len(fake.requests)} failed" in report.render_text()
