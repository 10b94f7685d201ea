"""Chat completions from an OpenAI-compatible server (``openai/<model>`` with an ``api_base``)
straight over httpx: the gateway's direct transport for such servers; litellm serves the rest.

Why: litellm builds its own response objects around every reply and every streamed chunk
(~3.4 ms of CPU per chunk on these machines), so with 200 concurrent answers the server spends
more CPU in litellm than in kaas and falls seconds behind the model (docs/benchmarks.md, "Server").
The OpenAI chat-completions API is a documented wire format — one JSON reply, or Server-Sent
Events with one ``chat.completion.chunk`` per ``data:`` line and ``data: [DONE]`` at the end — so
this module is a request and a JSON parse. Everything around the call (response-format shapes,
retries, error mapping, usage and cost, cache, trace) stays in the gateway, which sees the same
shapes from either transport (``.choices[0].message.content``; ``.choices[i].delta.content``,
``.finish_reason``, ``.usage``). Errors are httpx's own (``HTTPStatusError`` carrying the
response, ``ConnectError``, ``ReadTimeout``...), which the gateway maps like litellm's.
"""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace
from typing import Any, AsyncIterator

import httpx

# litellm's own request options, not fields of the OpenAI request body.
_NOT_BODY = {"model", "timeout", "num_retries", "max_retries", "drop_params", "api_base", "api_key"}
OPENAI_PREFIX = "openai/"


class StreamError(Exception):
    """The server reported an error in a 200 reply (an ``error`` object), or sent no JSON."""

    def __init__(self, message: str, status_code: int | None = None):
        super().__init__(message)
        self.status_code = status_code


def _request(client: httpx.AsyncClient, kwargs: dict[str, Any], accept: str) -> httpx.Request:
    body = {k: v for k, v in kwargs.items() if k not in _NOT_BODY}
    body["model"] = kwargs["model"].removeprefix(OPENAI_PREFIX)
    headers = {"Accept": accept}
    if kwargs.get("api_key"):
        headers["Authorization"] = f"Bearer {kwargs['api_key']}"
    url = kwargs["api_base"].rstrip("/") + "/chat/completions"
    return client.build_request("POST", url, json=body, headers=headers)


@functools.lru_cache(maxsize=1)
def _ssl_context():
    """Built once: creating httpx's default SSL context (loading the CA bundle) costs ~50 ms of
    CPU, which a client per call would otherwise pay every time, even for plain http."""
    return httpx.create_ssl_context()


def _client(kwargs: dict[str, Any]) -> httpx.AsyncClient:
    # A client per call: it belongs to the running event loop, and a gateway outlives loops.
    return httpx.AsyncClient(timeout=httpx.Timeout(kwargs.get("timeout") or 60.0), verify=_ssl_context())


async def _raise_for_status(response: httpx.Response) -> None:
    if response.status_code >= 400:
        detail = (await response.aread()).decode("utf-8", "replace")
        raise httpx.HTTPStatusError(_error_message(detail, response.status_code), request=response.request,
                                    response=response)


async def complete(kwargs: dict[str, Any]) -> SimpleNamespace:
    """One chat completion (``kwargs`` as the gateway builds them for litellm)."""
    async with _client(kwargs) as client:
        response = await client.send(_request(client, kwargs, "application/json"))
        await _raise_for_status(response)
        try:
            payload = response.json()
        except ValueError:
            raise StreamError(f"the server's reply is not JSON: {response.text[:200]!r}", 502) from None
    if isinstance(payload, dict) and payload.get("error"):
        raise StreamError(_error_message(response.text, 500), 500)
    choices = []
    for choice in (payload.get("choices") or []) if isinstance(payload, dict) else []:
        message = choice.get("message") or {}
        choices.append(SimpleNamespace(message=SimpleNamespace(content=message.get("content")),
                                       finish_reason=choice.get("finish_reason")))
    return SimpleNamespace(choices=choices, usage=(payload.get("usage") or None) if isinstance(payload, dict) else None)


async def open_stream(kwargs: dict[str, Any]) -> AsyncIterator[SimpleNamespace]:
    """Send the request (raising on an HTTP error status) and return the chunk iterator. The
    iterator is an async generator: ``aclose()`` releases the connection."""
    client = _client(kwargs)
    try:
        response = await client.send(_request(client, kwargs, "text/event-stream"), stream=True)
    except BaseException:
        await client.aclose()
        raise
    try:
        await _raise_for_status(response)
    except BaseException:
        await response.aclose()
        await client.aclose()
        raise
    return _chunks(client, response)


async def _chunks(client: httpx.AsyncClient, response: httpx.Response) -> AsyncIterator[SimpleNamespace]:
    try:
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue  # blank separators, comments, event names
            data = line[5:].strip()
            if data == "[DONE]":
                return
            payload = json.loads(data)
            if isinstance(payload, dict) and payload.get("error"):
                error = payload["error"]
                message = error.get("message") if isinstance(error, dict) else str(error)
                code = error.get("code") if isinstance(error, dict) else None
                raise StreamError(str(message or error), code if isinstance(code, int) else 500)
            yield _chunk(payload)
    finally:
        await response.aclose()
        await client.aclose()


def _chunk(payload: Any) -> SimpleNamespace:
    choices = []
    for choice in (payload.get("choices") or []) if isinstance(payload, dict) else []:
        delta = choice.get("delta") or {}
        choices.append(SimpleNamespace(delta=SimpleNamespace(content=delta.get("content")),
                                       finish_reason=choice.get("finish_reason")))
    usage = payload.get("usage") if isinstance(payload, dict) else None
    return SimpleNamespace(choices=choices, usage=usage or None)


def _error_message(detail: str, status: int) -> str:
    """The server's own error message when its body is OpenAI's error JSON, else the text."""
    try:
        error = json.loads(detail).get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            return str(message)
    except (ValueError, AttributeError):
        pass
    return detail.strip()[:300] or f"HTTP {status}"
