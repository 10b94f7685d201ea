"""The LLM gateway: every model call in kaas goes through ``LLMGateway``.

A transport (``llm/transports/``) sends each request: straight over httpx to an OpenAI-compatible
server, or through litellm for every other provider; both hand back kaas's own reply types. The
gateway keeps everything around the call, the same for both:

* **One error vocabulary.** What a transport raises is mapped to ``kb_ai.errors`` with one-line
  messages for a person (``error_map.py``). The gateway retries what is ``retryable`` (timeouts,
  connection failures, 429 and 5xx) with exponential backoff and jitter, honouring
  ``Retry-After``; the wait comes from the ``sleep`` it was built with.
* **Bounded concurrency** per gateway (a semaphore per event loop, since a CLI may run one
  ``asyncio.run`` per command with the same gateway).
* **Structured output that works on real servers** (``structured.py``): ``complete_json`` asks
  with OpenAI's ``json_schema`` response format, falls back to llama.cpp's ``json_object`` +
  ``schema`` and then to a plain instruction when a server rejects a shape, remembers what
  worked per (model, api_base), validates the reply with ``jsonschema`` and allows one repair round.
* **Every call is bounded.** ``max_tokens`` is a required argument of every call, sized by the
  caller for its purpose, and bounds the size of the reply too (``replies.py``: a server that
  ignores it is cut off there). Every call has one wall-clock deadline (``call_deadline``, default
  3 x ``timeout``) that covers all its attempts, the waits between them, response-format probes,
  the repair round and a whole streamed reply: httpx's ``timeout`` is per read, so a model that
  keeps generating or a server that never answers would otherwise never be cut off. A reply
  stopped by either is a cut-off reply: JSON that did not complete is bad output (one repair
  round, then ``LLMOutputError``); a streamed answer keeps what came and ends with
  ``LLMReplyCutOff``, which the ask turns into a notice. A call that ran out its deadline ends
  with ``LLMDeadlineError``; a retry is only made while its wait ends before the deadline.
* **A circuit breaker** (``breaker.py``): after ``breaker_failures`` calls in a row that the model
  did not answer at all (errors that are ``unanswered``), calls fail at once with
  ``LLMModelDownError`` until ``breaker_cooldown`` seconds pass and one call probes the model
  again. Such a call also marks the request's ``UsageMeter.model_down``, so an ask answers the
  rest without the model.
* **Accounting, caching, tracing.** Every call attempt, failed ones included (and every cache hit)
  adds a ``CallUsage`` to the meter; temperature-0 calls are cached on disk (``cache.py``); with
  ``trace_file`` set every request and raw reply is appended as JSON lines (``trace.py``).

The streamed call is in ``streaming.py``; ``build_gateway`` is the one way the services make one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
import weakref
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

from kb_ai.config import Settings
from kb_ai.errors import (
    LLMDeadlineError,
    LLMError,
    LLMModelDownError,
    LLMOutputError,
    LLMReplyCutOff,
    LLMTimeoutError,
    UnknownModelError,
)
from kb_ai.llm import structured
from kb_ai.llm.accounting import Books, Outcome
from kb_ai.llm.breaker import Admission, CircuitBreaker
from kb_ai.llm.config import GatewayConfig, call_deadline, gateway_config, stream_deadline
from kb_ai.llm.error_map import ResponseFormatRejected, map_error, one_line, refuses_temperature, rejects_response_format
from kb_ai.llm.replies import Reply, ReplyLimits, ReplyTooLarge, quote_for_repair, reply_limits
from kb_ai.llm.tokens import estimate_tokens
from kb_ai.llm.trace import Exchange
from kb_ai.llm.transports import Request, Transport, transport_for
from kb_ai.llm.usage import UsageMeter
from kb_ai.untrusted_text import as_text

__all__ = ["GatewayConfig", "LLMGateway", "build_gateway", "gateway_config"]

Message = dict[str, str]
Sleep = Callable[[float], Awaitable[Any]]

log = logging.getLogger(__name__)

BACKOFF_BASE = 0.5
BACKOFF_CAP = 20.0
RETRY_AFTER_CAP = 60.0


class Call:
    """One call of the gateway's API (``complete``, ``complete_json``, ``stream``), all its
    attempts, response-format probes and repair round included: its wall-clock deadline, which
    starts when the call first gets a concurrency slot, and the size its replies may have."""

    def __init__(self, seconds: float, max_tokens: int):
        self.seconds = seconds
        self.limits: ReplyLimits = reply_limits(max_tokens)
        self.deadline_at: float | None = None  # event-loop time
        self.stream = False  # its requests are streamed and collected (``complete_json(stream=True)``)

    def start(self) -> float:
        if self.deadline_at is None:
            self.deadline_at = asyncio.get_running_loop().time() + self.seconds
        return self.deadline_at

    def left(self) -> float:
        if self.deadline_at is None:
            return self.seconds
        return self.deadline_at - asyncio.get_running_loop().time()


class LLMGateway:
    """Every LLM call of kaas. Safe to share between tasks; one instance per configured model.

    ``transport`` defaults to the one ``config`` calls for (``transports.transport_for``);
    ``sleep`` waits between retries and ``clock`` times calls and the circuit breaker's
    cool-down (tests pass their own to record waits without waiting)."""

    def __init__(self, config: GatewayConfig, *, transport: Transport | None = None,
                 sleep: Sleep = asyncio.sleep, clock: Callable[[], float] = time.monotonic):
        self.config = config
        self.transport: Transport = transport or transport_for(
            config.model, api_base=config.api_base, api_key=config.api_key, timeout=config.timeout,
            direct_http=config.direct_http)
        self._sleep = sleep
        self._clock = clock
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self.in_flight = 0  # requests the model is working on now (``flying``)
        self._stream_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self.books = Books(config, cost=lambda p, c: self.transport.cost(p, c), clock=clock)
        self._shapes = structured.ShapeMemory(
            Path(config.cache_dir).parent / structured.CAPABILITIES_FILE if config.cache_dir else None)
        self._omit_temperature = False  # set when the model refuses temperature (o-series, gpt-5)
        where = f"the model {config.model}" + (f" at {config.api_base}" if config.api_base else "")
        self.breaker = CircuitBreaker(config.breaker_failures, config.breaker_cooldown, where=where, clock=clock)

    # -- checks that need no network ----------------------------------------------------------

    def preflight(self) -> None:
        """Raise UnknownModelError / MissingApiKeyError before any network call."""
        model = self.config.model
        if not model or not model.strip():
            raise UnknownModelError("no model configured: set KAAS_MODEL, e.g. openai/gpt-4o-mini")
        self.transport.preflight()

    def pooled(self) -> contextlib.AbstractAsyncContextManager:
        """``async with gateway.pooled():`` — the calls made on this event loop inside the block
        share their connections to the model (a server wraps its whole life in it); everything
        is closed when the block ends. A transport without connections of its own to share
        (litellm keeps its own clients) makes it a no-op."""
        pooled = getattr(self.transport, "pooled", None)
        return pooled() if pooled is not None else contextlib.nullcontext()

    def context_window(self) -> int | None:
        """The model's input token limit according to litellm's model map; None when unknown."""
        return self.transport.context_window()

    # -- public calls -------------------------------------------------------------------------

    async def complete(self, messages: list[Message], *, purpose: str, max_tokens: int,
                       meter: UsageMeter | None = None, temperature: float = 0.0) -> str:
        """Send a chat request and return the reply text. Empty replies raise LLMOutputError; a
        reply cut off at ``max_tokens`` (or at the size such a reply may have) raises
        LLMReplyCutOff carrying the text that came."""
        _check_max_tokens(max_tokens)
        key = self.books.key("text", messages, temperature, max_tokens)
        cached = await self.books.fetch(key)
        if cached is not None and cached.text:
            self.books.hit(cached, messages, purpose=purpose, meter=meter, kind="text")
            return as_text(cached.text)
        async with self.guarded(meter, max_tokens) as call:
            reply = await self._call(messages, Exchange("text", purpose, messages, max_tokens=max_tokens),
                                     meter=meter, temperature=temperature, call=call)
        if not reply.text or not reply.text.strip():
            raise LLMOutputError(f"the model {self.config.model} returned an empty reply ({purpose})")
        if reply.over_limit:
            raise LLMReplyCutOff(self.too_large_message(call.limits, purpose), text=reply.text, reason="size")
        if reply.finish_reason == "length":
            raise LLMReplyCutOff(self.cut_off_message(max_tokens, purpose), text=reply.text)
        await self.books.store(key, reply)
        return reply.text

    def stream(self, messages: list[Message], *, purpose: str, max_tokens: int, meter: UsageMeter | None = None,
               temperature: float = 0.0) -> AsyncIterator[str]:
        """Stream the reply: an async iterator of text deltas as they arrive.

        Failures before the first delta are retried like ``complete``; after it they raise (the
        caller already showed part of the answer). A stream that ends without a finish reason
        raises LLMOutputError after yielding what came. A reply stopped at ``max_tokens``, at
        the call deadline or at the size a reply of ``max_tokens`` may have raises LLMReplyCutOff
        after yielding what came: the caller keeps it and says it was cut off. The concurrency
        slot is held while the caller iterates, so do not make other calls through this gateway
        from inside the loop when ``concurrency`` is 1.
        """
        from kb_ai.llm.streaming import stream_reply  # noqa: PLC0415 (one module per call shape)

        _check_max_tokens(max_tokens)
        return stream_reply(self, messages, purpose=purpose, meter=meter, temperature=temperature,
                            max_tokens=max_tokens)

    async def complete_json(self, messages: list[Message], *, schema: dict[str, Any], schema_name: str,
                            purpose: str, max_tokens: int, meter: UsageMeter | None = None,
                            temperature: float = 0.0, stream: bool = False) -> Any:
        """Ask for JSON matching ``schema`` and return it parsed and validated.

        The response_format shape adapts to the server (see the module docstring). An invalid
        reply — including one cut off at ``max_tokens`` before its JSON was complete — gets one
        repair round (the bad reply, at most ``REPAIR_QUOTE_CHARS`` of it, plus what was wrong);
        a second invalid reply raises LLMOutputError. The call deadline covers all of it. Only
        validated JSON is cached.

        ``stream``: for a long reply (a compile write). The reply is streamed and collected
        (``streaming.collect_stream``): an attempt that sends nothing for ``timeout`` seconds is
        closed (the server stops) before it is retried, and the call's deadline is sized to
        ``max_tokens`` (``config.stream_deadline``) rather than to ``timeout``: a slow model that
        keeps writing is not cut off, and a request is never paid twice while the server still
        works on the first.
        """
        _check_max_tokens(max_tokens)
        validator = structured.validator(schema)
        key = self.books.key("json", messages, temperature, max_tokens, schema=schema)
        cached = await self.books.fetch(key)
        if cached is not None:
            value, problem = structured.parse_and_validate(cached.text, validator)
            if problem is None:
                self.books.hit(cached, messages, purpose=purpose, meter=meter, kind="json")
                return value

        seconds = stream_deadline(self.config, max_tokens, estimate_tokens(
            "".join(str(m.get("content") or "") for m in messages))) if stream else None
        async with self.guarded(meter, max_tokens, seconds) as call:
            call.stream = stream
            reply, asked, response_format, shape = await self._probe_shapes(
                messages, schema, schema_name, purpose=purpose, meter=meter, temperature=temperature, call=call)
            value, problem = self._json_value(reply, validator, call.limits, purpose)
            if problem is not None:
                repair = [
                    *asked,
                    {"role": "assistant", "content": quote_for_repair(reply.text or "")},
                    {"role": "user", "content": structured.repair_instruction(problem, schema)},
                ]
                reply = await self._call(repair, Exchange("json-repair", purpose, repair, shape, max_tokens),
                                         meter=meter, temperature=temperature, call=call,
                                         response_format=response_format)
                value, problem = self._json_value(reply, validator, call.limits, purpose)
                if problem is not None:
                    raise LLMOutputError(
                        f"the model {self.config.model} did not return valid {schema_name} JSON "
                        f"after a repair attempt ({purpose}): {problem}"
                    )
        if not reply.over_limit:
            await self.books.store(key, reply, text=json.dumps(value, ensure_ascii=False))
        return value

    async def _probe_shapes(self, messages: list[Message], schema: dict[str, Any], schema_name: str, *,
                            purpose: str, meter: UsageMeter | None, temperature: float,
                            call: Call) -> tuple[Outcome, list[Message], dict[str, Any] | None, str]:
        """The first reply to a JSON request in a response_format shape the server takes, from the
        one remembered for it on (the instruction-only shape is always taken), with the messages
        and response_format it was asked with and the shape."""
        shape_key = f"{self.config.model}|{self.config.api_base or ''}"
        start = structured.SHAPES.index(self._shapes.get(shape_key))
        for shape in structured.SHAPES[start:]:
            asked, response_format = structured.shape_request(messages, schema, schema_name, shape)
            try:
                reply = await self._call(asked, Exchange("json", purpose, asked, shape, call.limits.max_tokens),
                                         meter=meter, temperature=temperature, call=call,
                                         response_format=response_format)
            except ResponseFormatRejected:
                log.info("%s rejected response_format shape %s; trying the next", self.config.model, shape)
                continue
            self._shapes.put(shape_key, shape)
            return reply, asked, response_format, shape
        raise AssertionError("the instruction shape sends no response_format to reject")

    def _json_value(self, reply: Outcome, validator: Any, limits: ReplyLimits,
                    purpose: str) -> tuple[Any, str | None]:
        """The reply's validated JSON, or what was wrong. A reply cut off at ``max_tokens`` is
        bad output unless its JSON is complete and valid anyway (a grammar-constrained reply
        can be complete and then run into the limit with trailing whitespace); so is one cut at
        the size a reply of ``max_tokens`` may have."""
        value, problem = structured.parse_and_validate(reply.text or "", validator)
        if problem is not None and reply.over_limit:
            problem = f"{self.too_large_message(limits, purpose)} ({problem}); answer with shorter JSON"
        elif problem is not None and reply.finish_reason == "length":
            problem = (f"the reply was cut off at the limit of {limits.max_tokens} tokens before the JSON was "
                       f"complete ({problem}); answer with shorter JSON")
        return value, problem

    # -- one call: breaker, deadline, messages ---------------------------------------------------

    @contextlib.asynccontextmanager
    async def guarded(self, meter: UsageMeter | None, max_tokens: int,
                      seconds: float | None = None) -> AsyncIterator[Call]:
        """One call of the API, through the circuit breaker: refused at once (LLMModelDownError)
        while the model is treated as down; its outcome — answered or not — counted. A call the
        model did not answer also marks ``meter`` (``UsageMeter.model_down``), so the rest of the
        request (an ask) can stop asking it."""
        try:
            admission: Admission = self.breaker.admit()
        except LLMModelDownError as err:
            _mark_down(meter, err)
            raise
        try:
            yield Call(call_deadline(self.config) if seconds is None else seconds, max_tokens)
        except LLMError as err:
            self.breaker.settle(admission, answered=not err.unanswered, reason=err.message)
            if err.unanswered:
                _mark_down(meter, err)
            raise
        except BaseException:
            self.breaker.settle(admission, answered=None)  # cancelled, or a bug: nothing learnt
            raise
        else:
            self.breaker.settle(admission, answered=True)

    def where(self) -> str:
        return self.transport.where()

    def too_large_message(self, limits: ReplyLimits, purpose: str) -> str:
        return (f"{self.where()} sent more than a reply of at most {limits.max_tokens} tokens can hold "
                f"({limits.chars:,} characters or {limits.bytes:,} bytes): it ignored max_tokens, and the "
                f"reply was cut off there ({purpose})")

    def cut_off_message(self, max_tokens: int, purpose: str) -> str:
        return f"the model {self.config.model} reached its limit of {max_tokens} tokens ({purpose})"

    def deadline_error(self, attempts: int | None = None) -> LLMDeadlineError:
        tried = f"{attempts} attempts, " if attempts and attempts > 1 else ""
        return LLMDeadlineError(
            f"{self.where()} did not finish within the call deadline of {call_deadline(self.config):g} s "
            f"({tried}{self.config.model}; KAAS_CALL_DEADLINE)")

    def map_error(self, exc: BaseException) -> LLMError:
        return map_error(exc, where=self.where(), model=self.config.model, timeout=self.config.timeout)

    # -- the request path -----------------------------------------------------------------------

    def slot(self) -> asyncio.Semaphore:
        # asyncio primitives bind to the loop they are first used on; a gateway may outlive a loop.
        loop = asyncio.get_running_loop()
        semaphore = self._semaphores.get(loop)
        if semaphore is None:
            semaphore = asyncio.Semaphore(max(1, int(self.config.concurrency)))
            self._semaphores[loop] = semaphore
        return semaphore

    @contextlib.contextmanager
    def flying(self):
        """Counts a request the model is working on (``in_flight``: the compile's progress line)."""
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1

    def stream_slot(self) -> contextlib.AbstractAsyncContextManager:
        """Taken by a streamed reply before its ``slot``, when ``stream_concurrency`` is set (a
        server): long answers cannot take every slot, so the short calls that start a new
        question (selection) do not queue behind the answers streaming ahead of them."""
        if not self.config.stream_concurrency:
            return contextlib.nullcontext()
        loop = asyncio.get_running_loop()
        semaphore = self._stream_semaphores.get(loop)
        if semaphore is None:
            semaphore = asyncio.Semaphore(max(1, int(self.config.stream_concurrency)))
            self._stream_semaphores[loop] = semaphore
        return semaphore

    async def send(self, messages: list[Message], *, temperature: float, call: Call, stream: bool,
                   response_format: dict[str, Any] | None = None) -> Any:
        """One attempt through the transport: a ``Reply``, or a stream of ``ReplyChunk`` when
        ``stream``. Raises mapped errors, or ReplyTooLarge when the transport stopped reading at
        the byte limit. Retries once without temperature if refused. The call's deadline ends
        the attempt (LLMDeadlineError); a stream's reads are capped by the caller."""
        deadline_at = call.start()
        for _ in range(2):
            request = Request(messages=messages, max_tokens=call.limits.max_tokens, max_bytes=call.limits.bytes,
                              temperature=None if self._omit_temperature else temperature,
                              response_format=response_format)
            limit = None
            try:
                # httpx's timeout is per read: a reply that keeps coming would never time out.
                async with asyncio.timeout_at(deadline_at) as limit:
                    if stream:
                        return await self.transport.stream(request)
                    with self.flying():
                        return await self.transport.complete(request)
            except (ReplyTooLarge, LLMError):
                raise
            except Exception as exc:  # noqa: BLE001 (mapped below; cancellation passes through)
                if limit is not None and limit.expired():
                    raise self.deadline_error() from None
                if not self._omit_temperature and refuses_temperature(exc):
                    # o-series / gpt-5 reasoning models accept only the default temperature.
                    self._omit_temperature = True
                    continue
                if response_format is not None and rejects_response_format(exc):
                    raise ResponseFormatRejected(
                        f"{self.where()} does not accept this response_format: {one_line(exc)}"
                    ) from exc
                raise self.map_error(exc) from exc
        raise AssertionError("unreachable")

    async def _call(self, messages: list[Message], exchange: Exchange, *, meter: UsageMeter | None,
                    temperature: float, call: Call, response_format: dict[str, Any] | None = None) -> Outcome:
        """A non-streaming request with retries (within the call's deadline), usage and trace
        (a call made with ``stream``: the streamed one, ``streaming.collect_stream``)."""
        if call.stream:
            from kb_ai.llm.streaming import collect_stream  # noqa: PLC0415

            return await collect_stream(self, messages, exchange, meter=meter, temperature=temperature, call=call,
                                        response_format=response_format)
        self.transport.prepare()  # a one-off import is not part of any call's time
        attempt = 0
        while True:
            started = self._clock()
            try:
                try:
                    async with self.slot():
                        got = await self.send(messages, temperature=temperature, call=call, stream=False,
                                              response_format=response_format)
                    reply = self._bounded(got, messages, call.limits)
                except ReplyTooLarge:
                    # Nothing of a body cut short can be parsed: an empty reply, cut off.
                    reply = self.books.outcome("", None, messages, finish_reason="length", over_limit=True)
            except LLMError as err:
                self.books.failed(exchange, meter, err, started, attempt,
                                  probe=isinstance(err, ResponseFormatRejected))
                delay = self.retry_delay(err, attempt, call)
                if delay is None:
                    raise
                attempt += 1
                await self.sleep(delay)
                continue
            self.books.answered(exchange, meter, reply, started, attempt)
            return reply

    def _bounded(self, reply: Reply, messages: list[Message], limits: ReplyLimits) -> Outcome:
        """A reply of at most ``limits.chars`` characters (more is cut there and marked)."""
        text, finish_reason, over_limit = reply.text, reply.finish_reason, False
        if text is not None and len(text) > limits.chars:
            text, finish_reason, over_limit = text[:limits.chars], "length", True
        return self.books.outcome(text, reply.usage, messages, finish_reason=finish_reason, over_limit=over_limit)

    # -- retries --------------------------------------------------------------------------------

    def retry_delay(self, err: LLMError, attempt: int, call: Call) -> float | None:
        """Seconds to wait before retrying ``err``, or None to give up: not retryable, out of
        retries, or the wait would reach the call's deadline (the deadline covers all attempts).
        A timeout given up on for that reason raises LLMDeadlineError instead."""
        if not err.retryable or attempt >= self.config.max_retries:
            return None
        retry_after = getattr(err, "retry_after", None)
        if retry_after is not None:
            delay = min(RETRY_AFTER_CAP, max(0.0, retry_after))
        else:
            delay = _backoff(attempt)
        if delay >= call.left():
            if isinstance(err, LLMTimeoutError):
                raise self.deadline_error(attempts=attempt + 1) from err
            return None
        return delay

    async def sleep(self, seconds: float) -> None:
        """Wait between attempts, with the ``sleep`` the gateway was built with."""
        await self._sleep(seconds)

    def clock(self) -> float:
        return self._clock()


def build_gateway(settings: Settings, kb: Any, *, model: str | None = None, sleep: Sleep = asyncio.sleep,
                  clock: Callable[[], float] = time.monotonic) -> LLMGateway:
    """The gateway ``settings`` ask for, for ``model`` (default ``settings.model``), with the
    response cache, capabilities and trace of the knowledge base ``kb`` (its ``state_dir``)."""
    chosen = settings.model if model is None else model
    return LLMGateway(gateway_config(settings, chosen or "", kb.state_dir), sleep=sleep, clock=clock)


def _check_max_tokens(max_tokens: int) -> None:
    # Required by every call: without it a model can generate until its context is full.
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, not {max_tokens!r}")


def _backoff(attempt: int) -> float:
    # Exponential with jitter, so parallel callers that failed together do not retry together.
    return min(BACKOFF_CAP, BACKOFF_BASE * (2 ** attempt)) * random.uniform(0.5, 1.0)


def _mark_down(meter: UsageMeter | None, err: LLMError) -> None:
    if meter is not None and meter.model_down is None:
        meter.model_down = err.message
