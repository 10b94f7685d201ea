"""``LLMGateway.stream``: a streamed reply, with the gateway's cache, breaker, deadline, retries
and books.

Failures before the first delta are retried like ``complete``; after it they raise (the caller
already showed part of the answer), after the part that came was counted. The whole stream, not
each read, is bounded by the call's deadline, and the text by the size a reply of ``max_tokens``
may have: a reply stopped by either (or by ``max_tokens``) raises ``LLMReplyCutOff`` after
yielding what came, and is never cached (a replay would hide that it was cut off). Text deltas
are made text by ``StreamText`` (a surrogate pair split over two chunks is joined).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, AsyncIterator

from kb_ai.errors import LLMError, LLMOutputError, LLMReplyCutOff
from kb_ai.llm.config import call_deadline
from kb_ai.llm.error_map import ResponseFormatRejected
from kb_ai.llm.replies import ReplyChunk, ReplyLimits, ReplyTooLarge, StreamText, Usage
from kb_ai.llm.trace import Exchange
from kb_ai.llm.transports import aclose_quietly
from kb_ai.llm.usage import UsageMeter
from kb_ai.untrusted_text import as_text

if TYPE_CHECKING:
    from kb_ai.llm.gateway import Call, LLMGateway

Message = dict[str, str]


class _Received:
    """What one attempt of a stream has received so far."""

    def __init__(self, limits: ReplyLimits):
        self.limits = limits
        self.pieces: list[str] = []
        self.chars = 0
        self.joiner = StreamText()
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.cut_off: LLMReplyCutOff | None = None
        self.started = False  # a chunk came (``collect_stream``: from then on, a stall is a timeout)

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    def take(self, chunk: ReplyChunk) -> tuple[str, bool]:
        """The text of ``chunk`` to pass on, and whether the reply reached its size there (the
        text is then cut at that size)."""
        self.usage = chunk.usage or self.usage
        self.finish_reason = chunk.finish_reason or self.finish_reason
        text = self.joiner.push(chunk.text) if chunk.text else ""
        over = self.chars + len(text) > self.limits.chars
        if over:
            text = text[:max(0, self.limits.chars - self.chars)]
        self.chars += len(text)
        if text:
            self.pieces.append(text)
        return text, over

    def flush(self) -> str:
        tail = self.joiner.flush()
        if tail:
            self.pieces.append(tail)
        return tail


async def stream_reply(gateway: LLMGateway, messages: list[Message], *, purpose: str, meter: UsageMeter | None,
                       temperature: float, max_tokens: int) -> AsyncIterator[str]:
    books = gateway.books
    key = books.key("stream", messages, temperature, max_tokens)
    cached = await books.fetch(key)
    if cached is not None:
        books.hit(cached, messages, purpose=purpose, meter=meter, kind="stream")
        for piece in _pieces(as_text(cached.text)):
            yield piece
        return

    gateway.transport.prepare()  # a one-off import is not part of any call's time
    exchange = Exchange("stream", purpose, messages, max_tokens=max_tokens)
    async with gateway.guarded(meter, max_tokens) as call:
        attempt = 0
        while True:
            started = gateway.clock()
            received = _Received(call.limits)
            delay: float | None = None
            async with gateway.stream_slot(), gateway.slot():
                deadline_at = call.start()  # the first wait for a slot is not the call's time
                try:
                    texts = _attempt(gateway, received, messages, temperature, call, deadline_at, purpose)
                    with gateway.flying():
                        async with contextlib.aclosing(texts):
                            async for text in texts:
                                yield text
                except (GeneratorExit, asyncio.CancelledError):
                    # The consumer stopped early (client went away): the tokens were still spent.
                    if received.pieces:
                        _partial(gateway, exchange, meter, received, started, attempt, note="abandoned by the caller")
                    raise
                except LLMError as err:
                    if received.pieces:
                        cut = err is received.cut_off
                        _partial(gateway, exchange, meter, received, started, attempt, error=None if cut else err,
                                 note=f"cut off ({err.reason})" if cut else None)  # type: ignore[attr-defined]
                        raise  # part of the answer is out: a retry would repeat it
                    gateway.books.failed(exchange, meter, err, started, attempt)
                    delay = gateway.retry_delay(err, attempt, call)
                    if delay is None:
                        raise
            if delay is None:
                break
            attempt += 1
            await gateway.sleep(delay)  # outside the slot: others may use it meanwhile

    text = received.text
    reply = books.outcome(text, received.usage, messages, finish_reason=received.finish_reason)
    books.answered(exchange, meter, reply, started, attempt, traced=text)
    if received.cut_off is not None:
        raise received.cut_off  # not cached: a replay would hide that the answer was cut off
    if text.strip():
        await books.store(key, reply)


async def _attempt(gateway: LLMGateway, received: _Received, messages: list[Message], temperature: float,
                   call: Call, deadline_at: float, purpose: str) -> AsyncIterator[str]:
    """One attempt: the texts as they come (kept in ``received``), then its end checked."""
    response: Any = None
    consumed = False
    try:
        try:
            response = await gateway.send(messages, temperature=temperature, call=call, stream=True)
            chunks = response.__aiter__()
            while (chunk := await _next(chunks, deadline_at)) is not None:
                text, over = received.take(chunk)
                if text:
                    yield text
                if over:
                    raise ReplyTooLarge(received.limits.bytes)
            tail = received.flush()
            if tail:
                yield tail
            consumed = True
        except LLMError:
            raise
        except ReplyTooLarge:
            raise _too_large(gateway, received, purpose) from None
        except TimeoutError:
            raise _timed_out(gateway, received, deadline_at, purpose) from None
        except Exception as exc:  # noqa: BLE001 (cancellation and GeneratorExit pass through)
            raise gateway.map_error(exc) from exc
        _check_end(gateway, received, purpose)
    finally:
        if response is not None and not consumed:
            await aclose_quietly(response)  # release the connection


async def _next(chunks: Any, deadline_at: float) -> ReplyChunk | None:
    """The next chunk, None at the end. The whole stream, not each read, is bounded: a reply
    that keeps coming ends at the deadline (TimeoutError)."""
    try:
        async with asyncio.timeout_at(deadline_at):
            return await chunks.__anext__()
    except StopAsyncIteration:
        return None


def _too_large(gateway: LLMGateway, received: _Received, purpose: str) -> LLMError:
    message = gateway.too_large_message(received.limits, purpose)
    if not received.pieces:
        return LLMOutputError(message)
    received.cut_off = LLMReplyCutOff(message, text=received.text, reason="size")
    return received.cut_off


def _timed_out(gateway: LLMGateway, received: _Received, deadline_at: float, purpose: str) -> LLMError:
    if asyncio.get_running_loop().time() < deadline_at:
        return gateway.map_error(TimeoutError())
    if not received.pieces:
        return gateway.deadline_error()
    received.cut_off = LLMReplyCutOff(
        f"{gateway.where()} was still sending the reply when the call deadline of "
        f"{call_deadline(gateway.config):g} s ran out ({purpose})", text=received.text, reason="deadline")
    return received.cut_off


def _check_end(gateway: LLMGateway, received: _Received, purpose: str) -> None:
    if not received.pieces:
        raise LLMOutputError(f"the model {gateway.config.model} returned an empty reply ({purpose})")
    if received.finish_reason is None:
        raise LLMOutputError(f"the reply stream from {gateway.where()} ended early (no finish reason); "
                             "the answer may be incomplete")
    if received.finish_reason == "length":
        received.cut_off = LLMReplyCutOff(gateway.cut_off_message(received.limits.max_tokens, purpose),
                                          text=received.text, reason="length")


def _partial(gateway: LLMGateway, exchange: Exchange, meter: UsageMeter | None, received: _Received,
             started: float, attempt: int, *, error: LLMError | None = None, note: str | None = None) -> None:
    """Usage and trace for a stream that stopped part-way (estimated when the server sent none)."""
    reply = gateway.books.outcome(received.text, received.usage, exchange.messages)
    gateway.books.answered(exchange, meter, reply, started, attempt, error=error, note=note,
                           traced=reply.text or None)


def _pieces(text: str, size: int = 200) -> list[str]:
    """A cached reply replayed as a few chunks, so stream consumers see a normal stream."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


# -- a long structured reply, streamed ------------------------------------------------------------


async def collect_stream(gateway: LLMGateway, messages: list[Message], exchange: Exchange, *,
                         meter: UsageMeter | None, temperature: float, call: Call,
                         response_format: dict[str, Any] | None = None) -> Any:
    """``LLMGateway._call`` for a long reply (``complete_json(stream=True)``): the request is
    streamed and its text collected, so the deadline measures progress. An attempt fails when,
    once the reply began, no chunk came for ``timeout`` seconds (``stall``), or when the call's
    deadline (sized to the prompt and ``max_tokens``, ``config.stream_deadline``) ran out (it alone
    bounds the wait for the first chunk: a server sends nothing while it reads a long prompt); its stream is closed first — closing the connection is how
    an OpenAI-compatible server (llama.cpp, vLLM, OpenAI) is told to stop generating — so a retry
    never runs beside the request it replaces. Returns the ``Outcome`` (cut off and marked when
    the reply outgrew the size a reply of ``max_tokens`` may have)."""
    gateway.transport.prepare()
    attempt = 0
    while True:
        started = gateway.clock()
        received = _Received(call.limits)
        try:
            async with gateway.slot():
                await _collect(gateway, received, messages, temperature, call, response_format)
        except ReplyTooLarge:
            reply = gateway.books.outcome(received.text, received.usage, messages, finish_reason="length",
                                          over_limit=True)
            gateway.books.answered(exchange, meter, reply, started, attempt)
            return reply
        except LLMError as err:
            gateway.books.failed(exchange, meter, err, started, attempt,
                                 probe=isinstance(err, ResponseFormatRejected))
            delay = gateway.retry_delay(err, attempt, call)
            if delay is None:
                raise
            attempt += 1
            await gateway.sleep(delay)
            continue
        reply = gateway.books.outcome(received.text, received.usage, messages, finish_reason=received.finish_reason)
        gateway.books.answered(exchange, meter, reply, started, attempt)
        return reply


async def _collect(gateway: LLMGateway, received: _Received, messages: list[Message], temperature: float,
                   call: Call, response_format: dict[str, Any] | None) -> None:
    """One streamed attempt, read into ``received``; the stream is always closed at the end."""
    deadline_at = call.start()
    stall = float(gateway.config.timeout or 60.0)
    response: Any = None
    try:
        with gateway.flying():
            response = await gateway.send(messages, temperature=temperature, call=call, stream=True,
                                          response_format=response_format)
            chunks = response.__aiter__()
            while True:
                # Before the first text a server sends nothing while it reads the prompt (or waits
                # for a free slot): only the call's deadline bounds that wait; after it, ``stall``.
                loop_time = asyncio.get_running_loop().time()
                limit = min(deadline_at, loop_time + stall) if received.started else deadline_at
                try:
                    async with asyncio.timeout_at(limit):
                        chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                received.started = received.started or bool(chunk.text)  # (a role-only chunk may come first)
                _text, over = received.take(chunk)
                if over:
                    raise ReplyTooLarge(received.limits.bytes)
        received.flush()
    except (LLMError, ReplyTooLarge):
        raise
    except TimeoutError:
        if asyncio.get_running_loop().time() >= deadline_at:
            raise gateway.deadline_error() from None
        raise gateway.map_error(TimeoutError()) from None  # stalled: a timeout, retried
    except Exception as exc:  # noqa: BLE001 (cancellation passes through)
        raise gateway.map_error(exc) from exc
    finally:
        if response is not None:
            await aclose_quietly(response)  # closes the connection: the server stops generating
