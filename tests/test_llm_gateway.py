"""LLMGateway against a fake OpenAI-compatible server (respx; nothing leaves the process)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from pathlib import Path

import httpx
import kb_ai
import pytest
import respx
from kb_ai.errors import (
    LLMAuthError,
    LLMBadRequestError,
    LLMOutputError,
    LLMRateLimitError,
    LLMServerError,
    LLMTimeoutError,
    LLMUnreachableError,
    MissingApiKeyError,
    UnknownModelError,
)
from kb_ai.llm import error_map, transports
from kb_ai.llm import gateway as gateway_module
from kb_ai.llm.cache import ResponseCache, cache_key
from kb_ai.llm.gateway import GatewayConfig, LLMGateway
from kb_ai.llm.structured import parse_json_reply
from kb_ai.llm.usage import UsageMeter

from llm_fakes import (  # tests/ is on sys.path (pytest's default "prepend" import mode)
    API_BASE,
    JSON_MODE,
    MODEL,
    FakeOpenAI,
    chat_json,
    chat_sse,
    error_response,
    response_format_type,
)

CHAT_URL = f"{API_BASE}/chat/completions"
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]
SCHEMA = {
    "type": "object",
    "properties": {"pages": {"type": "array", "items": {"type": "string"}}},
    "required": ["pages"],
    "additionalProperties": False,
}


@pytest.fixture(autouse=True)
def _httpx_transport(monkeypatch):
    # litellm's default aiohttp transport is invisible to respx.
    monkeypatch.setenv("DISABLE_AIOHTTP_TRANSPORT", "True")


@pytest.fixture
def mock():
    with respx.mock(using="httpx", assert_all_called=False) as router:
        yield router


@pytest.fixture
def route(mock):
    return mock.post(CHAT_URL)


@pytest.fixture(params=["direct", "litellm"])
def transport(request) -> str:
    """Every gateway test runs on both transports: httpx straight to the OpenAI-compatible server
    (llm/openai_http.py, the default for openai/<model> + api_base) and litellm (every other
    provider, or direct_http = false)."""
    return request.param


@pytest.fixture
def make_gateway(tmp_path, transport):
    def make(**overrides) -> LLMGateway:
        options = {"model": MODEL, "api_base": API_BASE, "timeout": 5.0, "max_retries": 2,
                   "direct_http": transport == "direct"}
        options.update(overrides)
        sleeps: list[float] = []

        async def record_sleep(seconds: float) -> None:
            sleeps.append(seconds)

        gw = LLMGateway(GatewayConfig(**options), sleep=record_sleep)
        gw.sleeps = sleeps
        return gw

    return make


def body(call) -> dict:
    return json.loads(call.request.content)


# -- import cost --------------------------------------------------------------------------------


def test_asking_an_openai_compatible_server_never_imports_litellm(sample_kb):
    """openai/<model> + api_base: the whole ask (budget, selection, answer, cost) runs on the direct
    transport, so a fresh `kaas ask` does not pay litellm's multi-second import."""
    tests = str(Path(__file__).resolve().parent)
    script = f"""
import asyncio, sys
sys.path.insert(0, {tests!r})
from server_fakes import FakeLLMServer
from kb_ai.config import Settings
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest
with FakeLLMServer(token_delay=0) as llm:
    settings = Settings(kb={str(sample_kb.root)!r}, model="openai/fake", api_base=llm.api_base, api_key="x", cache=False)
    result = asyncio.run(ask(build_service(settings), AskRequest(question="How are citations validated?", suggest=True)))
print(result.error, bool(result.citations), result.usage["llm_calls"], "litellm" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None", "True", "3", "False"], out.stdout + out.stderr


def test_importing_the_gateway_does_not_import_litellm():
    src = str(Path(kb_ai.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-c", "import kb_ai.llm.gateway, sys; print('litellm' in sys.modules)"],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    )
    assert out.stdout.strip() == "False"


# -- complete -------------------------------------------------------------------------------------


async def test_complete_returns_text_and_records_usage(route, make_gateway):
    route.mock(return_value=chat_json("Hi.", prompt_tokens=12, completion_tokens=3))
    meter = UsageMeter()
    text = await make_gateway().complete(MESSAGES, purpose="answer", max_tokens=100, meter=meter)
    assert text == "Hi."
    sent = body(route.calls.last)
    assert sent["model"] == "test-model"
    assert sent["messages"] == MESSAGES
    assert sent["temperature"] == 0.0
    assert "response_format" not in sent
    # api_base without a key: a placeholder key, since the OpenAI client refuses an empty one.
    assert route.calls.last.request.headers["authorization"] == f"Bearer {transports.PLACEHOLDER_API_KEY}"
    [call] = meter.calls
    assert (call.purpose, call.model, call.prompt_tokens, call.completion_tokens) == ("answer", MODEL, 12, 3)
    assert call.cost_usd == 0.0 and not call.cached and call.seconds >= 0


async def test_complete_sends_configured_key_and_max_tokens(route, make_gateway):
    route.mock(return_value=chat_json("ok"))
    await make_gateway(api_key="sk-secret").complete(MESSAGES, purpose="t", max_tokens=7, temperature=0.3)
    sent = body(route.calls.last)
    assert sent["max_tokens"] == 7 and sent["temperature"] == 0.3
    assert route.calls.last.request.headers["authorization"] == "Bearer sk-secret"


async def test_empty_reply_is_an_output_error(route, make_gateway):
    route.mock(return_value=chat_json(None))
    with pytest.raises(LLMOutputError, match="empty reply"):
        await make_gateway().complete(MESSAGES, purpose="answer", max_tokens=100)
    assert route.call_count == 1


async def test_missing_usage_is_estimated(route, make_gateway):
    route.mock(return_value=chat_json("a reply of some length", usage=False))
    meter = UsageMeter()
    await make_gateway().complete(MESSAGES, purpose="answer", max_tokens=100, meter=meter)
    assert meter.calls[0].prompt_tokens > 0 and meter.calls[0].completion_tokens > 0


# -- stream ---------------------------------------------------------------------------------------


async def test_stream_yields_deltas_in_order_and_records_final_usage(route, make_gateway):
    route.mock(return_value=chat_sse(["Hel", "lo", " world"], usage=(21, 4)))
    meter = UsageMeter()
    pieces = [p async for p in make_gateway().stream(MESSAGES, purpose="answer", max_tokens=100, meter=meter)]
    assert pieces == ["Hel", "lo", " world"]
    sent = body(route.calls.last)
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    [call] = meter.calls
    assert (call.prompt_tokens, call.completion_tokens, call.cached) == (21, 4, False)


async def test_truncated_stream_yields_what_came_then_raises(route, make_gateway):
    route.mock(return_value=chat_sse(["Hel", "lo"], usage=None, finish_reason=None, done=False))
    got = []
    with pytest.raises(LLMOutputError, match="ended early"):
        async for piece in make_gateway().stream(MESSAGES, purpose="answer", max_tokens=100):
            got.append(piece)
    assert got == ["Hel", "lo"]
    assert route.call_count == 1  # no retry once text was shown


async def test_stream_retries_before_the_first_delta(route, make_gateway):
    route.side_effect = [error_response(503, "loading"), chat_sse(["ok"])]
    gw = make_gateway()
    assert [p async for p in gw.stream(MESSAGES, purpose="answer", max_tokens=100)] == ["ok"]
    assert route.call_count == 2 and len(gw.sleeps) == 1


async def test_empty_stream_is_an_output_error(route, make_gateway):
    route.mock(return_value=chat_sse([], usage=None, finish_reason=None, done=False))
    with pytest.raises(LLMOutputError, match="empty reply"):
        [p async for p in make_gateway().stream(MESSAGES, purpose="answer", max_tokens=100)]


async def test_abandoned_stream_still_records_usage(route, make_gateway, tmp_path):
    route.mock(return_value=chat_sse(["one ", "two ", "three"]))
    meter = UsageMeter()
    gw = make_gateway(cache_dir=tmp_path / "cache")
    stream = gw.stream(MESSAGES, purpose="answer", max_tokens=100, meter=meter)
    async for piece in stream:
        assert piece == "one "
        break
    await stream.aclose()
    [call] = meter.calls
    assert not call.cached and call.completion_tokens > 0
    assert not list((tmp_path / "cache").rglob("*.json"))  # a partial answer is not cached


async def test_the_direct_transport_does_not_go_through_litellm(route, make_gateway, monkeypatch):
    import litellm

    async def refuse(**kwargs):
        raise AssertionError("litellm was called for a request the direct transport serves")

    monkeypatch.setattr(litellm, "acompletion", refuse)
    route.mock(return_value=chat_json('{"paths": ["a.md"]}'))
    reply = await make_gateway(direct_http=True).complete_json(MESSAGES, schema={"type": "object"}, schema_name="s",
                                                               purpose="select", max_tokens=100)
    assert reply == {"paths": ["a.md"]}
    route.mock(return_value=chat_sse(["fast ", "path"], usage=(7, 2)))
    meter = UsageMeter()
    assert [p async for p in make_gateway(direct_http=True).stream(MESSAGES, purpose="answer", max_tokens=100, meter=meter)] == ["fast ", "path"]
    sent = body(route.calls.last)
    assert sent["model"] == MODEL.removeprefix("openai/") and sent["messages"] == MESSAGES
    assert "api_base" not in sent and "num_retries" not in sent and "timeout" not in sent
    assert route.calls.last.request.headers["authorization"].startswith("Bearer ")
    assert (meter.calls[0].prompt_tokens, meter.calls[0].completion_tokens) == (7, 2)


@pytest.mark.parametrize("status, error", [(429, LLMRateLimitError), (401, LLMAuthError), (404, UnknownModelError),
                                           (400, LLMBadRequestError), (500, LLMServerError)])
async def test_direct_transport_http_errors_map_like_litellm(route, make_gateway, status, error):
    route.mock(return_value=error_response(status, "nope", headers={"Retry-After": "0"}))
    with pytest.raises(error, match="nope"):
        [p async for p in make_gateway(max_retries=0, direct_http=True).stream(MESSAGES, purpose="answer", max_tokens=100)]


async def test_direct_transport_error_inside_the_stream_is_a_server_error(route, make_gateway):
    stream = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\ndata: {"error":{"message":"the GPU fell over"}}\n\n'
    route.mock(return_value=httpx.Response(200, content=stream, headers={"content-type": "text/event-stream"}))
    got = []
    with pytest.raises(LLMServerError, match="GPU fell over"):
        async for piece in make_gateway(direct_http=True).stream(MESSAGES, purpose="answer", max_tokens=100):
            got.append(piece)
    assert got == ["Hi"]


# -- complete_json ----------------------------------------------------------------------------------


async def test_json_schema_shape_is_sent_first(route, make_gateway):
    route.mock(return_value=chat_json(json.dumps({"pages": ["a.md"]})))
    value = await make_gateway().complete_json(MESSAGES, schema=SCHEMA, schema_name="page selection",
                                               purpose="select", max_tokens=100)
    assert value == {"pages": ["a.md"]}
    assert body(route.calls.last)["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "page_selection", "schema": SCHEMA, "strict": False},
    }


async def test_response_format_falls_back_and_is_remembered(make_gateway, tmp_path):
    cache_dir = tmp_path / "state" / "llm-cache"
    with FakeOpenAI() as fake:
        fake.fail(400, "response_format type must be one of text or json_object, got json_schema",
                  when=response_format_type("json_schema"), repeat=True)
        fake.fail(400, "'response_format.type' must be 'json_schema' or 'text'; json_object not supported",
                  when=response_format_type("json_object"), repeat=True)
        fake.reply(json.dumps({"pages": ["b.md"]}), when=lambda b: "response_format" not in b, repeat=True)

        gw = make_gateway(cache_dir=cache_dir)
        messages = [dict(m) for m in MESSAGES]
        value = await gw.complete_json(messages, schema=SCHEMA, schema_name="sel", purpose="select", max_tokens=100)
        assert value == {"pages": ["b.md"]}
        assert messages == MESSAGES  # the instruction went into a copy
        first, second, third = fake.requests
        assert first["response_format"]["type"] == "json_schema"
        assert second["response_format"] == {"type": "json_object", "schema": SCHEMA}
        assert "response_format" not in third
        assert "Answer with only a JSON object matching this JSON schema" in third["messages"][-1]["content"]
        assert third["messages"][-1]["content"].startswith("Say hi.")

        # The next call (different prompt, so no cache hit) starts with the shape that worked ...
        await gw.complete_json(MESSAGES + [{"role": "user", "content": "again"}], schema=SCHEMA,
                               schema_name="sel", purpose="select", max_tokens=100)
        assert len(fake.requests) == 4 and "response_format" not in fake.requests[3]

        # ... and so does a new gateway for the same server, from llm-capabilities.json.
        saved = json.loads((tmp_path / "state" / "llm-capabilities.json").read_text())
        assert saved["response_format"][f"{MODEL}|{API_BASE}"] == "instruction"
        other = make_gateway(cache_dir=cache_dir)
        await other.complete_json(MESSAGES + [{"role": "user", "content": "third"}], schema=SCHEMA,
                                  schema_name="sel", purpose="select", max_tokens=100)
        assert len(fake.requests) == 5 and "response_format" not in fake.requests[4]


async def test_llama_cpp_shape_is_remembered(make_gateway):
    with FakeOpenAI() as fake:
        fake.fail(400, "json_schema is not supported", when=response_format_type("json_schema"), repeat=True)
        fake.reply_json({"pages": []}, when=response_format_type("json_object"), repeat=True)
        gw = make_gateway()
        await gw.complete_json(MESSAGES, schema=SCHEMA, schema_name="sel", purpose="select", max_tokens=100)
        await gw.complete_json(MESSAGES, schema=SCHEMA, schema_name="sel", purpose="select", max_tokens=100, temperature=0.5)
        assert [r["response_format"]["type"] for r in fake.requests] == ["json_schema", "json_object", "json_object"]


async def test_llama_cpp_python_500_validation_error_counts_as_a_rejection(make_gateway):
    # What llama-cpp-python's server really answers to OpenAI's json_schema shape (seen on
    # ../shared/tools/real-llm-server): a 500 carrying its request-validation error.
    message = ("1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
               "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}")
    with FakeOpenAI() as fake:
        fake.fail(500, message, when=response_format_type("json_schema"), repeat=True)
        fake.reply_json({"pages": []}, when=response_format_type("json_object"))
        result = await make_gateway().complete_json(MESSAGES, schema=SCHEMA, schema_name="sel", purpose="select", max_tokens=100)
    assert result == {"pages": []}
    assert [r["response_format"]["type"] for r in fake.requests] == ["json_schema", "json_object"]


async def test_unrelated_bad_request_does_not_change_shape(route, make_gateway):
    route.mock(return_value=error_response(400, "messages must alternate"))
    with pytest.raises(LLMBadRequestError, match="messages must alternate"):
        await make_gateway().complete_json(MESSAGES, schema=SCHEMA, schema_name="sel", purpose="select", max_tokens=100)
    assert route.call_count == 1


async def test_invalid_json_gets_one_repair_call(route, make_gateway):
    route.side_effect = [chat_json("Sure! {pages: [a.md]"), chat_json('{"pages": ["a.md"]}')]
    meter = UsageMeter()
    value = await make_gateway().complete_json(MESSAGES, schema=SCHEMA, schema_name="sel", purpose="select", max_tokens=100,
                                               meter=meter)
    assert value == {"pages": ["a.md"]}
    repair = body(route.calls[1])["messages"]
    assert repair[:2] == MESSAGES
    assert repair[2] == {"role": "assistant", "content": "Sure! {pages: [a.md]"}
    assert repair[3]["role"] == "user"
    assert "not valid JSON" in repair[3]["content"] and '"pages"' in repair[3]["content"]
    assert meter.llm_calls == 2


async def test_schema_mismatch_repair_message_names_the_problem(route, make_gateway):
    route.side_effect = [chat_json('{"pages": "a.md"}'), chat_json('{"pages": ["a.md"]}')]
    await make_gateway().complete_json(MESSAGES, schema=SCHEMA, schema_name="sel", purpose="select", max_tokens=100)
    repair = body(route.calls[1])["messages"][-1]["content"]
    assert "schema mismatch at pages" in repair and "is not of type 'array'" in repair


async def test_two_invalid_replies_raise_output_error(route, make_gateway, tmp_path):
    route.side_effect = [chat_json("nope"), chat_json('{"wrong": 1}')]
    gw = make_gateway(cache_dir=tmp_path / "cache")
    with pytest.raises(LLMOutputError, match="did not return valid sel JSON"):
        await gw.complete_json(MESSAGES, schema=SCHEMA, schema_name="sel", purpose="select", max_tokens=100)
    assert route.call_count == 2
    assert not list((tmp_path / "cache").rglob("*.json"))  # invalid output is never cached


def test_parse_json_reply_is_forgiving():
    assert parse_json_reply('```json\n{"a": 1}\n```') == {"a": 1}
    assert parse_json_reply('Here you go:\n{"a": [1, 2]}\nHope that helps!') == {"a": [1, 2]}
    assert parse_json_reply('<think>maybe {"x": 0}</think>\n["p.md"]') == ["p.md"]
    with pytest.raises(ValueError):
        parse_json_reply("no json here")


# -- retries and errors -----------------------------------------------------------------------------


async def test_rate_limit_waits_retry_after_then_succeeds(route, make_gateway):
    route.side_effect = [error_response(429, "slow down", headers={"Retry-After": "2"}), chat_json("ok")]
    gw = make_gateway()
    assert await gw.complete(MESSAGES, purpose="t", max_tokens=100) == "ok"
    assert gw.sleeps == [2.0]


def test_retry_after_http_date_and_cap():
    class Fake(Exception):
        def __init__(self, value):
            self.response = httpx.Response(429, headers={"Retry-After": value})

    when = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=30), usegmt=True)
    assert 25 <= error_map.retry_after(Fake(when)) <= 30
    assert error_map.retry_after(Fake("7")) == 7.0
    assert error_map.retry_after(Fake("garbage")) is None


async def test_retry_after_is_capped(route, make_gateway):
    route.side_effect = [error_response(429, "later", headers={"Retry-After": "3600"}), chat_json("ok")]
    gw = make_gateway(call_deadline=600)
    await gw.complete(MESSAGES, purpose="t", max_tokens=100)
    assert gw.sleeps == [gateway_module.RETRY_AFTER_CAP]


async def test_a_wait_past_the_call_deadline_is_not_waited(route, make_gateway):
    # The deadline covers the whole call: a Retry-After that would end past it gives up now.
    route.side_effect = [error_response(429, "later", headers={"Retry-After": "30"}), chat_json("ok")]
    gw = make_gateway(call_deadline=10)
    with pytest.raises(LLMRateLimitError, match="later"):
        await gw.complete(MESSAGES, purpose="t", max_tokens=100)
    assert gw.sleeps == [] and route.call_count == 1


async def test_server_error_is_retried_with_backoff(route, make_gateway):
    route.side_effect = [error_response(500, "oops"), chat_json("ok")]
    gw = make_gateway()
    assert await gw.complete(MESSAGES, purpose="t", max_tokens=100) == "ok"
    assert len(gw.sleeps) == 1 and 0.25 <= gw.sleeps[0] <= 0.5


async def test_retries_exhausted_raise_server_error(route, make_gateway):
    route.mock(return_value=error_response(502, "bad gateway"))
    gw = make_gateway(max_retries=3)
    with pytest.raises(LLMServerError, match="bad gateway"):
        await gw.complete(MESSAGES, purpose="t", max_tokens=100)
    assert route.call_count == 4
    assert len(gw.sleeps) == 3 and gw.sleeps[0] < gw.sleeps[2] <= gateway_module.BACKOFF_CAP


async def test_connection_refused_is_unreachable(route, make_gateway, capfd):
    route.side_effect = httpx.ConnectError("Connection refused")
    gw = make_gateway(max_retries=1)
    with pytest.raises(LLMUnreachableError) as info:
        await gw.complete(MESSAGES, purpose="t", max_tokens=100)
    assert str(info.value) == f"cannot reach the LLM server at {API_BASE}: Connection refused"
    assert route.call_count == 2
    assert capfd.readouterr().out == ""  # nothing on stdout (MCP stdio must stay clean)


async def test_timeout_is_mapped(route, make_gateway):
    route.side_effect = httpx.ReadTimeout("timed out")
    gw = make_gateway(max_retries=0, timeout=0.5)
    with pytest.raises(LLMTimeoutError, match="did not answer within 0.5 s"):
        await gw.complete(MESSAGES, purpose="t", max_tokens=100)


async def test_auth_error_is_not_retried(route, make_gateway):
    route.mock(return_value=error_response(401, "Incorrect API key provided"))
    gw = make_gateway()
    with pytest.raises(LLMAuthError, match="rejected the API key") as info:
        await gw.complete(MESSAGES, purpose="t", max_tokens=100)
    assert "\n" not in str(info.value)
    assert route.call_count == 1 and gw.sleeps == []


async def test_not_found_is_unknown_model(route, make_gateway):
    route.mock(return_value=error_response(404, "model 'test-model' not found"))
    with pytest.raises(UnknownModelError, match="does not know model"):
        await make_gateway().complete(MESSAGES, purpose="t", max_tokens=100)
    assert route.call_count == 1


async def test_model_refusing_temperature_is_retried_without_it(route, make_gateway):
    # litellm itself refuses temperature=0 for o-series models (UnsupportedParamsError, no HTTP).
    route.mock(return_value=chat_json("ok"))
    gw = make_gateway(model="openai/o3-mini", direct_http=False)
    assert await gw.complete(MESSAGES, purpose="t", max_tokens=100) == "ok"
    assert await gw.complete(MESSAGES, purpose="t", max_tokens=100) == "ok"
    assert route.call_count == 2
    assert all("temperature" not in body(call) for call in route.calls)


async def test_server_refusing_temperature_is_retried_without_it_and_remembered(route, make_gateway):
    # The direct transport sends what it is given; OpenAI's own 400 for o-series models says why.
    refusal = error_response(400, "Unsupported value: 'temperature' does not support 0 with this model.")
    route.side_effect = [refusal, chat_json("ok"), chat_json("ok again")]
    gw = make_gateway(model="openai/o3-mini", direct_http=True)
    assert await gw.complete(MESSAGES, purpose="t", max_tokens=100) == "ok"
    assert await gw.complete(MESSAGES, purpose="t", max_tokens=100) == "ok again"
    assert route.call_count == 3
    assert "temperature" in body(route.calls[0]) and all("temperature" not in body(c) for c in route.calls[1:])


# -- cache ----------------------------------------------------------------------------------------


async def test_cache_hit_makes_no_http_call(route, make_gateway, tmp_path):
    route.mock(return_value=chat_json("cached answer", prompt_tokens=9, completion_tokens=2))
    gw = make_gateway(cache_dir=tmp_path / "cache")
    assert await gw.complete(MESSAGES, purpose="t", max_tokens=100) == "cached answer"
    meter = UsageMeter()
    again = make_gateway(cache_dir=tmp_path / "cache")  # a new gateway: the hit comes from disk
    assert await again.complete(MESSAGES, purpose="t", max_tokens=100, meter=meter) == "cached answer"
    assert route.call_count == 1
    [call] = meter.calls
    assert call.cached and (call.prompt_tokens, call.completion_tokens, call.cost_usd) == (9, 2, 0.0)
    assert meter.cache_hits == 1 and meter.llm_calls == 0


async def test_stream_and_json_cache_hits(route, make_gateway, tmp_path):
    gw = make_gateway(cache_dir=tmp_path / "cache")
    route.mock(return_value=chat_sse(["a", "b"]))
    assert [p async for p in gw.stream(MESSAGES, purpose="t", max_tokens=100)] == ["a", "b"]
    meter = UsageMeter()
    assert "".join([p async for p in gw.stream(MESSAGES, purpose="t", max_tokens=100, meter=meter)]) == "ab"
    route.mock(return_value=chat_json('```json\n{"pages": ["x.md"]}\n```'))
    assert await gw.complete_json(MESSAGES, schema=SCHEMA, schema_name="s", purpose="t", max_tokens=100) == {"pages": ["x.md"]}
    assert await gw.complete_json(MESSAGES, schema=SCHEMA, schema_name="s", purpose="t", max_tokens=100, meter=meter) == {
        "pages": ["x.md"]}
    assert route.call_count == 2
    assert [c.cached for c in meter.calls] == [True, True]


async def test_nonzero_temperature_is_not_cached(route, make_gateway, tmp_path):
    route.mock(return_value=chat_json("creative"))
    gw = make_gateway(cache_dir=tmp_path / "cache")
    await gw.complete(MESSAGES, purpose="t", max_tokens=100, temperature=0.7)
    await gw.complete(MESSAGES, purpose="t", max_tokens=100, temperature=0.7)
    assert route.call_count == 2
    assert not list((tmp_path / "cache").rglob("*.json"))


async def test_corrupt_cache_file_is_a_miss_and_replaced(route, make_gateway, tmp_path):
    route.mock(return_value=chat_json("fresh"))
    key = cache_key(kind="text", model=MODEL, api_base=API_BASE, messages=MESSAGES, temperature=0.0,
                    max_tokens=100)
    cache = ResponseCache(tmp_path / "cache")
    path = cache.path_for(key)
    path.parent.mkdir(parents=True)
    path.write_text("{not json", encoding="utf-8")
    assert await make_gateway(cache_dir=tmp_path / "cache").complete(MESSAGES, purpose="t", max_tokens=100) == "fresh"
    assert route.call_count == 1
    assert cache.get(key).text == "fresh"


# -- concurrency, loops, trace, preflight -----------------------------------------------------------


async def test_concurrency_limit_is_respected(route, make_gateway):
    in_flight = peak = 0

    async def slow(request):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.05)
        in_flight -= 1
        return chat_json("ok")

    route.side_effect = slow
    gw = make_gateway(concurrency=2)
    results = await asyncio.gather(*(gw.complete(MESSAGES, purpose=f"t{i}", max_tokens=100) for i in range(6)))
    assert results == ["ok"] * 6
    assert peak == 2 and route.call_count == 6


def test_one_gateway_serves_several_event_loops(make_gateway):
    gw = make_gateway(concurrency=1)
    with respx.mock(using="httpx") as router:
        router.post(CHAT_URL).mock(return_value=chat_json("ok"))
        for _ in range(2):  # like one asyncio.run per CLI command
            assert asyncio.run(gw.complete(MESSAGES, purpose="t", max_tokens=100)) == "ok"


async def test_trace_file_gets_one_line_per_call(route, make_gateway, tmp_path):
    route.side_effect = [error_response(500, "hiccup"), chat_json('{"pages": []}')]
    trace = tmp_path / "trace.jsonl"
    gw = make_gateway(trace_file=trace, cache_dir=tmp_path / "cache")
    await gw.complete_json(MESSAGES, schema=SCHEMA, schema_name="s", purpose="select", max_tokens=100)
    await gw.complete_json(MESSAGES, schema=SCHEMA, schema_name="s", purpose="select", max_tokens=100)  # cache hit
    failed, ok, hit = [json.loads(line) for line in trace.read_text().splitlines()]
    assert failed["error"]["code"] == "llm_server_error" and failed["reply"] is None
    assert ok["purpose"] == "select" and ok["model"] == MODEL and ok["response_format"] == "json_schema"
    assert ok["messages"] == MESSAGES and ok["reply"] == '{"pages": []}' and ok["error"] is None
    assert ok["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "cost_usd": 0.0}
    assert ok["cached"] is False and hit["cached"] is True and "time" in ok
    assert ok["max_tokens"] == failed["max_tokens"] == 100 and ok["finish_reason"] == "stop"


def test_preflight_rejects_unknown_model(make_gateway):
    with pytest.raises(UnknownModelError, match="unknown model 'nonsense-provider/xyz'.*openai/gpt-4o-mini"):
        make_gateway(model="nonsense-provider/xyz", api_base=None).preflight()


def test_preflight_requires_a_key_for_hosted_providers(make_gateway, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingApiKeyError, match="missing API key for openai: set KAAS_API_KEY or OPENAI_API_KEY"):
        make_gateway(model="openai/gpt-4o-mini", api_base=None).preflight()
    make_gateway(model="openai/gpt-4o-mini", api_base=None, api_key="sk-x").preflight()
    make_gateway(model="openai/anything", api_base=API_BASE).preflight()  # local server: no key needed
    make_gateway(model="ollama/llama3", api_base=None).preflight()


def test_context_window(make_gateway):
    assert make_gateway(model="openai/gpt-4o-mini").context_window() == 128000
    assert make_gateway(model="openai/test-model").context_window() is None
    assert make_gateway(model="nonsense-provider/xyz").context_window() is None


async def test_fake_openai_routes_by_request(make_gateway):
    with FakeOpenAI() as fake:
        fake.reply_json({"pages": ["a.md"]}, when=JSON_MODE)
        fake.reply("The answer.", when="Say hi.")
        gw = make_gateway()
        assert await gw.complete(MESSAGES, purpose="answer", max_tokens=100) == "The answer."
        assert await gw.complete_json(MESSAGES, schema=SCHEMA, schema_name="s", purpose="select", max_tokens=100) == {
            "pages": ["a.md"]}
        assert fake.call_count == 2 and fake.unmatched == []


async def test_a_cache_entry_under_another_requests_name_is_a_miss(route, make_gateway, tmp_path, caplog):
    """An entry copied or renamed to another request's key (well-formed JSON, another prompt's
    reply: one made from pages another reader may see) is never that request's reply."""
    route.mock(return_value=chat_json("made from the hidden page"))
    gw = make_gateway(cache_dir=tmp_path / "cache")
    other = [{"role": "user", "content": "a prompt holding a hidden page"}]
    assert await gw.complete(other, purpose="t", max_tokens=100) == "made from the hidden page"
    cache = ResponseCache(tmp_path / "cache")
    theirs = cache.path_for(cache_key(kind="text", model=MODEL, api_base=API_BASE, messages=other,
                                      temperature=0.0, max_tokens=100))
    mine = cache.path_for(cache_key(kind="text", model=MODEL, api_base=API_BASE, messages=MESSAGES,
                                    temperature=0.0, max_tokens=100))
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_bytes(theirs.read_bytes())
    route.mock(return_value=chat_json("fresh"))
    assert await make_gateway(cache_dir=tmp_path / "cache").complete(MESSAGES, purpose="t", max_tokens=100) == "fresh"
    assert "another request" in caplog.text
