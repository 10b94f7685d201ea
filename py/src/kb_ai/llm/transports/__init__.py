"""How a request reaches a model: the gateway's transports (as in httpx's transport pattern).

A transport sends one request and hands back kaas's own reply types (``llm/replies.py``:
``Reply``, and ``ReplyChunk`` for a stream); it also knows what only the way of reaching the
model can tell: the model's context window, the price of its tokens, the request parameters it
takes, how to name the server in a message and what to check before any call. It raises what
its library raises (or ``ReplyTooLarge``, ``LLMOutputError`` for a reply that is not what the
protocol promises); the gateway maps the rest (``llm/error_map.py``) and keeps everything around
the call: retries, the deadline and circuit breaker, concurrency, the cache, usage and the trace.

Two transports:

* ``OpenAIHTTPTransport`` (``openai_http.py``): ``openai/<model>`` at an ``api_base``, an
  OpenAI-compatible server, straight over httpx (``direct_http``, the default for such servers).
* ``LiteLLMTransport`` (``litellm.py``): every other provider, through litellm.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator, Protocol

from kb_ai.llm.replies import Reply, ReplyChunk

Message = dict[str, str]

# Sent when api_base is set but no key: local servers ignore it, the OpenAI client refuses "".
PLACEHOLDER_API_KEY = "sk-no-key-required"


@dataclass(frozen=True)
class Request:
    """One chat request. ``temperature`` None: not sent (a model that refuses it)."""

    messages: list[Message]
    max_tokens: int
    max_bytes: int  # read at most this much of the reply (ReplyTooLarge past it)
    temperature: float | None = 0.0
    response_format: dict[str, Any] | None = None

    def fields(self, *, stream: bool, usage_in_stream: bool) -> dict[str, Any]:
        """The OpenAI chat-completions fields of this request (a stream asks for its usage in
        a last chunk when ``usage_in_stream``)."""
        fields: dict[str, Any] = {"messages": self.messages}
        if self.temperature is not None:
            fields["temperature"] = self.temperature
        fields["max_tokens"] = self.max_tokens
        if self.response_format is not None:
            fields["response_format"] = self.response_format
        if stream:
            fields["stream"] = True
            if usage_in_stream:
                fields["stream_options"] = {"include_usage": True}
        return fields


class ReplyStream(Protocol):
    """The chunks of a streamed reply; ``aclose()`` releases the connection."""

    def __aiter__(self) -> AsyncIterator[ReplyChunk]: ...

    async def __anext__(self) -> ReplyChunk: ...

    async def aclose(self) -> None: ...


class Transport(Protocol):
    name: str

    def where(self) -> str:
        """The server, as a message names it ("the LLM server at http://...")."""

    def prepare(self) -> None:
        """One-off set-up that is not part of any call's time (litellm's import)."""

    def preflight(self) -> None:
        """Raise UnknownModelError / MissingApiKeyError before any network call."""

    async def complete(self, request: Request) -> Reply:
        """Send ``request``; the reply."""

    async def stream(self, request: Request) -> ReplyStream:
        """Send ``request`` as a stream (raising on an error status); its chunks."""

    def context_window(self) -> int | None:
        """The model's input token limit; None when unknown."""

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """USD for these tokens; 0.0 for local or unknown models. Never raises."""

    def supports(self, param: str) -> bool:
        """The request parameter ``param`` (``stream_options``...) is taken."""


def transport_for(model: str, *, api_base: str | None, api_key: str | None, timeout: float,
                  direct_http: bool) -> Transport:
    """The transport that serves ``model``: direct HTTP for ``openai/<model>`` at an
    ``api_base`` (unless ``direct_http`` is off), litellm for everything else. Imports neither
    httpx nor litellm: each is imported on its first call."""
    if direct_http and api_base and model.startswith("openai/"):
        from kb_ai.llm.transports.openai_http import OpenAIHTTPTransport  # noqa: PLC0415

        return OpenAIHTTPTransport(model, api_base=api_base, api_key=api_key, timeout=timeout)
    from kb_ai.llm.transports.litellm import LiteLLMTransport  # noqa: PLC0415

    return LiteLLMTransport(model, api_base=api_base, api_key=api_key, timeout=timeout)


async def aclose_quietly(stream: Any) -> None:
    """Close an abandoned stream (release its connection), whatever closing it raises."""
    close = getattr(stream, "aclose", None)
    if close is None:
        return
    try:
        await close()
    except Exception:  # noqa: BLE001 (closing an abandoned stream must not mask the real outcome)
        pass
