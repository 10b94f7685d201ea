"""The size of a model reply is bounded by what its ``max_tokens`` allows, not by the server:
a server that ignores max_tokens can send a 200 MB answer, a 200 MB JSON reply, one SSE line
that never ends or a huge error body. The gateway reads at most a size derived from max_tokens
(characters of text, bytes on the wire) on both transports, cuts the reply off there (an answer
keeps what came, with a notice; JSON gets one repair quoting a bounded excerpt, then the
caller's fallback), and never caches it. Red-team findings A4 and B8.

The direct transport is tested against a real HTTP server on 127.0.0.1 that generates a 30 MB
reply as it is read; what the call holds at its peak (tracemalloc) must stay far below that.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import tracemalloc

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from kb_ai.config import Settings
from kb_ai.errors import LLMOutputError, LLMReplyCutOff, LLMServerError
from kb_ai.llm.gateway import GatewayConfig, LLMGateway
from kb_ai.llm.replies import REPAIR_QUOTE_CHARS, reply_limits
from kb_ai.llm.usage import UsageMeter
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest

from llm_fakes import API_BASE, MODEL, FakeOpenAI, chat_json, chat_sse
from server_fakes import ServerThread

MESSAGES = [{"role": "user", "content": "hi"}]
SCHEMA = {"type": "object", "properties": {"paths": {"type": "array", "items": {"type": "string"}}},
          "required": ["paths"]}
TOTAL = 30_000_000  # what the server would send: far more than any limit here
PIECE = "lorem ipsum " * 5_000  # 60,000 characters per chunk


def _sse_chunk(text: str, finish: str | None = None) -> bytes:
    payload = {"id": "x", "object": "chat.completion.chunk", "model": "m",
               "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    return f"data: {json.dumps(payload)}\n\n".encode()


async def _huge(request: Request) -> StreamingResponse:
    """Replies of TOTAL bytes each, generated as they are read (``app.state.sent`` counts them)."""
    state = request.app.state
    body = await request.json()
    state.requests.append(body)
    kind = state.kind

    async def counted(head: bytes, piece: bytes, tail: bytes):
        sent = 0
        for part in (head, piece):
            while True:
                sent += len(part)
                state.sent += len(part)
                yield part
                if part is head or sent >= TOTAL:
                    break
        yield tail

    if kind == "error":
        return StreamingResponse(counted(b"", PIECE.encode(), b""), status_code=500, media_type="text/plain")
    if body.get("stream"):
        if kind == "line":  # one SSE line that never ends
            return StreamingResponse(counted(b'data: {"choices": [{"index": 0, "delta": {"content": "',
                                             PIECE.encode(), b""), media_type="text/event-stream")
        return StreamingResponse(counted(b"", _sse_chunk(PIECE), _sse_chunk("", "stop") + b"data: [DONE]\n\n"),
                                 media_type="text/event-stream")
    head = (b'{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": '
            b'{"role": "assistant", "content": "')
    return StreamingResponse(counted(head, PIECE.encode(), b'"}, "finish_reason": "stop"}]}'),
                             media_type="application/json")


@pytest.fixture
def huge_server(monkeypatch):
    app = Starlette(routes=[Route("/v1/chat/completions", _huge, methods=["POST"])])
    app.state.requests, app.state.sent, app.state.kind = [], 0, "reply"
    # The server keeps generating after the client stopped reading, and asyncio logs every write to
    # the closed socket: thousands of records, which the log capture would keep (and count as held).
    monkeypatch.setattr(logging.getLogger("asyncio"), "disabled", True)
    with ServerThread(app) as server:
        server.state = app.state
        yield server


def _gateway(server, tmp_path, **config) -> LLMGateway:
    options = dict(model="openai/huge", api_base=server.url + "/v1", api_key="k", timeout=20.0, max_retries=0,
                   cache_dir=tmp_path / "cache")
    options.update(config)
    return LLMGateway(GatewayConfig(**options))


def _cache_entries(tmp_path) -> list:
    return list((tmp_path / "cache").rglob("*.json"))


async def _peak(awaitable):
    """(result or raised exception, peak bytes allocated by Python while awaiting it)."""
    from kb_ai.llm import structured
    from kb_ai.llm.transports import litellm, openai_http

    # one-off costs (the CA bundle, litellm's model map, jsonschema) are not the reply's
    openai_http._ssl_context()
    litellm.model_map_entry("openai/huge")  # the model's entry of litellm's map (kept; the map is not)
    structured.validator(SCHEMA)
    tracemalloc.start()
    try:
        try:
            result = await asyncio.wait_for(awaitable, 30)
        except Exception as exc:  # noqa: BLE001 (returned for the test to check)
            result = exc
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


HELD = 4_000_000  # what reading one reply may hold at its peak here (a 30 MB reply would hold 30 MB or more)


async def test_a_streamed_answer_that_ignores_max_tokens_is_cut_at_its_size(huge_server, tmp_path):
    gateway = _gateway(huge_server, tmp_path)
    limits = reply_limits(50)
    pieces: list[str] = []

    async def consume():
        async for piece in gateway.stream(MESSAGES, purpose="answer", max_tokens=50):
            pieces.append(piece)

    caught, peak = await _peak(consume())
    assert isinstance(caught, LLMReplyCutOff), caught
    assert caught.reason == "size" and "ignored max_tokens" in caught.message
    assert len("".join(pieces)) == limits.chars and caught.text == "".join(pieces)
    assert peak < HELD, peak
    assert _cache_entries(tmp_path) == []  # a cut-off reply is never cached


async def test_a_json_reply_that_ignores_max_tokens_is_cut_and_repaired_with_an_excerpt(huge_server, tmp_path):
    gateway = _gateway(huge_server, tmp_path)
    limits = reply_limits(50)
    caught, peak = await _peak(gateway.complete_json(MESSAGES, schema=SCHEMA, schema_name="s", purpose="select",
                                                     max_tokens=50, meter=UsageMeter()))
    assert isinstance(caught, LLMOutputError), caught
    assert "ignored max_tokens" in caught.message and f"{limits.bytes:,} bytes" in caught.message
    assert len(huge_server.state.requests) == 2  # the reply, then one repair
    repair = huge_server.state.requests[1]
    assert len(json.dumps(repair)) < 3 * REPAIR_QUOTE_CHARS  # not the bad reply in full
    assert peak < HELD, peak
    assert _cache_entries(tmp_path) == []


async def test_a_stream_line_that_never_ends_is_cut_at_the_limit(huge_server, tmp_path):
    huge_server.state.kind = "line"
    gateway = _gateway(huge_server, tmp_path)
    caught, peak = await _peak(_drain(gateway.stream(MESSAGES, purpose="answer", max_tokens=50)))
    assert isinstance(caught, LLMOutputError) and "ignored max_tokens" in caught.message, caught
    assert peak < HELD, peak


async def _drain(stream) -> str:
    return "".join([piece async for piece in stream])


async def test_a_huge_error_body_is_read_only_in_part(huge_server, tmp_path):
    huge_server.state.kind = "error"
    gateway = _gateway(huge_server, tmp_path)
    started = time.monotonic()
    caught, peak = await _peak(gateway.complete(MESSAGES, purpose="t", max_tokens=50))
    assert isinstance(caught, LLMServerError) and len(caught.message) < 1_000, caught
    assert peak < HELD, peak
    assert time.monotonic() - started < 10


async def test_an_ask_whose_answer_ignores_max_tokens_keeps_a_bounded_answer_with_a_notice(huge_server, tmp_path):
    from wikigen import DEPOT_QUESTION, generate_depot_wiki

    generate_depot_wiki(tmp_path)
    huge_server.state.kind = "reply"
    settings = Settings(kb=tmp_path, model="openai/huge", api_base=huge_server.url + "/v1", api_key="k",
                        timeout=20.0, max_retries=0)

    async def run():
        # the selection (JSON) is huge too: repaired once, then keyword selection; the answer is cut
        return await ask(build_service(settings), AskRequest(question=DEPOT_QUESTION))

    result = await asyncio.wait_for(run(), 60)
    assert result.error is None, result.error
    assert 0 < len(result.answer) <= reply_limits(1_500).chars + 1_000
    assert any("cut off" in n and "ignored max_tokens" in n for n in result.notices), result.notices
    cache = tmp_path / ".kaas" / "cache" / "llm"
    assert sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) < 1_000_000


# -- litellm: what it read is already in memory, but what kaas keeps is bounded the same way ------------


@pytest.mark.parametrize("direct", [False, True])
async def test_a_reply_longer_than_its_limit_is_cut_on_either_transport(tmp_path, direct):
    limits = reply_limits(50)
    big = "x" * (limits.chars * 3)
    gateway = LLMGateway(GatewayConfig(model=MODEL, api_base=API_BASE, api_key="k", max_retries=0,
                                       cache_dir=tmp_path / "cache", direct_http=direct))
    with FakeOpenAI() as fake:
        fake.add(chat_json(big), chat_sse([big[i:i + 50_000] for i in range(0, len(big), 50_000)]))
        with pytest.raises(LLMReplyCutOff) as text_cut:
            await gateway.complete(MESSAGES, purpose="t", max_tokens=50)
        pieces: list[str] = []
        with pytest.raises(LLMReplyCutOff) as stream_cut:
            async for piece in gateway.stream(MESSAGES, purpose="answer", max_tokens=50):
                pieces.append(piece)
    assert text_cut.value.reason == "size" and len(text_cut.value.text) <= limits.chars
    assert stream_cut.value.reason == "size" and len("".join(pieces)) == limits.chars
    assert _cache_entries(tmp_path) == []


async def test_a_repair_request_quotes_a_bounded_excerpt_of_the_bad_reply(tmp_path):
    bad = "not json " * 5_000  # 45,000 characters: under the limit of 6,000 tokens, but no JSON
    gateway = LLMGateway(GatewayConfig(model=MODEL, api_base=API_BASE, api_key="k", max_retries=0))
    with FakeOpenAI() as fake:
        fake.reply(bad)
        fake.reply_json({"paths": ["a.md"]})
        value = await gateway.complete_json(MESSAGES, schema=SCHEMA, schema_name="s", purpose="select",
                                            max_tokens=6_000)
    assert value == {"paths": ["a.md"]}
    quoted = fake.requests[1]["messages"][-2]
    assert quoted["role"] == "assistant" and len(quoted["content"]) < REPAIR_QUOTE_CHARS + 100
    assert quoted["content"].startswith("not json not json")


def test_reply_limits_grow_with_max_tokens_and_leave_room_for_real_replies():
    small, large = reply_limits(100), reply_limits(6_000)
    assert small.chars < large.chars and small.bytes < large.bytes
    assert large.chars >= 6_000 * 16  # never cuts a real reply (a few characters per token)
    assert large.bytes < 16_000_000  # and bounds one that ignores max_tokens to megabytes
