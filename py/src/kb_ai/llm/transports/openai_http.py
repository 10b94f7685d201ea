"""The direct transport: chat completions from an OpenAI-compatible server (``openai/<model>``
with an ``api_base``) straight over httpx; litellm (``litellm.py``) serves the rest.

Why: litellm builds its own response objects around every reply and every streamed chunk
(~3.4 ms of CPU per chunk on these machines), so with 200 concurrent answers the server spends
more CPU in litellm than in kaas and falls seconds behind the model (docs/benchmarks.md, "Server").
The OpenAI chat-completions API is a documented wire format — one JSON reply, or Server-Sent
Events with one ``chat.completion.chunk`` per ``data:`` line and ``data: [DONE]`` at the end — so
this module is a request and a JSON parse, read into kaas's ``Reply``/``ReplyChunk`` by the same
``replies.reply_of``/``chunks_of`` as litellm's objects. What is read is bounded: a reply body or
stream at ``Request.max_bytes`` (the gateway derives it from ``max_tokens``), an error body at
``ERROR_BODY_BYTES``; past that ``ReplyTooLarge``. Connections: a call opens its own client and
connection and closes both, unless its event loop is inside ``pooled()`` (a server's lifetime,
a compile): then the calls of that loop share a few clients whose keep-alive connections are
reused, all closed when the block ends. Errors are httpx's own (``HTTPStatusError``
carrying the response, ``ConnectError``, ``ReadTimeout``...) or ``StreamError``, which the
gateway maps like litellm's (``llm/error_map.py``). httpx is imported on the first call, not
with this module. Context windows and prices come from litellm's model map file, read without
importing litellm: this transport never imports litellm.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import weakref
from typing import TYPE_CHECKING, Any, AsyncIterator

from kb_ai.llm.replies import ERROR_BODY_BYTES, Reply, ReplyChunk, ReplyTooLarge, chunks_of, reply_of
from kb_ai.llm.transports import PLACEHOLDER_API_KEY, Request, aclose_quietly
from kb_ai.llm.transports.litellm import map_cost, model_map_entry

if TYPE_CHECKING:
    import httpx

OPENAI_PREFIX = "openai/"
# Request parameters every OpenAI-compatible chat-completions server takes.
OPENAI_PARAMS = {"temperature", "max_tokens", "response_format", "stream", "stream_options"}
# A pooled client's idle connections: kept at most this long (below the 5 s keep-alive of common
# servers, uvicorn's included, so a connection is not reused just as the server closes it) and at
# most this many per client (the gateway's semaphore bounds the calls, not the pool).
KEEPALIVE_SECONDS = 4.0
KEEPALIVE_CONNECTIONS = 8
# The pool is this many clients (a call takes the least busy): httpcore scans all of a client's connections and
# waiting requests whenever a request starts or ends, so one client carrying 200 concurrent
# calls spent more CPU in that scan than the connections saved (measured: ~11% of the server's
# CPU under 200 chats); eight smaller pools make the scan ~64 times cheaper.
POOL_CLIENTS = 8
# After a stream's ``[DONE]``, how much more is read to reach the end of the body (which lets a
# pooled connection be reused) before the connection is closed instead.
DRAIN_BYTES = 4096
DRAIN_SECONDS = 1.0


class StreamError(Exception):
    """The server reported an error in a 200 reply (an ``error`` object), or sent no JSON."""

    def __init__(self, message: str, status_code: int | None = None):
        super().__init__(message)
        self.status_code = status_code


class OpenAIHTTPTransport:
    name = "openai-http"

    def __init__(self, model: str, *, api_base: str, api_key: str | None = None, timeout: float = 60.0):
        self.model = model
        self.api_base = api_base
        self.api_key = api_key or PLACEHOLDER_API_KEY
        self.timeout = timeout
        # The shared clients of each event loop inside ``pooled()``: a client's connections belong
        # to the loop that opened them, and one transport serves several loops (tests, the CLI).
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pool] = weakref.WeakKeyDictionary()

    @contextlib.asynccontextmanager
    async def pooled(self) -> AsyncIterator[None]:
        """While this block runs, the calls made on the running event loop share the clients of
        a ``_Pool`` and reuse their connections (no client, TLS context or TCP handshake per
        call); at its end the clients and every connection they hold are closed. Calls on other
        loops are not affected. Nested blocks on the same loop share the outer one's pool."""
        loop = asyncio.get_running_loop()
        if loop in self._pools:
            yield
            return
        pool = _Pool(self.timeout)
        self._pools[loop] = pool
        try:
            yield
        finally:
            if self._pools.get(loop) is pool:
                del self._pools[loop]
            await pool.aclose()

    def _lease(self) -> _Lease:
        """A client for one call: the least busy of the running loop's pool, or a new one."""
        pool = self._pools.get(asyncio.get_running_loop())
        lease = pool.lease() if pool is not None else None
        return lease or _Lease(_client(self.timeout), None, 0)

    def where(self) -> str:
        return f"the LLM server at {self.api_base}"

    def prepare(self) -> None:
        _ssl_context()  # httpx and its CA bundle: light, but not part of the first call's time

    def preflight(self) -> None:
        pass  # openai/<model> at an api_base: nothing to check without asking the server

    def context_window(self) -> int | None:
        """The model's input token limit from litellm's model map (read, not imported)."""
        value = (model_map_entry(self.model) or {}).get("max_input_tokens")
        return int(value) if isinstance(value, (int, float)) and value > 0 else None

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        # The per-token prices of litellm's model map, read without importing litellm (a model
        # the map does not know, e.g. a local server's, costs 0).
        return map_cost(self.model, prompt_tokens, completion_tokens) or 0.0

    def supports(self, param: str) -> bool:
        return param in OPENAI_PARAMS

    def _body(self, request: Request, *, stream: bool) -> dict[str, Any]:
        body = request.fields(stream=stream, usage_in_stream=True)
        body["model"] = self.model.removeprefix(OPENAI_PREFIX)
        return body

    def _request(self, client: httpx.AsyncClient, request: Request, *, stream: bool) -> httpx.Request:
        # identity: what is counted against the byte limit is what came, not what it inflates to
        headers = {"Accept": "text/event-stream" if stream else "application/json", "Accept-Encoding": "identity",
                   "Authorization": f"Bearer {self.api_key}"}
        url = self.api_base.rstrip("/") + "/chat/completions"
        return client.build_request("POST", url, json=self._body(request, stream=stream), headers=headers)

    async def complete(self, request: Request) -> Reply:
        """One chat completion: the reply, read from at most ``request.max_bytes`` of JSON."""
        lease = self._lease()
        client = lease.client
        try:
            response = await client.send(self._request(client, request, stream=False), stream=True)
            try:
                await _raise_for_status(response)
                body = await _read(response, request.max_bytes)
            finally:
                await response.aclose()
        finally:
            await lease.release()
        try:
            payload = _json(body)
        except (ValueError, RecursionError):
            text = body[:200].decode("utf-8", "replace")
            raise StreamError(f"the server's reply is not JSON: {text!r}", 502) from None
        if isinstance(payload, dict) and payload.get("error"):
            raise StreamError(_error_message(body.decode("utf-8", "replace"), 500), 500)
        return reply_of(payload, self.where())

    async def stream(self, request: Request) -> AsyncIterator[ReplyChunk]:
        """Send the request (raising on an HTTP error status) and return the iterator of chunks.
        At most ``request.max_bytes`` of the stream are read. The iterator is an async
        generator: ``aclose()`` releases the connection."""
        lease = self._lease()
        client = lease.client
        try:
            response = await client.send(self._request(client, request, stream=True), stream=True)
        except BaseException:
            await lease.release()
            raise
        try:
            await _raise_for_status(response)
        except BaseException:
            await response.aclose()
            await lease.release()
            raise
        return _chunks(lease, response, request.max_bytes, self.where())


class _Lease:
    """One call's client: a pooled one (``pool`` set: handed back at the end) or its own
    (closed at the end, with its connection)."""

    def __init__(self, client: httpx.AsyncClient, pool: _Pool | None, index: int):
        self.client, self.pool, self.index = client, pool, index

    @property
    def pooled(self) -> bool:
        return self.pool is not None

    async def release(self) -> None:
        if self.pool is None:
            await self.client.aclose()
        else:
            self.pool.busy[self.index] -= 1
            self.pool = None  # released once


class _Pool:
    """``POOL_CLIENTS`` clients of one event loop, each made when first needed; a call gets the
    one with the fewest calls in flight (the first on a tie: calls one after another reuse one
    connection)."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.clients: list[httpx.AsyncClient | None] = [None] * POOL_CLIENTS
        self.busy = [0] * POOL_CLIENTS
        self.closed = False

    def lease(self) -> _Lease | None:
        if self.closed:
            return None
        index = min(range(POOL_CLIENTS), key=self.busy.__getitem__)
        client = self.clients[index]
        if client is None:
            import httpx  # noqa: PLC0415

            client = self.clients[index] = _client(self.timeout, limits=httpx.Limits(
                max_connections=None, max_keepalive_connections=KEEPALIVE_CONNECTIONS,
                keepalive_expiry=KEEPALIVE_SECONDS))
        self.busy[index] += 1
        return _Lease(client, self, index)

    async def aclose(self) -> None:
        self.closed = True
        for client in self.clients:
            if client is not None:
                await client.aclose()


@functools.lru_cache(maxsize=1)
def _ssl_context():
    """Built once: creating httpx's default SSL context (loading the CA bundle) costs ~50 ms of
    CPU, which a client per call would otherwise pay every time, even for plain http."""
    import httpx  # noqa: PLC0415

    return httpx.create_ssl_context()


def _client(timeout: float, limits: httpx.Limits | None = None) -> httpx.AsyncClient:
    import httpx  # noqa: PLC0415 (imported on the first call)

    return httpx.AsyncClient(timeout=httpx.Timeout(timeout or 60.0), verify=_ssl_context(),
                             **({"limits": limits} if limits is not None else {}))


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
        import httpx  # noqa: PLC0415

        raise httpx.HTTPStatusError(_error_message(detail, response.status_code), request=response.request,
                                    response=response)


def _json(body: bytes) -> Any:
    """A JSON document from the server (UTF-8, as the protocol says; anything else is replaced)."""
    return json.loads(body.decode("utf-8", "replace"))


async def _lines(pieces: AsyncIterator[bytes], max_bytes: int) -> AsyncIterator[str]:
    """The lines of a response's body, counting every byte against ``max_bytes`` (so a single
    line that never ends is as bounded as a stream that never ends): ReplyTooLarge past it."""
    buffer = bytearray()
    total = 0
    async for piece in pieces:
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


async def _chunks(lease: _Lease, response: httpx.Response, max_bytes: int,
                  where: str) -> AsyncIterator[ReplyChunk]:
    """The stream's chunks; at the end the response is closed (its connection goes back to a
    pooled client, or is closed) and the lease released (a call's own client closed)."""
    pieces = response.aiter_bytes()
    try:
        async with contextlib.aclosing(_lines(pieces, max_bytes)) as lines:
            async for line in lines:
                if not line.startswith("data:"):
                    continue  # blank separators, comments, event names
                data = line[5:].strip()
                if data == "[DONE]":
                    if lease.pooled:
                        await _finish(pieces)
                    return
                try:
                    payload = json.loads(data)
                except (ValueError, RecursionError):
                    raise StreamError(f"the server sent a stream line that is not JSON: {data[:200]!r}",
                                      502) from None
                if isinstance(payload, dict) and payload.get("error"):
                    error = payload["error"]
                    message = error.get("message") if isinstance(error, dict) else str(error)
                    code = error.get("code") if isinstance(error, dict) else None
                    raise StreamError(str(message or error), code if isinstance(code, int) else 500)
                for chunk in chunks_of(payload, where):
                    yield chunk
    finally:
        await aclose_quietly(pieces)
        await response.aclose()
        await lease.release()


async def _finish(pieces: AsyncIterator[bytes]) -> None:
    """Read what follows ``[DONE]`` (normally only the end of the body) so that the connection
    can go back to the pool: a response closed before its end closes its connection. At most
    ``DRAIN_BYTES`` and ``DRAIN_SECONDS``; past either the connection is simply closed."""
    extra = 0
    with contextlib.suppress(Exception):
        async with asyncio.timeout(DRAIN_SECONDS):
            async for piece in pieces:
                extra += len(piece)
                if extra > DRAIN_BYTES:
                    return


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
