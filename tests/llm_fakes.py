"""Fake OpenAI-compatible replies for tests, served through respx (no network, ever).

Build single responses::

    route.mock(return_value=chat_json("hello", prompt_tokens=12, completion_tokens=3))
    route.mock(return_value=chat_sse(["Hel", "lo"], usage=(5, 2)))
    route.mock(return_value=error_response(429, "slow down", headers={"Retry-After": "2"}))

or route whole conversations by what each request looks like::

    with FakeOpenAI() as fake:
        fake.reply_json({"pages": ["a.md"]}, when=JSON_MODE)         # structured requests
        fake.reply("The answer [a.md].", when="You answer questions")  # marker in the messages
        fake.reply_stream(["The ", "answer"], when=STREAMING)
        ... run code that uses LLMGateway(GatewayConfig(model=MODEL, api_base=API_BASE)) ...
        assert fake.requests[0]["response_format"]["type"] == "json_schema"

litellm's async path uses aiohttp unless told otherwise, which respx cannot see: ``FakeOpenAI``
mocks with ``using="httpx"`` and sets ``DISABLE_AIOHTTP_TRANSPORT=True`` while active. A stream
always ends with a chunk carrying ``finish_reason`` before ``data: [DONE]`` unless asked to be
truncated (litellm raises on a stream without one).
"""

from __future__ import annotations

import itertools
import json
import os
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import httpx
import respx

MODEL = "openai/test-model"
API_BASE = "http://127.0.0.1:9999/v1"
CHAT_PATH = "/chat/completions"

_ids = itertools.count(1)

Usage = tuple[int, int] | dict[str, int] | None


def _usage_dict(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def chat_json(content: str | None, *, prompt_tokens: int = 10, completion_tokens: int = 5,
              finish_reason: str = "stop", model: str = "test-model", usage: bool = True) -> httpx.Response:
    """A non-streaming chat.completion reply with ``content`` (None: a null content field)."""
    body: dict[str, Any] = {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": finish_reason}],
    }
    if usage:
        body["usage"] = _usage_dict(prompt_tokens, completion_tokens)
    return httpx.Response(200, json=body)


def chat_sse(chunks: Iterable[str], *, usage: Usage = (10, 5), finish_reason: str | None = "stop",
             model: str = "test-model", done: bool = True) -> httpx.Response:
    """A streaming reply: one SSE event per text chunk, then a chunk with ``finish_reason``, then
    (when ``usage`` is given, as ``(prompt, completion)`` or a dict) an OpenAI-style usage-only
    chunk, then ``data: [DONE]``. ``finish_reason=None, done=False`` fakes a truncated stream."""
    stream_id = f"chatcmpl-{next(_ids)}"

    def event(choices: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> str:
        payload = {"id": stream_id, "object": "chat.completion.chunk", "created": 1_700_000_000,
                   "model": model, "choices": choices, **(extra or {})}
        return f"data: {json.dumps(payload)}\n\n"

    events = []
    for i, text in enumerate(chunks):
        delta = {"role": "assistant", "content": text} if i == 0 else {"content": text}
        events.append(event([{"index": 0, "delta": delta, "finish_reason": None}]))
    if finish_reason is not None:
        events.append(event([{"index": 0, "delta": {}, "finish_reason": finish_reason}]))
    if usage is not None:
        numbers = usage if isinstance(usage, dict) else _usage_dict(*usage)
        events.append(event([], {"usage": numbers}))
    if done:
        events.append("data: [DONE]\n\n")
    return httpx.Response(200, headers={"content-type": "text/event-stream"},
                          content="".join(events).encode("utf-8"))


def error_response(status: int, message: str = "error", *, headers: dict[str, str] | None = None,
                   error_type: str = "invalid_request_error") -> httpx.Response:
    """An OpenAI-style error body with ``status``."""
    return httpx.Response(status, headers=headers or {},
                          json={"error": {"message": message, "type": error_type, "code": None}})


# -- request predicates for FakeOpenAI.when ------------------------------------------------------

Predicate = Callable[[dict[str, Any]], bool]


def JSON_MODE(body: dict[str, Any]) -> bool:  # noqa: N802 (reads like a constant at call sites)
    """Any request asking for structured output via response_format."""
    return "response_format" in body


def STREAMING(body: dict[str, Any]) -> bool:  # noqa: N802
    return bool(body.get("stream"))


def response_format_type(kind: str) -> Predicate:
    """Requests whose response_format has this ``type`` (``json_schema``, ``json_object``)."""
    return lambda body: (body.get("response_format") or {}).get("type") == kind


def all_text(body: dict[str, Any]) -> str:
    """All message contents of a request, joined (for marker matching)."""
    parts = []
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
        elif content is not None:
            parts.append(str(content))
    return "\n".join(parts)


def _as_predicate(when: Predicate | str | None) -> Predicate:
    if when is None:
        return lambda body: True
    if isinstance(when, str):
        return lambda body: when in all_text(body)
    return when


@dataclass
class _Rule:
    predicate: Predicate
    replies: deque[httpx.Response | Callable[[dict[str, Any]], httpx.Response]]
    repeat_last: bool
    served: int = 0


def as_stream(response: httpx.Response) -> httpx.Response:
    """A chat.completion JSON reply as the stream a server sends for it (its text in chunks of
    40 characters, its finish reason and usage at the end; a body cut short, a line cut short)."""
    try:
        payload = json.loads(response.content)
    except ValueError:  # a body cut short: a stream line cut short
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=b"data: " + response.content)
    choice = payload["choices"][0]
    text = choice["message"].get("content") or ""
    usage = payload.get("usage")
    chunks = [text[i:i + 40] for i in range(0, len(text), 40)] or [""]
    return chat_sse(chunks, usage=(usage["prompt_tokens"], usage["completion_tokens"]) if usage else None,
                    finish_reason=choice.get("finish_reason") or "stop")


@dataclass
class FakeOpenAI:
    """An OpenAI-compatible chat server in a respx mock, answering from queued replies.

    Rules are tried in the order they were added; the first whose ``when`` matches the request
    and still has a reply serves it. ``when`` is a predicate on the parsed JSON body, a string
    that must occur in one of the messages, or None for any request. A rule added with
    ``repeat=True`` keeps serving its last reply. A request that matches nothing gets a 400 whose
    message starts with "FakeOpenAI:" and is listed in ``unmatched``.
    """

    api_base: str = API_BASE
    requests: list[dict[str, Any]] = field(default_factory=list)
    unmatched: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rules: list[_Rule] = []
        self._mock: respx.MockRouter | None = None
        self.route: respx.Route | None = None
        self._saved_env: str | None = None

    # -- queueing -----------------------------------------------------------------------------

    def add(self, *replies: httpx.Response | Callable[[dict[str, Any]], httpx.Response],
            when: Predicate | str | None = None, repeat: bool = False) -> "FakeOpenAI":
        """Queue raw responses (or callables body -> response) for requests matching ``when``."""
        self._rules.append(_Rule(_as_predicate(when), deque(replies), repeat))
        return self

    def reply(self, content: str, *, when: Predicate | str | None = None, repeat: bool = False,
              **kwargs: Any) -> "FakeOpenAI":
        return self.add(chat_json(content, **kwargs), when=when, repeat=repeat)

    def reply_json(self, value: Any, *, when: Predicate | str | None = JSON_MODE, repeat: bool = False,
                   **kwargs: Any) -> "FakeOpenAI":
        return self.add(chat_json(json.dumps(value), **kwargs), when=when, repeat=repeat)

    def reply_stream(self, chunks: Iterable[str], *, when: Predicate | str | None = STREAMING,
                     repeat: bool = False, **kwargs: Any) -> "FakeOpenAI":
        return self.add(chat_sse(chunks, **kwargs), when=when, repeat=repeat)

    def fail(self, status: int, message: str = "error", *, when: Predicate | str | None = None,
             headers: dict[str, str] | None = None, repeat: bool = False) -> "FakeOpenAI":
        return self.add(error_response(status, message, headers=headers), when=when, repeat=repeat)

    def serve_get(self, url: str, body: Any, status: int = 200) -> "FakeOpenAI":
        """Answer GET ``url`` (a server's ``/props``, ``/v1/models``) with ``body`` as JSON; call
        inside the ``with`` block."""
        assert self._mock is not None, "serve_get needs the fake to be active"
        self._mock.get(url).mock(return_value=httpx.Response(status, json=body))
        return self

    # -- inspection ---------------------------------------------------------------------------

    @property
    def call_count(self) -> int:
        return len(self.requests)

    def last(self) -> dict[str, Any]:
        return self.requests[-1]

    # -- serving ------------------------------------------------------------------------------

    def _serve(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content or b"{}")
        self.requests.append(body)
        for rule in self._rules:
            if not rule.replies or not rule.predicate(body):
                continue
            reply = rule.replies[0] if (rule.repeat_last and len(rule.replies) == 1) else rule.replies.popleft()
            rule.served += 1
            response = reply(body) if callable(reply) else reply
            if body.get("stream") and response.status_code == 200 and \
                    response.headers.get("content-type", "").startswith("application/json"):
                return as_stream(response)  # a reply queued as JSON, asked for as a stream
            # A copy, so a repeated reply is never a response object httpx already consumed.
            return httpx.Response(response.status_code, headers=response.headers, content=response.content)
        self.unmatched.append(body)
        return error_response(400, f"FakeOpenAI: no reply queued for this request "
                                   f"(stream={bool(body.get('stream'))}, "
                                   f"response_format={'response_format' in body})")

    def __enter__(self) -> "FakeOpenAI":
        self._saved_env = os.environ.get("DISABLE_AIOHTTP_TRANSPORT")
        os.environ["DISABLE_AIOHTTP_TRANSPORT"] = "True"
        self._mock = respx.mock(using="httpx", assert_all_called=False, assert_all_mocked=True)
        router = self._mock.__enter__()
        self.route = router.post(self.api_base.rstrip("/") + CHAT_PATH).mock(side_effect=self._serve)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        assert self._mock is not None
        self._mock.__exit__(*exc_info)
        if self._saved_env is None:
            os.environ.pop("DISABLE_AIOHTTP_TRANSPORT", None)
        else:
            os.environ["DISABLE_AIOHTTP_TRANSPORT"] = self._saved_env


# The first words of each prompt (prompts/*.md), to route a fake reply to the call that asked.
SELECT = "You are the navigator of a wiki"
ANSWER = "You answer questions using only the wiki pages"
REWRITE = "You rewrite the last question"
SUGGEST = "You suggest three follow-up questions"
