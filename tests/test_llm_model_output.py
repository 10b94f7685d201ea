"""Model output that is not what the protocol promises is normalised at the gateway, once, for
both transports and the cache: text is text (a lone surrogate, half an emoji, becomes U+FFFD;
a pair split over two stream chunks is joined), a reply or stream chunk whose content is not a
string is bad output (LLMOutputError), a usage that is not a count is estimated. Nothing of it
may crash compile, ask (CLI, --json) or the SSE stream, which always ends with ``done`` or
``error``. Red-team findings B1 and A5.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from kb_ai.compile.pipeline import run_compile
from kb_ai.config import Settings
from kb_ai.errors import LLMOutputError
from kb_ai.llm.gateway import GatewayConfig, LLMGateway
from kb_ai.llm.usage import UsageMeter
from kb_ai.navigate.ask import AskService
from kb_ai.server import create_app
from kb_ai.store.articles import iter_article_paths

from fixtures.compile.fake_model import PLAN_MARKER, TOPIC_MARKER, WRITE_MARKER
from helpers import llm_settings
from llm_fakes import ANSWER, API_BASE, MODEL, SELECT, FakeOpenAI, all_text, chat_json
from server_fakes import PacedNavigator, ServerThread, parse_sse

MESSAGES = [{"role": "user", "content": "Say hi."}]
SCHEMA = {"type": "object", "properties": {"paths": {"type": "array", "items": {"type": "string"}},
                                           "note": {"type": "string"}}, "required": ["paths"]}
STOP = '{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'


def sse(*payloads: str) -> httpx.Response:
    """A stream of raw ``data:`` payloads (JSON text as a server wrote it), then [DONE]."""
    body = "".join(f"data: {p}\n\n" for p in (*payloads, "[DONE]"))
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode())


def delta(content_json: str) -> str:
    return '{"choices":[{"index":0,"delta":{"content":' + content_json + '},"finish_reason":null}]}'


def raw_json_reply(content_json: str, usage: str = '{"prompt_tokens": 3, "completion_tokens": 2}') -> httpx.Response:
    body = ('{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":'
            + content_json + '},"finish_reason":"stop"}],"usage":' + usage + '}')
    return httpx.Response(200, headers={"content-type": "application/json"}, content=body.encode())


@pytest.fixture(params=["direct", "litellm"])
def gateway(request, tmp_path):
    return LLMGateway(GatewayConfig(model=MODEL, api_base=API_BASE, api_key="k", max_retries=0, timeout=5.0,
                                    cache_dir=tmp_path / "cache", direct_http=request.param == "direct"))


async def collect(gw: LLMGateway, meter: UsageMeter | None = None) -> str:
    return "".join([piece async for piece in gw.stream(MESSAGES, purpose="answer", max_tokens=100, meter=meter)])


# -- text is text -----------------------------------------------------------------------------------


async def test_a_lone_surrogate_in_a_json_reply_becomes_a_replacement_character(gateway, tmp_path):
    # The model's JSON (inside the reply's content string) escapes half an emoji: "\ud83d".
    content = json.dumps('{"paths": ["a\\ud83d.md"], "note": "cut \\ud83d here"}')
    with FakeOpenAI() as fake:
        fake.add(raw_json_reply(content))
        value = await gateway.complete_json(MESSAGES, schema=SCHEMA, schema_name="s", purpose="select", max_tokens=100)
        again = await gateway.complete_json(MESSAGES, schema=SCHEMA, schema_name="s", purpose="select", max_tokens=100)
    assert value == {"paths": ["a\ufffd.md"], "note": "cut \ufffd here"}
    assert again == value and fake.call_count == 1  # cached (written as UTF-8), then replayed
    json.dumps(value, ensure_ascii=False).encode("utf-8")


async def test_a_lone_surrogate_in_the_reply_envelope_becomes_a_replacement_character(gateway):
    with FakeOpenAI() as fake:
        fake.add(raw_json_reply('"Hi \\ud800 there"'))
        text = await gateway.complete(MESSAGES, purpose="t", max_tokens=100)
    assert text == "Hi \ufffd there"


async def test_a_lone_surrogate_in_a_stream_becomes_a_replacement_character(gateway):
    with FakeOpenAI() as fake:
        fake.add(sse(delta('"The plan costs $9 "'), delta('"\\ud83d per month."'), STOP))
        text = await collect(gateway)
        replayed = await collect(gateway)
    assert text == "The plan costs $9 \ufffd per month."
    assert replayed == text and fake.call_count == 1  # the cache could write it and gives it back


async def test_a_surrogate_pair_split_over_two_chunks_is_one_character(gateway):
    with FakeOpenAI() as fake:
        fake.add(sse(delta('"Smile \\ud83d"'), delta('"\\ude00 done"'), STOP))
        text = await collect(gateway)
    assert text == "Smile \U0001F600 done"


async def test_a_cache_entry_holding_a_lone_surrogate_is_never_replayed(gateway, tmp_path):
    # kaas's state files are read as untrusted JSON (files.read_state_json): a lone
    # surrogate there is damage, so the entry is ignored and the model asked again.
    with FakeOpenAI() as fake:
        fake.add(raw_json_reply('"plain"'))
        await gateway.complete(MESSAGES, purpose="t", max_tokens=100)
    entry = next((tmp_path / "cache").rglob("*.json"))
    data = json.loads(entry.read_text(encoding="utf-8"))
    data["text"] = "tampered \ud800"
    entry.write_text(json.dumps(data), encoding="utf-8")  # ensure_ascii: the file holds "\ud800"
    with FakeOpenAI() as fake:
        fake.add(raw_json_reply('"fresh"'))
        assert await gateway.complete(MESSAGES, purpose="t", max_tokens=100) == "fresh"
    assert fake.call_count == 1


# -- wrong types --------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["5", '["a"]', '{"t": 1}', "true"])
async def test_a_streamed_content_that_is_not_text_is_bad_output(gateway, content):
    with FakeOpenAI() as fake:
        fake.add(sse(delta(content), STOP))
        with pytest.raises(LLMOutputError) as caught:
            await collect(gateway)
    # litellm drops some of these itself (then the reply is empty); the direct transport names it
    assert "not text" in caught.value.message or not gateway.config.direct_http, caught.value.message


@pytest.mark.parametrize("content", ["5", '["a"]', '{"t": 1}'])
async def test_a_reply_content_that_is_not_text_is_bad_output(gateway, content):
    with FakeOpenAI() as fake:
        fake.add(raw_json_reply(content))
        with pytest.raises(LLMOutputError) as caught:
            await gateway.complete(MESSAGES, purpose="t", max_tokens=100)
    assert "not text" in caught.value.message or not gateway.config.direct_http, caught.value.message


@pytest.mark.parametrize("choices", ['"abc"', "5", '[5]', '[{"delta": "x"}]', '[{"delta": {"content": "a"}, "finish_reason": 7}]'])
async def test_stream_chunks_of_the_wrong_shape_never_raise_another_kind_of_error(gateway, choices):
    with FakeOpenAI() as fake:
        fake.add(sse('{"choices": ' + choices + '}', STOP))
        try:
            await collect(gateway)
        except LLMOutputError:
            pass  # bad output: fine; anything else (TypeError, AttributeError, ...) is the bug


@pytest.mark.parametrize("usage", ['{"prompt_tokens": -5, "completion_tokens": "x"}', '"lots"', "[1, 2]",
                                   '{"prompt_tokens": NaN, "completion_tokens": 1e400}',
                                   '{"prompt_tokens": {"a": 1}, "completion_tokens": true}'])
async def test_a_usage_that_is_not_a_count_is_estimated(gateway, usage):
    meter = UsageMeter()
    with FakeOpenAI() as fake:
        fake.add(sse(delta('"Hello there"'), STOP, '{"choices": [], "usage": ' + usage + '}'),
                 when=lambda body: body.get("stream"))
        fake.add(raw_json_reply('"Hello there"', usage=usage), when=lambda body: not body.get("stream"))
        if not gateway.config.direct_http:
            # litellm validates usage itself and refuses the reply: bad output, not another error
            with pytest.raises(LLMOutputError):
                await gateway.complete(MESSAGES, purpose="t", max_tokens=100, meter=meter, temperature=0.5)
            return
        assert await collect(gateway, meter) == "Hello there"
        assert await gateway.complete(MESSAGES, purpose="t", max_tokens=100, meter=meter, temperature=0.5) == "Hello there"
    for call in meter.calls:
        assert isinstance(call.prompt_tokens, int) and call.prompt_tokens > 0
        assert isinstance(call.completion_tokens, int) and 0 < call.completion_tokens < 100


# -- compile ------------------------------------------------------------------------------------------


def _surrogate_compile_model(body):
    text = all_text(body)
    if PLAN_MARKER in text:
        reply = {"updates": [], "creates": [{"topic": "notes", "slug": "pricing", "title": "Pricing \ud83d",
                                             "summary": "What the plans cost \ud83d."}]}
    elif WRITE_MARKER in text:
        reply = {"summary": "What the plans cost \ud83d.", "tags": ["price\ud83d"],
                 "body": "# Pricing\n\nThe Solo plan costs $9 per month \ud83d and the Team plan $29."}
    elif TOPIC_MARKER in text:
        reply = {"summary": "Topic about \ud83d prices"}
    else:
        reply = {}
    return chat_json(json.dumps(reply))  # json.dumps writes each lone surrogate as "\ud83d"


def test_a_compile_whose_model_sends_lone_surrogates_writes_text(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "pricing.md").write_text("# Pricing\n\nThe Solo plan costs $9 per month and Team $29.\n")
    settings = llm_settings(tmp_path, cache=True)
    with FakeOpenAI() as fake:  # cache on: the replies are written to .kaas/cache/llm too
        fake.add(_surrogate_compile_model, repeat=True)
        report = run_compile(settings, progress=False)
    assert report.ok, report.render_text()
    paths = list(iter_article_paths(tmp_path / "wiki"))
    assert paths
    text = "".join((tmp_path / "wiki" / p).read_text(encoding="utf-8") for p in paths)
    assert "\ufffd" in text
    assert list((tmp_path / ".kaas" / "cache" / "llm").rglob("*.json"))


# -- ask: the HTTP stream and the CLI ---------------------------------------------------------------------


JUNK_ANSWERS = {
    "content int": sse(delta('"The plan "'), delta("5"), STOP),
    "usage strings": sse(delta('"The plan costs $9 [Pricing](notes/pricing.md)."'), STOP,
                         '{"choices": [], "usage": {"prompt_tokens": -5, "completion_tokens": "x"}}'),
    "lone surrogate": sse(delta('"\\ud800 The plan costs $9 [Pricing](notes/pricing.md)."'), STOP),
}


def _pricing_wiki(root):
    from helpers import write_page
    from kb_ai.store.kb import KnowledgeBase

    write_page(root / "wiki", "notes/pricing.md", "Pricing", "What the plans cost.",
               "# Pricing\n\nThe Solo plan costs $9 per month.", topic="notes")
    write_page(root / "wiki", "notes/teams.md", "Teams", "Team plans.", "# Teams\n\nThe Team plan costs $29.",
               topic="notes")
    KnowledgeBase(root).reindex()


@pytest.mark.parametrize("case", sorted(JUNK_ANSWERS))
def test_junk_in_the_answer_stream_ends_the_sse_stream_with_done_or_a_model_error(tmp_path, case):
    _pricing_wiki(tmp_path)
    with FakeOpenAI() as fake, TestClient(create_app(llm_settings(tmp_path))) as client:
        fake.reply_json({"paths": ["notes/pricing.md"]}, when=SELECT)
        fake.add(JUNK_ANSWERS[case], when=ANSWER)
        response = client.post("/api/chat", json={"question": "How much is Solo?"})
    events = parse_sse(response.text)
    name, data = events[-1]
    assert name == "done" or (name == "error" and data["code"].startswith("llm_")), events[-3:]
    response.content.decode("utf-8")  # strict: everything sent is text


def test_a_lone_surrogate_in_a_selected_path_ends_the_sse_stream_with_done(tmp_path):
    _pricing_wiki(tmp_path)
    with FakeOpenAI() as fake, TestClient(create_app(llm_settings(tmp_path))) as client:
        fake.add(raw_json_reply(json.dumps('{"paths": ["notes/pricing.md", "notes/x\\ud800.md"]}')), when=SELECT)
        fake.add(sse(delta('"Solo costs $9 [Pricing](notes/pricing.md)."'), STOP), when=ANSWER)
        response = client.post("/api/chat", json={"question": "How much is Solo?"})
    events = parse_sse(response.text)
    assert events[-1][0] == "done", events[-3:]
    notices = [d["message"] for n, d in events if n == "notice"]
    assert any("x\ufffd.md" in n for n in notices), notices


class _SurrogateNavigator(PacedNavigator):
    """Any navigator (a future one, a plug-in) whose text holds a lone surrogate."""

    async def answer(self, question, history, pages, catalog, meter):
        yield "half an emoji: \ud83d"


def test_the_sse_stream_ends_with_done_whatever_text_an_event_holds(sample_kb):
    settings = Settings(kb=sample_kb.root)
    service = AskService(sample_kb, settings, _SurrogateNavigator(tokens=1))  # type: ignore[arg-type]
    with TestClient(create_app(settings, service=service)) as client:
        response = client.post("/api/chat", json={"question": "anything?"})
    events = parse_sse(response.content.decode("utf-8"))
    assert events[-1][0] == "done", events[-3:]
    assert "".join(d["text"] for n, d in events if n == "token") == "half an emoji: \ufffd"


def _raw_model_app(select_body: bytes, answer_body: bytes) -> Starlette:
    async def chat(request: Request) -> Response:
        body = await request.json()
        if body.get("stream"):
            return Response(answer_body, media_type="text/event-stream")
        return Response(select_body, media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.mark.parametrize("as_json", [False, True])
def test_kaas_ask_prints_a_reply_holding_lone_surrogates(tmp_path, as_json):
    _pricing_wiki(tmp_path)
    select = raw_json_reply(json.dumps('{"paths": ["notes/pricing.md", "notes/\\ud800.md"]}')).content
    answer = sse(delta('"Solo costs $9 \\ud83d [Pricing](notes/pricing.md)."'), STOP).content
    with ServerThread(_raw_model_app(select, answer)) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAAS_")}
        env.update(KAAS_MODEL="openai/fake", KAAS_API_BASE=server.url + "/v1", KAAS_API_KEY="k",
                   KAAS_CACHE="true", KAAS_MAX_RETRIES="0", PYTHONIOENCODING="utf-8")
        done = subprocess.run([sys.executable, "-m", "kb_ai", "--kb", str(tmp_path), "ask",
                               *(["--json"] if as_json else []), "How much is Solo?"],
                              env=env, capture_output=True, timeout=60)
    stdout, stderr = done.stdout.decode("utf-8"), done.stderr.decode("utf-8")
    assert done.returncode == 0, stderr
    assert "Traceback" not in stderr
    answer_text = json.loads(stdout)["answer"] if as_json else stdout
    assert "Solo costs $9 \ufffd" in answer_text
