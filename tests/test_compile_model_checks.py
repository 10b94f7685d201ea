"""The model path keeps its promises with any model (issue 27): what the model wrote is checked
against what it was given; schemas state the prompts' limits; long calls stream, and a stalled
one is closed before it is retried; probes are not failures; Ctrl-C says what was saved."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from kb_ai.compile.pipeline import run_compile
from kb_ai.llm.gateway import GatewayConfig, LLMGateway
from kb_ai.store.articles import load_article

from fixtures.compile.fake_model import PLAN_MARKER, WRITE_MARKER, compile_responder
from helpers import llm_settings
from llm_fakes import FakeOpenAI, all_text, chat_json, response_format_type
from server_fakes import ServerThread

FAQ = """# Support FAQ

## How do I export my data?

Open Settings, choose Export and download the CSV file. Exports run every Tuesday at 02:00 UTC.

## What does the Team plan cost?

The Team plan costs $12 per user per month.
"""


def compile_with(root: Path, responder, **settings):
    with FakeOpenAI() as fake:
        fake.add(responder, repeat=True)
        report = run_compile(llm_settings(root, **settings), progress=False)
    return report, fake


def writes(fake) -> list[dict]:
    return [r for r in fake.requests if WRITE_MARKER in all_text(r)]


def plans(fake) -> list[dict]:
    return [r for r in fake.requests if PLAN_MARKER in all_text(r)]


def write_answer(answer):
    """The usual fake model, with its write replies made by ``answer(request)``."""
    def responder(body):
        if WRITE_MARKER in all_text(body):
            return chat_json(json.dumps(answer(body)))
        return compile_responder(body)
    return responder


def faq_kb(root: Path) -> None:
    (root / "raw" / "support").mkdir(parents=True)
    (root / "raw" / "support" / "faq.md").write_text(FAQ)


# -- item 1: content ---------------------------------------------------------------------------------


def test_a_model_article_that_drops_facts_is_retried_once_then_kept_as_the_offline_article(tmp_path):
    faq_kb(tmp_path)
    lossy = {"summary": "Answers to support questions.", "tags": ["faq"],
             "body": "# Support FAQ\n\nThe FAQ answers common questions about the product and its plans."}
    report, fake = compile_with(tmp_path, write_answer(lambda body: lossy))
    assert len(writes(fake)) == 2  # one retry, no more
    retry = all_text(writes(fake)[1])
    assert "left out facts" in retry and "'Tuesday'" in retry and "'$12'" in retry
    article = load_article(tmp_path / "wiki", "support/support-faq.md")
    for fact in ("every Tuesday", "$12", "Export", "02:00"):
        assert fact in article.body  # the offline article: the source's own text
    lines = [w for w in report.warnings if "raw/support/faq.md: the model's article dropped" in w]
    assert lines and "kept the offline article" in lines[0]
    assert report.created == ["support/support-faq.md"] and report.exit_code == 0


def test_a_retry_that_keeps_the_facts_is_the_article(tmp_path):
    faq_kb(tmp_path)
    answers = iter([{"summary": "FAQ.", "tags": [], "body": "# Support FAQ\n\nAnswers to the common questions of users."},
                    {"summary": "FAQ.", "tags": [], "body": FAQ.replace("# Support FAQ", "# Support FAQ\n\nIn short:")}])
    report, fake = compile_with(tmp_path, write_answer(lambda body: next(answers)))
    assert len(writes(fake)) == 2
    assert "In short:" in load_article(tmp_path / "wiki", "support/support-faq.md").body
    assert any("asked again, it kept them" in w for w in report.warnings)


def test_an_update_planned_into_an_unrelated_article_becomes_its_own_article(tmp_path):
    (tmp_path / "raw" / "flask").mkdir(parents=True)
    (tmp_path / "raw" / "uvicorn").mkdir(parents=True)
    (tmp_path / "raw" / "flask" / "caching.md").write_text(
        "# Caching\n\nFlask-Caching stores rendered views in Redis or memcached so repeated requests are cheap.\n")
    compile_with(tmp_path, compile_responder)  # flask/caching.md exists: a candidate of the next plan
    (tmp_path / "raw" / "uvicorn" / "lifespan.md").write_text(
        "# Lifespan\n\nThe ASGI lifespan protocol runs startup and shutdown events. Uvicorn sends "
        "`lifespan.startup` before serving and `lifespan.shutdown` on exit; `--lifespan off` disables it. "
        "A Flask app has no lifespan events.\n")  # (a word in common: caching is a candidate)

    def responder(body):
        text = all_text(body)
        if PLAN_MARKER in text and 'path="raw/uvicorn/lifespan.md"' in text and "flask/caching.md" in text:
            return chat_json(json.dumps({"updates": [{"path": "flask/caching.md", "reason": "related"}]}))
        return compile_responder(body)

    report, _ = compile_with(tmp_path, responder)
    caching = load_article(tmp_path / "wiki", "flask/caching.md")
    assert caching.meta["sources"] == ["raw/flask/caching.md"]  # nothing of lifespan listed in it
    assert "uvicorn/lifespan.md" in report.created
    assert "lifespan.startup" in load_article(tmp_path / "wiki", "uvicorn/lifespan.md").body
    assert any("flask/caching.md" in r["detail"] and "shares too little" in r["detail"] for r in report.rejected)


def test_an_update_of_a_related_article_is_kept(tmp_path):
    (tmp_path / "raw" / "product").mkdir(parents=True)
    (tmp_path / "raw" / "product" / "pricing-notes.md").write_text(
        "# Pricing notes\n\nPricing for the Solo plan: students get 50% off.\n")
    compile_with(tmp_path, compile_responder)
    (tmp_path / "raw" / "product" / "pricing.md").write_text("# Pricing\n\nThe Solo plan costs $12 per month.\n")

    def responder(body):
        text = all_text(body)
        if PLAN_MARKER in text and 'path="raw/product/pricing.md"' in text and "product/pricing-notes.md" in text:
            return chat_json(json.dumps({"updates": [{"path": "product/pricing-notes.md"}], "creates": []}))
        return compile_responder(body)

    report, _ = compile_with(tmp_path, responder)
    assert not report.rejected
    assert "raw/product/pricing.md" in load_article(tmp_path / "wiki", "product/pricing-notes.md").meta["sources"]


def test_a_summary_stating_a_value_the_body_contradicts_is_replaced(tmp_path):
    (tmp_path / "raw" / "product").mkdir(parents=True)
    (tmp_path / "raw" / "product" / "pricing.md").write_text("# Pricing\n\nThe Solo plan costs $12 per month.\n")
    answer = {"summary": "The Solo plan costs $9 per month.", "tags": [],
              "body": "# Pricing\n\nThe Solo plan costs $12 per month.\n"}
    report, _ = compile_with(tmp_path, write_answer(lambda body: answer))
    article = load_article(tmp_path / "wiki", "product/pricing.md")
    assert "$9" not in article.summary and "$12" in article.summary
    assert any("summary states '$9'" in w for w in report.warnings)


# -- item 6: schemas ---------------------------------------------------------------------------------


def _schema(request: dict) -> dict:
    return request["response_format"]["json_schema"]["schema"]


def test_the_plan_schema_states_the_prompts_limits_and_requires_no_update(tmp_path):
    faq_kb(tmp_path)

    def responder(body):
        if PLAN_MARKER in all_text(body):  # no candidate fits: no "updates" at all
            return chat_json(json.dumps({"creates": [{"topic": "support", "slug": "faq", "title": "Support FAQ"}]}))
        return compile_responder(body)

    report, fake = compile_with(tmp_path, responder)
    schema = _schema(plans(fake)[0])
    assert schema["properties"]["updates"]["maxItems"] == 4 and schema["properties"]["creates"]["maxItems"] == 3
    assert "updates" not in schema.get("required", [])
    assert len(plans(fake)) == 1 and report.created == ["support/faq.md"]  # accepted as it is: no repair
    write = _schema(writes(fake)[0])
    assert write["properties"]["tags"]["maxItems"] == 6 and write["properties"]["summary"]["maxLength"] == 200


def test_a_plan_of_fifty_updates_is_refused_by_the_schema(tmp_path):
    faq_kb(tmp_path)

    def responder(body):
        if PLAN_MARKER in all_text(body) and len(body["messages"]) == 2:  # the first answer, not the repair
            return chat_json(json.dumps({"updates": [{"path": "raw/support/faq.md"}] * 50, "creates": []}))
        return compile_responder(body)

    report, fake = compile_with(tmp_path, responder)
    repair = plans(fake)[1]
    assert len(plans(fake)) == 2 and "schema mismatch at updates" in all_text(repair)
    assert report.created and not report.failed


# -- item 5: long calls stream; a stalled one is closed before its retry ---------------------------------


class _Streams:
    def __init__(self, mode: str):
        self.mode, self.requests, self.disconnects, self.events = mode, 0, 0, []


def _stream_app(state: _Streams) -> Starlette:
    """An OpenAI-compatible server streaming ``{"ok": true}`` slowly: "steady" sends a chunk every
    0.15 s (2 s in all); "stall" sends one chunk on the first request, then nothing (it notes when
    the client closed the connection), and answers the next at once."""

    async def chat(request: Request):
        await request.json()
        state.requests += 1
        number = state.requests
        state.events.append(f"request {number}")

        def chunk(text, finish=None):
            payload = {"choices": [{"index": 0, "delta": {"content": text} if text else {}, "finish_reason": finish}]}
            return f"data: {json.dumps(payload)}\n\n"

        async def body():
            try:
                pieces = ['{"ok"', ": ", "true", "}"]
                if state.mode == "stall" and number == 1:
                    yield chunk(pieces[0])
                    while True:
                        if await request.is_disconnected():
                            raise asyncio.CancelledError
                        await asyncio.sleep(0.05)
                for i, piece in enumerate(pieces * 3 if state.mode == "steady" else pieces):
                    if state.mode == "steady":
                        await asyncio.sleep(0.15)
                    if state.mode == "steady" and i >= len(pieces):
                        piece = " "  # whitespace after the JSON: the reply keeps coming
                    yield chunk(piece)
                yield chunk("", "stop")
                yield "data: [DONE]\n\n"
            except asyncio.CancelledError:
                state.disconnects += 1
                state.events.append(f"disconnect {number}")
                raise

        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def _ask(url: str, **config) -> object:
    gateway = LLMGateway(GatewayConfig(model="openai/m", api_base=f"{url}/v1", **config))
    return asyncio.run(gateway.complete_json([{"role": "user", "content": "x"}], schema={"type": "object"},
                                             schema_name="t", purpose="test", max_tokens=6000, stream=True))


@pytest.mark.slow
def test_a_slow_but_steady_stream_is_not_timed_out():
    state = _Streams("steady")
    with ServerThread(_stream_app(state)) as server:
        # 2 s of reply against a 0.5 s timeout and a 1.5 s default deadline (3 x timeout)
        assert _ask(server.url, timeout=0.5, max_retries=0) == {"ok": True}
    assert state.requests == 1 and state.disconnects == 0


def test_a_stalled_stream_is_closed_before_it_is_retried():
    state = _Streams("stall")
    with ServerThread(_stream_app(state)) as server:
        assert _ask(server.url, timeout=0.5, max_retries=1) == {"ok": True}
        deadline = time.monotonic() + 3
        while state.disconnects < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert state.requests == 2 and state.disconnects == 1
    assert state.events.index("disconnect 1") < state.events.index("request 2")


# -- item 7: reporting -------------------------------------------------------------------------------


def test_response_format_probes_are_not_failed_calls(tmp_path):
    faq_kb(tmp_path)
    with FakeOpenAI() as fake:
        fake.fail(400, "response_format json_schema is not supported", when=response_format_type("json_schema"),
                  repeat=True)
        fake.add(compile_responder, repeat=True)
        report = run_compile(llm_settings(tmp_path), progress=False)
    assert report.created and report.usage["failed_calls"] == 0 and report.usage["probes"] == 1
    assert "failed" not in report.render_text().split("\n")[3] and "1 response-format probes" in report.render_text()


def _slow_model_app(delay: float) -> Starlette:
    async def chat(request: Request):
        body = await request.json()
        await asyncio.sleep(delay)
        reply = compile_responder(body)
        return StreamingResponse(iter([reply.content]), media_type=reply.headers["content-type"])

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.mark.slow
def test_ctrl_c_during_compile_reports_what_was_saved(tmp_path):
    (tmp_path / "raw").mkdir()
    for name in ("kettle", "teapot", "toaster", "fridge"):
        (tmp_path / "raw" / f"{name}.md").write_text(f"# {name.title()}\n\nThe {name} is in the kitchen.\n")
    with ServerThread(_slow_model_app(0.3)) as server:
        env = {**os.environ, "KAAS_MODEL": "openai/m", "KAAS_API_BASE": f"{server.url}/v1", "KAAS_API_KEY": "x",
               "KAAS_CONCURRENCY": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
        process = subprocess.Popen([sys.executable, "-m", "kb_ai", "compile", "--kb", str(tmp_path)], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not list((tmp_path / "wiki").glob("*/*.md")) and time.monotonic() < deadline:
            time.sleep(0.05)  # until the first article is saved
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 130, (out, err)
    assert "Aborted!" not in out + err
    assert "interrupted (Ctrl-C) during write" in out and "written and saved" in out and "saved: " in out
    assert "run `kaas compile` again" in out
