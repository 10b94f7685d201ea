"""Chat completions from an OpenAI-compatible server (``openai/<model>`` with an ``api_base``)
straight over httpx: the gateway's direct transport for such servers; litellm serves the rest.

Why: litellm builds its own response objects around every reply and every streamed chunk
(~3.4 ms of CPU per chunk on these machines), so with 200 concurrent answers the server spends
more CPU in litellm than in kaas and falls seconds behind the model (docs/benchmarks.md, "Server").
The OpenAI chat-completions API is a documented wire format — one JSON reply, or Server-Sent
Events with one ``chat.completion.chunk`` per ``data:`` line and ``data: [DONE]`` at the end — so
this module is a request and a JSON parse. Everything around the call (response-format shapes,
retries, error mapping, checking what came, usage and cost, cache, trace) stays in the gateway,
which reads the parsed JSON as it reads litellm's objects (``llm/replies.member``). What is read is
bounded: a reply body or stream at ``max_bytes`` (the gateway derives it from ``max_tokens``), an
error body at ``ERROR_BODY_BYTES``; past that ``ReplyTooLarge``. Errors are httpx's own
(``HTTPStatusError`` carrying the response, ``ConnectError``, ``ReadTimeout``...), which the
gateway maps like litellm's.
"""

from __future__ import annotations

import functools
import json
from typing import Any, AsyncIterator

import httpx

from kb_ai.llm.replies import ERROR_BODY_BYTES, ReplyTooLarge

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
    # identity: what is counted against the byte limit is what came, not what it inflates to
    headers = {"Accept": accept, "Accept-Encoding": "identity"}
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


async def _read(response: httpx.Response, max_bytes: int) -> bytes:
    """The (decoded) body, refusing to hold more than ``max_bytes`` of it: ReplyTooLarge."""
    body = bytearray()
    async for piece in response.aiter_bytes():
        body += piece
        if len(body) > max_bytes:
            raise ReplyTooLarge(max_bytes)
    return bytes(body)


async def _raise_for_status(response: httpx.Response) -> None:
    if response.status_code >= 400:
        try:
            detail = (await _read(response, ERROR_BODY_BYTES)).decode("utf-8", "replace")
        except ReplyTooLarge:
            detail = f"HTTP {response.status_code} (an error body of more than {ERROR_BODY_BYTES:,} bytes)"
        raise httpx.HTTPStatusError(_error_message(detail, response.status_code), request=response.request,
                                    response=response)


def _json(body: bytes) -> Any:
    """A JSON document from the server (UTF-8, as the protocol says; anything else is replaced)."""
    return json.loads(body.decode("utf-8", "replace"))


async def complete(kwargs: dict[str, Any], *, max_bytes: int) -> Any:
    """One chat completion (``kwargs`` as the gateway builds them for litellm): the reply's JSON,
    as the server sent it (the gateway checks its shape). Reads at most ``max_bytes``."""
    async with _client(kwargs) as client:
        response = await client.send(_request(client, kwargs, "application/json"), stream=True)
        try:
            await _raise_for_status(response)
            body = await _read(response, max_bytes)
        finally:
            await response.aclose()
    try:
        payload = _json(body)
    except (ValueError, RecursionError):
        text = body[:200].decode("utf-8", "replace")
        raise StreamError(f"the server's reply is not JSON: {text!r}", 502) from None
    if isinstance(payload, dict) and payload.get("error"):
        raise StreamError(_error_message(body.decode("utf-8", "replace"), 500), 500)
    return payload


async def open_stream(kwargs: dict[str, Any], *, max_bytes: int) -> AsyncIterator[Any]:
    """Send the request (raising on an HTTP error status) and return the iterator of chunks (each
    the JSON of one ``data:`` line, as sent). At most ``max_bytes`` of the stream are read. The
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
    return _chunks(client, response, max_bytes)


async def _lines(response: httpx.Response, max_bytes: int) -> AsyncIterator[str]:
    """The lines of a response, counting every byte against ``max_bytes`` (so a single line
    that never ends is as bounded as a stream that never ends): ReplyTooLarge past it."""
    buffer = bytearray()
    total = 0
    async for piece in response.aiter_bytes():
        total += len(piece)
        if total > max_bytes:
            raise ReplyTooLarge(max_bytes)
        buffer += piece
        while True:
            end = buffer.find(b"\n")
            if end < 0:
                break
            line = bytes(buffer[:end]).rstrip(b"\r")
            del buffer[:end + 1]
            yield line.decode("utf-8", "replace")
    if buffer:
        yield bytes(buffer).rstrip(b"\r").decode("utf-8", "replace")


async def _chunks(client: httpx.AsyncClient, response: httpx.Response, max_bytes: int) -> AsyncIterator[Any]:
    try:
        async for line in _lines(response, max_bytes):
            if not line.startswith("data:"):
                continue  # blank separators, comments, event names
            data = line[5:].strip()
            if data == "[DONE]":
                return
            try:
                payload = json.loads(data)
            except (ValueError, RecursionError):
                raise StreamError(f"the server sent a stream line that is not JSON: {data[:200]!r}", 502) from None
            if isinstance(payload, dict) and payload.get("error"):
                error = payload["error"]
                message = error.get("message") if isinstance(error, dict) else str(error)
                code = error.get("code") if isinstance(error, dict) else None
                raise StreamError(str(message or error), code if isinstance(code, int) else 500)
            yield payload
    finally:
        await response.aclose()
        await client.aclose()


def _error_message(detail: str, status: int) -> str:
    """The server's own error message when its body is OpenAI's error JSON, else the text."""
    try:
        error = json.loads(detail).get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            return str(message)
    except (ValueError, AttributeError, RecursionError):
        pass
    return detail.strip()[:300] or f"HTTP {status}"
