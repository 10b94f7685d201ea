"""The LLM gateway: every model call in kaas goes through ``LLMGateway``.

Design, briefly:

* **litellm, lazily.** ``import litellm`` costs seconds and hundreds of MB, and offline mode never
  needs it, so it is imported on the first call that does (``_litellm()``), configured to stay
  quiet (nothing on stdout, which would corrupt MCP stdio) and to use its bundled price list
  instead of fetching one. Importing this module does not import litellm.
* **One error vocabulary.** litellm's exceptions (and the openai/httpx ones under them) are mapped
  to ``kb_ai.errors`` with one-line messages for a person. litellm's own retries are off; the
  gateway retries timeouts, connection failures, 429 and 5xx itself, with exponential backoff and
  jitter, honouring ``Retry-After``.
* **Bounded concurrency** per gateway (a semaphore per event loop, since a CLI may run one
  ``asyncio.run`` per command with the same gateway).
* **Structured output that works on real servers.** ``complete_json`` asks with OpenAI's
  ``json_schema`` response format, falls back to llama.cpp's ``json_object`` + ``schema`` and then
  to a plain instruction when a server rejects a shape, remembers what worked per
  (model, api_base), validates the reply with ``jsonschema`` and allows one repair round.
* **Every call is bounded.** ``max_tokens`` is a required argument of every call, sized by the
  caller for its purpose, and bounds the size of the reply too (``replies.py``: a server that
  ignores it is cut off there). Every call has one wall-clock deadline (``call_deadline``, default
  3 x ``timeout``) that covers all its attempts, the waits between them, response-format probes,
  the repair round and a whole streamed reply: httpx's ``timeout`` is per read, so a model that
  keeps generating (a repeating answer, whitespace inside grammar-constrained JSON) or a server
  that never answers would otherwise never be cut off. A reply stopped by either is a cut-off
  reply: JSON that did not complete is bad output (one repair round, then ``LLMOutputError``); a
  streamed answer keeps what came and ends with ``LLMReplyCutOff``, which the ask turns into a
  notice. A call that ran out its deadline ends with ``LLMDeadlineError``; a retry is only made
  while its wait ends before the deadline.
* **A circuit breaker** (``breaker.py``): after ``breaker_failures`` calls in a row that the model
  did not answer at all (timeout, deadline, unreachable), calls fail at once with
  ``LLMModelDownError`` (code ``llm_unreachable``: a compile stops, keeping its work) until
  ``breaker_cooldown`` seconds pass and one call probes the model again. Such a call also marks
  the request's ``UsageMeter.model_down``, so an ask answers the rest without the model.
* **Accounting, caching, tracing.** Every call attempt, failed ones included (and every cache hit)
  adds a ``CallUsage`` to the meter;
  temperature-0 calls are cached on disk (``cache.py``); with ``trace_file`` set every request and
  raw reply is appended as JSON lines, to see why the model chose what it chose.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import json
import logging
import os
import random
import re
import threading
import time
import weakref
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, AsyncIterator

from kb_ai.config import Settings
from kb_ai.errors import (
    KaasError,
    LLMAuthError,
    LLMBadRequestError,
    LLMDeadlineError,
    LLMError,
    LLMModelDownError,
    LLMOutputError,
    LLMRateLimitError,
    LLMReplyCutOff,
    LLMServerError,
    LLMTimeoutError,
    LLMUnreachableError,
    MissingApiKeyError,
    UnknownModelError,
)
from kb_ai.llm.breaker import Admission, CircuitBreaker
from kb_ai.llm.cache import ResponseCache, cache_key
from kb_ai.llm.replies import (
    ReplyLimits,
    ReplyTooLarge,
    StreamText,
    clean_json,
    member,
    quote_for_repair,
    reply_limits,
    usage_numbers,
)
from kb_ai.llm.usage import CallUsage, UsageMeter
from kb_ai.files import DamagedFileError, append_state_text, read_state_json, write_state_bytes
from kb_ai.untrusted_text import as_text

Message = dict[str, str]

log = logging.getLogger(__name__)

# Sent when api_base is set but no key: local servers ignore it, the OpenAI client refuses "".
PLACEHOLDER_API_KEY = "sk-no-key-required"

BACKOFF_BASE = 0.5
BACKOFF_CAP = 20.0
RETRY_AFTER_CAP = 60.0

# response_format shapes for complete_json, best first.
SHAPE_JSON_SCHEMA = "json_schema"  # OpenAI, vLLM, LM Studio, recent Ollama
SHAPE_JSON_OBJECT = "json_object_schema"  # llama.cpp server: {"type": "json_object", "schema": ...}
SHAPE_INSTRUCTION = "instruction"  # no response_format: the schema goes into the prompt
SHAPES = (SHAPE_JSON_SCHEMA, SHAPE_JSON_OBJECT, SHAPE_INSTRUCTION)

CAPABILITIES_FILE = "llm-capabilities.json"
MAX_CAPABILITIES_BYTES = 1 << 20

# Providers that run locally (or take credentials from their own chain) and need no API key.
_KEYLESS_PROVIDERS = {
    "ollama", "ollama_chat", "lm_studio", "hosted_vllm", "vllm", "llamafile", "xinference",
    "openai_like", "custom_openai", "oobabooga", "petals", "triton", "custom",
    "bedrock", "sagemaker", "vertex_ai", "vertex_ai_beta", "azure_ai", "watsonx",
}

# ---------------------------------------------------------------------------------------------
# litellm, imported once and on demand

_litellm_module: Any = None
_litellm_lock = threading.Lock()


def warm_up() -> None:
    """Import litellm now (a server calls this at start-up so the first question does not wait)."""
    _litellm()


def _litellm() -> Any:
    """Import and configure litellm once. Slow the first time (seconds), free afterwards."""
    global _litellm_module
    if _litellm_module is not None:
        return _litellm_module
    with _litellm_lock:
        if _litellm_module is None:
            # Must be set before the import: litellm otherwise fetches its price list over the network.
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm  # noqa: PLC0415 (deliberately lazy)

            litellm.suppress_debug_info = True  # else it prints "Give Feedback / Get Help" to stdout
            litellm.set_verbose = False
            litellm.telemetry = False
            for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
                logging.getLogger(name).setLevel(logging.WARNING)
            _litellm_module = litellm
    return _litellm_module


# ---------------------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True)
class GatewayConfig:
    model: str
    api_base: str | None = None
    api_key: str | None = None
    timeout: float = 60.0  # seconds: connecting, and each read (httpx's timeout)
    call_deadline: float | None = None  # seconds for one whole call, retries and stream included; None: 3 x timeout
    max_retries: int = 3
    breaker_failures: int = 3  # calls in a row without an answer after which the model is treated as down (0: never)
    breaker_cooldown: float = 60.0  # seconds the model is then treated as down before one call probes it
    concurrency: int = 4
    cache_dir: Path | None = None  # None: no response cache
    trace_file: Path | None = None  # JSONL of every prompt and raw reply, when set
    # Talk to OpenAI-compatible servers (openai/<model> + api_base) over httpx directly instead
    # of through litellm's response objects (llm/openai_http.py). False: always litellm.
    direct_http: bool = True


def gateway_config(settings: Settings, model: str, state_dir: Path) -> GatewayConfig:
    """The gateway configuration ``settings`` ask for, for ``model``,
    with the cache and trace of the knowledge base whose state folder is ``state_dir``."""
    return GatewayConfig(
        model=model,
        api_base=settings.api_base,
        api_key=settings.api_key,
        timeout=settings.timeout,
        call_deadline=settings.call_deadline,
        max_retries=settings.max_retries,
        breaker_failures=settings.breaker_failures,
        breaker_cooldown=settings.breaker_cooldown,
        concurrency=settings.concurrency,
        cache_dir=(state_dir / "cache" / "llm") if settings.cache else None,
        trace_file=(state_dir / "logs" / "llm-trace.jsonl") if settings.debug else None,
        direct_http=settings.direct_http,
    )


@dataclass
class _Reply:
    """One successful model response, as the gateway needs it."""

    text: str | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    finish_reason: str | None = None
    over_limit: bool = False  # longer than a reply of max_tokens may be: cut there, never cached


class _Call:
    """One call of the gateway's API (``complete``, ``complete_json``, ``stream``), all its
    attempts, response-format probes and repair round included: its wall-clock deadline, which
    starts when the call first gets a concurrency slot, and the size its replies may have."""

    def __init__(self, seconds: float, max_tokens: int):
        self.seconds = seconds
        self.limits: ReplyLimits = reply_limits(max_tokens)
        self.deadline_at: float | None = None  # event-loop time

    def start(self) -> float:
        if self.deadline_at is None:
            self.deadline_at = asyncio.get_running_loop().time() + self.seconds
        return self.deadline_at

    def left(self) -> float:
        if self.deadline_at is None:
            return self.seconds
        return self.deadline_at - asyncio.get_running_loop().time()


class _ResponseFormatRejected(LLMBadRequestError):
    """The server (or litellm for this provider) refused the response_format shape we sent."""


# ---------------------------------------------------------------------------------------------
# the gateway


class LLMGateway:
    """Every LLM call of kaas. Safe to share between tasks; one instance per configured model."""

    def __init__(self, config: GatewayConfig):
        self.config = config
        self._sleep = asyncio.sleep  # tests replace this to record delays without waiting
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._cache = ResponseCache(config.cache_dir) if config.cache_dir else None
        self._capabilities_path = (
            Path(config.cache_dir).parent / CAPABILITIES_FILE if config.cache_dir else None
        )
        self._shape_memory: dict[str, str] = {}
        self._shape_memory_loaded = False
        self._omit_temperature = False  # set when the model refuses temperature (o-series, gpt-5)
        self._supported_params: set[str] | None = None
        self._trace_lock = threading.Lock()
        where = f"the model {config.model}" + (f" at {config.api_base}" if config.api_base else "")
        self.breaker = CircuitBreaker(config.breaker_failures, config.breaker_cooldown, where=where)

    # -- checks that need no network ----------------------------------------------------------

    @property
    def _direct(self) -> bool:
        """Calls go over httpx straight to an OpenAI-compatible server (llm/openai_http.py)."""
        return _direct_http_applies(self.config)

    def preflight(self) -> None:
        """Raise UnknownModelError / MissingApiKeyError before any network call."""
        model = self.config.model
        if not model or not model.strip():
            raise UnknownModelError("no model configured: set KAAS_MODEL, e.g. openai/gpt-4o-mini")
        if self._direct:
            return  # openai/<model> at an api_base: nothing for litellm to check, nothing to import
        provider = self._provider()
        if self.config.api_key or self.config.api_base or provider in _KEYLESS_PROVIDERS:
            return
        litellm = _litellm()
        try:
            env = litellm.validate_environment(model)
        except Exception:  # noqa: BLE001 (a failed check must not block a call that may work)
            return
        missing = [k for k in (env or {}).get("missing_keys") or [] if "KEY" in k or "TOKEN" in k]
        if missing:
            raise MissingApiKeyError(
                f"missing API key for {provider}: set KAAS_API_KEY or {' / '.join(missing)}"
            )

    def context_window(self) -> int | None:
        """The model's input token limit according to litellm's model map; None when unknown."""
        if self._direct:  # the same map, read without importing litellm (see _model_map)
            value = (_model_map_entry(self.config.model) or {}).get("max_input_tokens")
            return int(value) if isinstance(value, (int, float)) and value > 0 else None
        try:
            info = _litellm().get_model_info(self.config.model)
            value = info.get("max_input_tokens")
            return int(value) if value else None
        except Exception:  # noqa: BLE001 (unknown models raise; "unknown" is an answer)
            return None

    def _provider(self) -> str:
        try:
            _, provider, _, _ = _litellm().get_llm_provider(self.config.model)
        except Exception:  # noqa: BLE001 (litellm raises BadRequestError with a page of advice)
            raise UnknownModelError(
                f"unknown model {self.config.model!r}: litellm cannot tell which provider serves it; "
                "use a litellm model string such as openai/gpt-4o-mini "
                "(or openai/<name> with KAAS_API_BASE for an OpenAI-compatible server)"
            ) from None
        return str(provider)

    # -- public calls -------------------------------------------------------------------------

    async def complete(self, messages: list[Message], *, purpose: str, max_tokens: int,
                       meter: UsageMeter | None = None, temperature: float = 0.0) -> str:
        """Send a chat request and return the reply text. Empty replies raise LLMOutputError; a
        reply cut off at ``max_tokens`` (or at the size such a reply may have) raises
        LLMReplyCutOff carrying the text that came."""
        _check_max_tokens(max_tokens)
        key = self._key("text", messages, temperature, max_tokens)
        hit = None if key is None else await asyncio.to_thread(  # disk: off the event loop
            self._cache_get, key, messages, purpose=purpose, meter=meter, kind="text")
        if hit is not None:
            return hit
        async with self._guarded(meter, max_tokens) as call:
            reply = await self._call(messages, purpose=purpose, meter=meter, temperature=temperature,
                                     call=call, kind="text")
        if not reply.text or not reply.text.strip():
            raise LLMOutputError(f"the model {self.config.model} returned an empty reply ({purpose})")
        if reply.over_limit:
            raise LLMReplyCutOff(self._too_large_message(call.limits, purpose), text=reply.text, reason="size")
        if reply.finish_reason == "length":
            raise LLMReplyCutOff(self._cut_off_message(max_tokens, purpose), text=reply.text)
        if key is not None:
            await asyncio.to_thread(self._cache_put, key, reply)  # a durable write: off the event loop
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
        _check_max_tokens(max_tokens)
        return self._stream(messages, purpose=purpose, meter=meter, temperature=temperature,
                            max_tokens=max_tokens)

    async def complete_json(self, messages: list[Message], *, schema: dict[str, Any], schema_name: str,
                            purpose: str, max_tokens: int, meter: UsageMeter | None = None,
                            temperature: float = 0.0) -> Any:
        """Ask for JSON matching ``schema`` and return it parsed and validated.

        The response_format shape adapts to the server (see the module docstring). An invalid
        reply — including one cut off at ``max_tokens`` before its JSON was complete — gets one
        repair round (the bad reply, at most ``REPAIR_QUOTE_CHARS`` of it, plus what was wrong);
        a second invalid reply raises LLMOutputError. The call deadline covers all of it. Only
        validated JSON is cached.
        """
        _check_max_tokens(max_tokens)
        validator = _validator(schema)
        key = self._key("json", messages, temperature, max_tokens, schema=schema)
        if self._cache is not None and key is not None:
            cached = await asyncio.to_thread(self._cache.get, key)  # disk: off the event loop
            if cached is not None:
                value, problem = _parse_and_validate(cached.text, validator)
                if problem is None:
                    self._record_hit(cached, messages, purpose=purpose, meter=meter, kind="json")
                    return value

        async with self._guarded(meter, max_tokens) as call:
            start = SHAPES.index(self._remembered_shape())
            reply: _Reply | None = None
            request_messages: list[Message] = messages
            response_format: dict[str, Any] | None = None
            shape = SHAPES[start]
            for index in range(start, len(SHAPES)):
                shape = SHAPES[index]
                request_messages, response_format = _shape_request(messages, schema, schema_name, shape)
                try:
                    reply = await self._call(request_messages, purpose=purpose, meter=meter,
                                             temperature=temperature, call=call, kind="json",
                                             response_format=response_format, shape=shape)
                except _ResponseFormatRejected:
                    log.info("%s rejected response_format shape %s; trying the next", self.config.model, shape)
                    continue
                self._remember_shape(shape)
                break
            assert reply is not None

            value, problem = self._json_value(reply, validator, call.limits, purpose)
            if problem is not None:
                repair_messages = [
                    *request_messages,
                    {"role": "assistant", "content": quote_for_repair(reply.text or "")},
                    {"role": "user", "content": _repair_instruction(problem, schema)},
                ]
                reply = await self._call(repair_messages, purpose=purpose, meter=meter,
                                         temperature=temperature, call=call, kind="json-repair",
                                         response_format=response_format, shape=shape)
                value, problem = self._json_value(reply, validator, call.limits, purpose)
                if problem is not None:
                    raise LLMOutputError(
                        f"the model {self.config.model} did not return valid {schema_name} JSON "
                        f"after a repair attempt ({purpose}): {problem}"
                    )
        if not reply.over_limit and key is not None:
            await asyncio.to_thread(self._cache_put, key, reply, text=json.dumps(value, ensure_ascii=False))
        return value

    def _json_value(self, reply: _Reply, validator: Any, limits: ReplyLimits,
                    purpose: str) -> tuple[Any, str | None]:
        """The reply's validated JSON, or what was wrong. A reply cut off at ``max_tokens`` is
        bad output unless its JSON is complete and valid anyway (a grammar-constrained reply
        can be complete and then run into the limit with trailing whitespace); so is one cut at
        the size a reply of ``max_tokens`` may have."""
        value, problem = _parse_and_validate(reply.text or "", validator)
        if problem is not None and reply.over_limit:
            problem = f"{self._too_large_message(limits, purpose)} ({problem}); answer with shorter JSON"
        elif problem is not None and reply.finish_reason == "length":
            problem = (f"the reply was cut off at the limit of {limits.max_tokens} tokens before the JSON was "
                       f"complete ({problem}); answer with shorter JSON")
        return value, problem

    def _too_large_message(self, limits: ReplyLimits, purpose: str) -> str:
        return (f"{self._where()} sent more than a reply of at most {limits.max_tokens} tokens can hold "
                f"({limits.chars:,} characters or {limits.bytes:,} bytes): it ignored max_tokens, and the "
                f"reply was cut off there ({purpose})")

    @contextlib.asynccontextmanager
    async def _guarded(self, meter: UsageMeter | None, max_tokens: int) -> AsyncIterator[_Call]:
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
            yield _Call(self._call_deadline(), max_tokens)
        except LLMError as err:
            unanswered = model_unanswered(err)
            self.breaker.settle(admission, answered=not unanswered, reason=err.message)
            if unanswered:
                _mark_down(meter, err)
            raise
        except BaseException:
            self.breaker.settle(admission, answered=None)  # cancelled, or a bug: nothing learnt
            raise
        else:
            self.breaker.settle(admission, answered=True)

    def _cut_off_message(self, max_tokens: int, purpose: str) -> str:
        return f"the model {self.config.model} reached its limit of {max_tokens} tokens ({purpose})"

    def _call_deadline(self) -> float:
        return call_deadline(self.config)

    # -- the request path -----------------------------------------------------------------------

    def _semaphore(self) -> asyncio.Semaphore:
        # asyncio primitives bind to the loop they are first used on; a gateway may outlive a loop.
        loop = asyncio.get_running_loop()
        semaphore = self._semaphores.get(loop)
        if semaphore is None:
            semaphore = asyncio.Semaphore(max(1, int(self.config.concurrency)))
            self._semaphores[loop] = semaphore
        return semaphore

    def _supports(self, param: str) -> bool:
        if self._direct:
            return param in _OPENAI_PARAMS
        if self._supported_params is None:
            try:
                _, provider, _, _ = _litellm().get_llm_provider(self.config.model)
                params = _litellm().get_supported_openai_params(
                    model=self.config.model, custom_llm_provider=provider) or []
                self._supported_params = set(params)
            except Exception:  # noqa: BLE001
                self._supported_params = set()
        return param in self._supported_params

    def _request_kwargs(self, messages: list[Message], *, temperature: float, max_tokens: int | None,
                        stream: bool, response_format: dict[str, Any] | None) -> dict[str, Any]:
        cfg = self.config
        kwargs: dict[str, Any] = {
            "model": cfg.model,
            "messages": messages,
            "timeout": cfg.timeout,
            "num_retries": 0,  # we retry ourselves, with our own error mapping and backoff
            "max_retries": 0,  # the openai client's own retries, likewise
            "drop_params": False,  # a silently dropped response_format would defeat shape detection
        }
        if cfg.api_base:
            kwargs["api_base"] = cfg.api_base
        api_key = cfg.api_key or (PLACEHOLDER_API_KEY if cfg.api_base else None)
        if api_key:
            kwargs["api_key"] = api_key
        if not self._omit_temperature:
            kwargs["temperature"] = temperature
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        if response_format is not None:
            kwargs["response_format"] = response_format
        if stream:
            kwargs["stream"] = True
            if self._supports("stream_options"):
                kwargs["stream_options"] = {"include_usage": True}
        return kwargs

    async def _acompletion(self, messages: list[Message], *, temperature: float, call: _Call,
                           stream: bool, response_format: dict[str, Any] | None) -> Any:
        """One attempt (direct HTTP or litellm); raises mapped errors, or ReplyTooLarge when the
        direct transport stops reading at the byte limit. Retries once without temperature if
        refused. The call's deadline ends the attempt: LLMDeadlineError."""
        direct = self._direct
        if direct:
            from kb_ai.llm import openai_http  # noqa: PLC0415 (httpx only when a model is called)
        litellm = None if direct else _litellm()
        deadline_at = call.start()
        max_tokens = call.limits.max_tokens
        for _ in range(2):
            kwargs = self._request_kwargs(messages, temperature=temperature, max_tokens=max_tokens,
                                          stream=stream, response_format=response_format)
            limit = None
            try:
                # httpx's timeout is per read: a reply that keeps coming would never time out.
                # The deadline caps the whole call (a stream's reads are capped in _stream).
                async with asyncio.timeout_at(deadline_at) as limit:
                    if direct:
                        transport = openai_http.open_stream if stream else openai_http.complete
                        return await transport(kwargs, max_bytes=call.limits.bytes)
                    return await litellm.acompletion(**kwargs)
            except ReplyTooLarge:
                raise
            except Exception as exc:  # noqa: BLE001 (mapped below; cancellation passes through)
                if limit is not None and limit.expired():
                    raise self._deadline_error() from None
                if not self._omit_temperature and _refuses_temperature(exc):
                    # o-series / gpt-5 reasoning models accept only the default temperature.
                    self._omit_temperature = True
                    continue
                if response_format is not None and _rejects_response_format(exc):
                    raise _ResponseFormatRejected(
                        f"{self._where()} does not accept this response_format: {_one_line(exc)}"
                    ) from exc
                raise self._map_error(exc) from exc
        raise AssertionError("unreachable")

    async def _call(self, messages: list[Message], *, purpose: str, meter: UsageMeter | None,
                    temperature: float, call: _Call, kind: str,
                    response_format: dict[str, Any] | None = None, shape: str | None = None) -> _Reply:
        """A non-streaming request with retries (within the call's deadline), usage and trace."""
        if not self._direct:
            _litellm()  # the one-off import is not part of any call's time
        max_tokens = call.limits.max_tokens
        attempt = 0
        while True:
            started = time.monotonic()
            try:
                try:
                    async with self._semaphore():
                        response = await self._acompletion(messages, temperature=temperature, call=call,
                                                           stream=False, response_format=response_format)
                    reply = self._reply_from_response(response, messages, call.limits)
                except ReplyTooLarge:
                    # Nothing of a body cut short can be parsed: an empty reply, cut off.
                    reply = self._reply_of("", None, messages, finish_reason="length", over_limit=True)
            except LLMError as err:
                seconds = time.monotonic() - started
                self._record_failure(meter, purpose, err, seconds)
                self._trace(kind=kind, purpose=purpose, shape=shape, messages=messages, reply=None,
                            usage=None, cached=False, error=err, attempt=attempt, seconds=seconds,
                            max_tokens=max_tokens)
                delay = self._retry_delay(err, attempt, call)
                if delay is None:
                    raise
                attempt += 1
                await self._sleep(delay)
                continue
            seconds = time.monotonic() - started
            self._record(meter, purpose, reply, seconds)
            self._trace(kind=kind, purpose=purpose, shape=shape, messages=messages, reply=reply.text,
                        usage=reply, cached=False, error=None, attempt=attempt, seconds=seconds,
                        max_tokens=max_tokens)
            return reply

    async def _stream(self, messages: list[Message], *, purpose: str, meter: UsageMeter | None,
                      temperature: float, max_tokens: int) -> AsyncIterator[str]:
        key = self._key("stream", messages, temperature, max_tokens)
        if self._cache is not None and key is not None:
            cached = await asyncio.to_thread(self._cache.get, key)  # disk: off the event loop
            if cached is not None:
                self._record_hit(cached, messages, purpose=purpose, meter=meter, kind="stream")
                for piece in _pieces(as_text(cached.text)):
                    yield piece
                return

        if not self._direct:
            _litellm()  # the one-off import is not part of any call's time
        async with self._guarded(meter, max_tokens) as call:
            limits = call.limits
            attempt = 0
            while True:
                started = time.monotonic()
                pieces: list[str] = []
                received = 0  # characters of text so far
                joiner = StreamText()
                finish_reason: str | None = None
                usage: Any = None
                delay: float | None = None
                cut_off: LLMReplyCutOff | None = None
                async with self._semaphore():
                    deadline_at = call.start()  # the first wait for a slot is not the call's time
                    response: Any = None
                    consumed = False
                    try:
                        try:
                            response = await self._acompletion(messages, temperature=temperature, call=call,
                                                               stream=True, response_format=None)
                            chunks = response.__aiter__()
                            while True:
                                # The whole stream, not each read, is bounded: a reply that keeps
                                # coming ends at the deadline.
                                try:
                                    async with asyncio.timeout_at(deadline_at):
                                        chunk = await chunks.__anext__()
                                except StopAsyncIteration:
                                    break
                                usage = member(chunk, "usage") or usage
                                for choice in self._chunk_choices(chunk):
                                    finish_reason = _finish_reason(member(choice, "finish_reason")) or finish_reason
                                    delta = self._content(member(member(choice, "delta"), "content"), "stream chunk")
                                    text = joiner.push(delta) if delta else ""
                                    if received + len(text) > limits.chars:
                                        text = text[:max(0, limits.chars - received)]
                                        if text:
                                            pieces.append(text)
                                            yield text
                                        raise ReplyTooLarge(limits.bytes)
                                    if text:
                                        received += len(text)
                                        pieces.append(text)
                                        yield text
                            tail = joiner.flush()
                            if tail:
                                pieces.append(tail)
                                yield tail
                            consumed = True
                        except LLMError:
                            raise
                        except ReplyTooLarge:
                            message = self._too_large_message(limits, purpose)
                            if not pieces:
                                raise LLMOutputError(message) from None
                            cut_off = LLMReplyCutOff(message, text="".join(pieces), reason="size")
                            raise cut_off from None
                        except TimeoutError:
                            if asyncio.get_running_loop().time() < deadline_at:
                                raise self._map_error(TimeoutError()) from None
                            if not pieces:
                                raise self._deadline_error() from None
                            cut_off = LLMReplyCutOff(
                                f"{self._where()} was still sending the reply when the call deadline of "
                                f"{self._call_deadline():g} s ran out ({purpose})", text="".join(pieces),
                                reason="deadline")
                            raise cut_off from None
                        except Exception as exc:  # noqa: BLE001 (cancellation and GeneratorExit pass through)
                            raise self._map_error(exc) from exc
                        if not pieces:
                            raise LLMOutputError(f"the model {self.config.model} returned an empty reply ({purpose})")
                        if finish_reason is None:
                            raise LLMOutputError(
                                f"the reply stream from {self._where()} ended early (no finish reason); "
                                "the answer may be incomplete"
                            )
                        if finish_reason == "length":
                            cut_off = LLMReplyCutOff(self._cut_off_message(max_tokens, purpose),
                                                     text="".join(pieces), reason="length")
                    except (GeneratorExit, asyncio.CancelledError):
                        # The consumer stopped early (client went away): the tokens were still spent.
                        if pieces:
                            self._record_partial(meter, purpose, messages, pieces, usage, started, attempt,
                                                 note="abandoned by the caller", max_tokens=max_tokens)
                        raise
                    except LLMError as err:
                        if pieces:
                            self._record_partial(meter, purpose, messages, pieces, usage, started, attempt,
                                                 error=None if err is cut_off else err, max_tokens=max_tokens,
                                                 note=f"cut off ({cut_off.reason})" if err is cut_off else None)
                            raise  # part of the answer is out: a retry would repeat it
                        seconds = time.monotonic() - started
                        self._record_failure(meter, purpose, err, seconds)
                        self._trace(kind="stream", purpose=purpose, shape=None, messages=messages, reply=None,
                                    usage=None, cached=False, error=err, attempt=attempt, seconds=seconds,
                                    max_tokens=max_tokens)
                        delay = self._retry_delay(err, attempt, call)
                        if delay is None:
                            raise
                    finally:
                        if response is not None and not consumed:
                            await _aclose_quietly(response)  # release the connection
                if delay is not None:
                    attempt += 1
                    await self._sleep(delay)  # outside the semaphore: others may use the slot meanwhile
                    continue
                break

        text = "".join(pieces)
        reply = self._reply_of(text, usage, messages, finish_reason=finish_reason)
        seconds = time.monotonic() - started
        self._record(meter, purpose, reply, seconds)
        self._trace(kind="stream", purpose=purpose, shape=None, messages=messages, reply=text, usage=reply,
                    cached=False, error=None, attempt=attempt, seconds=seconds, max_tokens=max_tokens)
        if cut_off is not None:
            raise cut_off  # not cached: a replay would hide that the answer was cut off
        if text.strip() and key is not None:
            await asyncio.to_thread(self._cache_put, key, reply)  # a durable write: off the event loop

    def _chunk_choices(self, chunk: Any) -> list[Any]:
        choices = member(chunk, "choices")
        if choices is None:
            return []  # a usage-only chunk, a keep-alive
        if not isinstance(choices, (list, tuple)):
            raise LLMOutputError(f"{self._where()} sent a stream chunk whose choices are not a list")
        return list(choices)

    def _content(self, content: Any, what: str) -> str | None:
        """A reply's or chunk's ``content``: text (lone surrogates made U+FFFD by the caller's
        joiner or here), None when absent; anything else is bad output."""
        if content is None or isinstance(content, str):
            return content
        raise LLMOutputError(f"{self._where()} sent a {what} whose content is not text "
                             f"({type(content).__name__}); the protocol promises a string")

    def _record_partial(self, meter: UsageMeter | None, purpose: str, messages: list[Message],
                        pieces: list[str], usage: Any, started: float, attempt: int, *,
                        error: LLMError | None = None, note: str | None = None,
                        max_tokens: int | None = None) -> None:
        """Usage and trace for a stream that stopped part-way (estimated when the server sent none)."""
        reply = self._reply_of("".join(pieces), usage, messages)
        seconds = time.monotonic() - started
        self._record(meter, purpose, reply, seconds, error=error)
        self._trace(kind="stream", purpose=purpose, shape=None, messages=messages, reply=reply.text or None,
                    usage=reply, cached=False, error=error, attempt=attempt, seconds=seconds, note=note,
                    max_tokens=max_tokens)

    # -- retries --------------------------------------------------------------------------------

    def _retry_delay(self, err: LLMError, attempt: int, call: _Call) -> float | None:
        """Seconds to wait before retrying ``err``, or None to give up: not retryable, out of
        retries, or the wait would reach the call's deadline (the deadline covers all attempts).
        A timeout given up on for that reason raises LLMDeadlineError instead."""
        if isinstance(err, LLMOutputError) or not err.retryable or attempt >= self.config.max_retries:
            return None
        retry_after = getattr(err, "retry_after", None)
        if retry_after is not None:
            delay = min(RETRY_AFTER_CAP, max(0.0, retry_after))
        else:
            delay = _backoff(attempt)
        if delay >= call.left():
            if isinstance(err, LLMTimeoutError):
                raise self._deadline_error(attempts=attempt + 1) from err
            return None
        return delay

    def _where(self) -> str:
        if self.config.api_base:
            return f"the LLM server at {self.config.api_base}"
        try:
            _, provider, _, _ = _litellm().get_llm_provider(self.config.model)
            return f"the {provider} API"
        except Exception:  # noqa: BLE001
            return "the LLM server"

    def _map_error(self, exc: BaseException) -> LLMError:
        """Turn litellm/openai/httpx exceptions into kb_ai.errors, with a one-line message that
        is text (a server's error message may hold a lone surrogate too)."""
        err = self._mapped(exc)
        clean = as_text(err.message)
        if clean is not err.message:
            err.message, err.args = clean, (clean,)
        return err

    def _mapped(self, exc: BaseException) -> LLMError:
        if isinstance(exc, LLMError):
            return exc
        if isinstance(exc, KaasError):
            return LLMError(exc.message)
        model = self.config.model
        where = self._where()
        name = type(exc).__name__
        detail = _one_line(exc)
        chain = _exception_chain(exc)
        names = {type(e).__name__ for e in chain}

        if name == "MidStreamFallbackError":
            if "finish_reason" in str(exc):
                return LLMOutputError(f"the reply stream from {where} ended early (no finish reason); "
                                      "the answer may be incomplete")
            original = getattr(exc, "original_exception", None)
            if isinstance(original, BaseException) and original is not exc:
                return self._map_error(original)
        if _unreadable_reply(chain):
            # litellm could not build its response object from what the server sent (content
            # that is not text, usage that is not a count...): the reply is bad output.
            return LLMOutputError(f"{where} sent a reply that is not what the protocol promises: {detail}")

        status = _status_code(exc)
        if name == "Timeout" or isinstance(exc, (asyncio.TimeoutError, TimeoutError)) or names & _TIMEOUT_NAMES:
            return LLMTimeoutError(f"{where} did not answer within {self.config.timeout:g} s ({model})")
        if _is_connection_failure(chain):
            return LLMUnreachableError(f"cannot reach {where}: {_root_cause(chain)}")
        if name in ("AuthenticationError", "CallerCredentialAuthenticationError") or status == 401:
            return LLMAuthError(f"{where} rejected the API key (set KAAS_API_KEY): {detail}")
        if name == "PermissionDeniedError" or status == 403:
            return LLMAuthError(f"{where} denied access to {model}: {detail}")
        if name == "NotFoundError" or status == 404:
            return UnknownModelError(
                f"{where} does not know model {model!r} (404): check KAAS_MODEL and KAAS_API_BASE "
                f"(an OpenAI-compatible base usually ends in /v1): {detail}"
            )
        if name in ("RateLimitError", "CallerCredentialRateLimitError") or status == 429:
            err: LLMError = LLMRateLimitError(f"{where} is rate limiting requests (429): {detail}")
            err.retry_after = _retry_after(exc)  # type: ignore[attr-defined]
            return err
        if name == "ContextWindowExceededError":
            return LLMBadRequestError(f"the prompt is too long for {model}'s context window: {detail}")
        if name in _BAD_REQUEST_NAMES or status in (400, 413, 422):
            return LLMBadRequestError(f"{where} refused the request ({status or 400}): {detail}")
        if name in _SERVER_ERROR_NAMES or (status is not None and status >= 500):
            err = LLMServerError(f"{where} failed ({status or 500}): {detail}")
            err.retry_after = _retry_after(exc)  # type: ignore[attr-defined]
            return err
        if name == "APIConnectionError":
            # litellm wraps failures it could not classify as APIConnectionError, with a traceback.
            if "connect" in detail.lower():
                return LLMUnreachableError(f"cannot reach {where}: {detail}")
        return LLMError(f"the LLM call to {model} failed ({name}): {detail}")

    # -- responses, usage, cost -----------------------------------------------------------------

    def _reply_from_response(self, response: Any, messages: list[Message], limits: ReplyLimits) -> _Reply:
        """The reply of a non-streamed response (the direct transport's JSON or litellm's object),
        checked: text that is text, at most ``limits.chars`` of it (more is cut there and marked)."""
        choices = member(response, "choices")
        if not isinstance(choices, (list, tuple)) or not choices:
            raise LLMOutputError(f"{self._where()} sent a reply without choices")
        choice = choices[0]
        text = self._content(member(member(choice, "message"), "content"), "reply")
        finish_reason = _finish_reason(member(choice, "finish_reason"))
        over_limit = False
        if text is not None:
            text = as_text(text)
            if len(text) > limits.chars:
                text, finish_reason, over_limit = text[:limits.chars], "length", True
        return self._reply_of(text, member(response, "usage"), messages, finish_reason=finish_reason,
                              over_limit=over_limit)

    def _reply_of(self, text: str | None, usage: Any, messages: list[Message], *,
                  finish_reason: str | None = None, over_limit: bool = False) -> _Reply:
        prompt_tokens, completion_tokens = usage_numbers(usage, messages, text or "")
        return _Reply(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                      cost_usd=self._cost(prompt_tokens, completion_tokens), finish_reason=finish_reason,
                      over_limit=over_limit)

    def _cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """USD per litellm's price list; 0.0 for local or unknown models. Never raises."""
        if self._direct and _model_map_entry(self.config.model) is None:
            return 0.0  # a model litellm has no price for (a local server): no need to import it
        try:
            prompt_cost, completion_cost = _litellm().cost_per_token(
                model=self.config.model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
            return float(prompt_cost or 0.0) + float(completion_cost or 0.0)
        except Exception:  # noqa: BLE001
            return 0.0

    def _record(self, meter: UsageMeter | None, purpose: str, reply: _Reply, seconds: float,
                error: LLMError | None = None) -> None:
        if meter is not None:
            meter.add(CallUsage(purpose=purpose, model=self.config.model, prompt_tokens=reply.prompt_tokens,
                                completion_tokens=reply.completion_tokens, cost_usd=reply.cost_usd,
                                seconds=round(seconds, 4), cached=False,
                                error=None if error is None else error.code))

    def _record_failure(self, meter: UsageMeter | None, purpose: str, err: LLMError, seconds: float) -> None:
        """A failed attempt is a call too (it was sent, and may be billed): counted, with its error."""
        self._record(meter, purpose, _Reply(text=None, prompt_tokens=0, completion_tokens=0, cost_usd=0.0),
                     seconds, error=err)

    # -- deadline ---------------------------------------------------------------------------------

    def _deadline_error(self, attempts: int | None = None) -> LLMDeadlineError:
        tried = f"{attempts} attempts, " if attempts and attempts > 1 else ""
        return LLMDeadlineError(
            f"{self._where()} did not finish within the call deadline of {self._call_deadline():g} s "
            f"({tried}{self.config.model}; KAAS_CALL_DEADLINE)")

    # -- cache ------------------------------------------------------------------------------------

    def _key(self, kind: str, messages: list[Message], temperature: float, max_tokens: int | None,
             schema: dict[str, Any] | None = None) -> str | None:
        # Only deterministic requests are worth replaying.
        if self._cache is None or temperature != 0:
            return None
        return cache_key(kind=kind, model=self.config.model, api_base=self.config.api_base,
                         messages=messages, temperature=temperature, max_tokens=max_tokens, schema=schema)

    def _cache_get(self, key: str | None, messages: list[Message], *, purpose: str,
                   meter: UsageMeter | None, kind: str) -> str | None:
        if self._cache is None or key is None:
            return None
        cached = self._cache.get(key)
        if cached is None or not cached.text:
            return None
        self._record_hit(cached, messages, purpose=purpose, meter=meter, kind=kind)
        return as_text(cached.text)

    def _record_hit(self, cached: Any, messages: list[Message], *, purpose: str, meter: UsageMeter | None,
                    kind: str) -> None:
        if meter is not None:
            meter.add(CallUsage(purpose=purpose, model=self.config.model, prompt_tokens=cached.prompt_tokens,
                                completion_tokens=cached.completion_tokens, cost_usd=0.0, seconds=0.0,
                                cached=True))
        usage = _Reply(text=cached.text, prompt_tokens=cached.prompt_tokens,
                       completion_tokens=cached.completion_tokens, cost_usd=0.0)
        self._trace(kind=kind, purpose=purpose, shape=None, messages=messages, reply=cached.text, usage=usage,
                    cached=True, error=None, attempt=0, seconds=0.0)

    def _cache_put(self, key: str | None, reply: _Reply, text: str | None = None) -> None:
        if self._cache is None or key is None:
            return
        self._cache.put(key, text=text if text is not None else (reply.text or ""),
                        prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
                        model=self.config.model)

    # -- response_format memory -------------------------------------------------------------------

    def _shape_key(self) -> str:
        return f"{self.config.model}|{self.config.api_base or ''}"

    def _remembered_shape(self) -> str:
        if not self._shape_memory_loaded:
            self._shape_memory_loaded = True
            if self._capabilities_path is not None:
                shapes = self._read_capabilities(warn=True).get("response_format")
                if isinstance(shapes, dict):
                    self._shape_memory.update(
                        {k: v for k, v in shapes.items() if isinstance(v, str) and v in SHAPES})
        return self._shape_memory.get(self._shape_key(), SHAPE_JSON_SCHEMA)

    def _read_capabilities(self, *, warn: bool) -> dict:
        """What ``llm-capabilities.json`` remembers; {} when there is none, or when it is damaged
        (then, with ``warn``, one warning line naming it: each shape is found again by trying)."""
        try:
            data = read_state_json(self._capabilities_path, MAX_CAPABILITIES_BYTES)
            if data is not None and not isinstance(data, dict):
                raise DamagedFileError(f"a JSON {type(data).__name__}, not a table")
        except DamagedFileError as exc:
            if warn:
                log.warning("%s is damaged (%s); ignored", self._capabilities_path, exc)
            return {}
        return data or {}

    def _remember_shape(self, shape: str) -> None:
        key = self._shape_key()
        if self._shape_memory.get(key) == shape:
            return
        self._shape_memory[key] = shape
        if self._capabilities_path is None:
            return
        try:
            data = self._read_capabilities(warn=False)
            if not isinstance(data.get("response_format"), dict):
                data["response_format"] = {}
            data["response_format"][key] = shape
            write_state_bytes(self._capabilities_path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8"))
        except OSError as exc:
            log.warning("could not save %s (%s)", self._capabilities_path, exc)

    # -- trace --------------------------------------------------------------------------------------

    def _trace(self, *, kind: str, purpose: str, shape: str | None, messages: list[Message],
               reply: str | None, usage: _Reply | None, cached: bool, error: LLMError | None,
               attempt: int, seconds: float, note: str | None = None, max_tokens: int | None = None) -> None:
        path = self.config.trace_file
        if path is None:
            return
        record = {
            "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "purpose": purpose,
            "kind": kind,
            "model": self.config.model,
            "api_base": self.config.api_base,
            "response_format": shape,
            "max_tokens": max_tokens,
            "attempt": attempt,
            "messages": messages,
            "reply": reply,
            "usage": None if usage is None else {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "cost_usd": usage.cost_usd,
            },
            "finish_reason": None if usage is None else usage.finish_reason,
            "cached": cached,
            "seconds": round(seconds, 4),
            "error": None if error is None else {"code": error.code, "message": error.message},
        }
        if note:
            record["note"] = note
        try:
            with self._trace_lock:
                replaced = append_state_text(Path(path), json.dumps(record, ensure_ascii=False) + "\n")
            if replaced:
                log.warning("LLM trace %s was %s; started afresh", path, replaced)
        except OSError as exc:
            log.warning("could not write LLM trace %s (%s)", path, exc)


# ---------------------------------------------------------------------------------------------
# helpers


_TIMEOUT_NAMES = {"APITimeoutError", "ReadTimeout", "WriteTimeout", "ConnectTimeout", "PoolTimeout",
                  "TimeoutException", "ServerTimeoutError"}
_CONNECTION_NAMES = {"ConnectError", "ConnectionRefusedError", "ConnectionResetError", "ConnectionError",
                     "ClientConnectorError", "ClientConnectionError", "ServerDisconnectedError",
                     "RemoteProtocolError", "gaierror", "NetworkError"}
_BAD_REQUEST_NAMES = {"BadRequestError", "UnprocessableEntityError", "UnsupportedParamsError",
                      "InvalidRequestError", "LiteLLMUnknownProvider", "ContentPolicyViolationError",
                      "RejectedRequestError", "MalformedRequestFieldError", "UnsupportedEndpointError",
                      "EndpointNotSupportedByModelError"}
_SERVER_ERROR_NAMES = {"InternalServerError", "ServiceUnavailableError", "BadGatewayError",
                       "MidStreamFallbackError"}


def _direct_http_applies(config: GatewayConfig) -> bool:
    """openai/<model> at an api_base: an OpenAI-compatible server (see llm/openai_http.py)."""
    return config.direct_http and bool(config.api_base) and config.model.startswith("openai/")


# Request parameters every OpenAI-compatible chat-completions server takes.
_OPENAI_PARAMS = {"temperature", "max_tokens", "response_format", "stream", "stream_options"}


@functools.lru_cache(maxsize=1)
def _model_map() -> dict[str, Any]:
    """litellm's model map (context windows, prices), read from the JSON file litellm ships
    without importing litellm (~0.06 s instead of 7-15 s). Empty when it cannot be found."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("litellm")
        folder = Path(next(iter(spec.submodule_search_locations)))  # type: ignore[union-attr, arg-type]
        data = json.loads((folder / "model_prices_and_context_window_backup.json").read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 (no map: context window unknown, cost via litellm)
        return {}
    return data if isinstance(data, dict) else {}


def _model_map_entry(model: str) -> dict[str, Any] | None:
    table = _model_map()
    entry = table.get(model) or table.get(model.split("/", 1)[-1])
    return entry if isinstance(entry, dict) else None


def call_deadline(config: GatewayConfig) -> float:
    """Seconds one call may take in all: every attempt, the waits between them and a whole
    streamed reply included."""
    if config.call_deadline:
        return float(config.call_deadline)
    return 3.0 * float(config.timeout)


def _check_max_tokens(max_tokens: int) -> None:
    # Required by every call: without it a model can generate until its context is full.
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, not {max_tokens!r}")


def _exception_chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


_SHAPE_ERRORS = (TypeError, AttributeError, KeyError, IndexError)


def _unreadable_reply(chain: list[BaseException]) -> bool:
    """litellm failed to read what the server sent: it raised one of its own errors over a
    pydantic validation error or a type/attribute/key error met while building its response
    objects (content that is not text, a usage that is not a count, choices that are not a list)."""
    if not any((type(e).__module__ or "").startswith("litellm") for e in chain) or _is_connection_failure(chain):
        return False
    for e in chain:
        if type(e).__name__ == "ValidationError" and (type(e).__module__ or "").startswith("pydantic"):
            return True
        if isinstance(e, _SHAPE_ERRORS) or str(e).startswith("Invalid response object"):
            return True
    return False


def _is_connection_failure(chain: list[BaseException]) -> bool:
    # litellm reports "connection refused" as InternalServerError("Connection error."): the cause
    # chain (openai.APIConnectionError <- httpx.ConnectError <- ConnectionRefusedError) tells.
    for e in chain:
        name = type(e).__name__
        module = type(e).__module__ or ""
        if name in _CONNECTION_NAMES:
            return True
        if name == "APIConnectionError" and module.startswith("openai"):
            return True
    return False


def _root_cause(chain: list[BaseException]) -> str:
    for e in reversed(chain):
        if type(e).__module__.startswith("respx"):
            continue
        text = _one_line(e)
        if text:
            return text
    return "connection failed"


def _status_code(exc: BaseException) -> int | None:
    for value in (getattr(exc, "status_code", None), getattr(getattr(exc, "response", None), "status_code", None)):
        try:
            if value is not None:
                return int(value)
        except (TypeError, ValueError):
            continue
    return None


_PREFIX = re.compile(r"^\s*(?:litellm\.)?[A-Za-z]+(?:Error|Exception|Timeout)\s*:\s*")
_PROVIDER_PREFIX = re.compile(r"^\s*[A-Za-z]+Exception\s*-\s*")


def _one_line(exc: BaseException | str, limit: int = 300) -> str:
    """The useful first line of an exception message, without litellm's class-name prefixes."""
    text = exc if isinstance(exc, str) else str(getattr(exc, "message", None) or exc or type(exc).__name__)
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    for _ in range(4):
        stripped = _PROVIDER_PREFIX.sub("", _PREFIX.sub("", line))
        if stripped == line:
            break
        line = stripped
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    return line or type(exc).__name__


def _retry_after(exc: BaseException) -> float | None:
    """Seconds from a Retry-After header (seconds or HTTP date) on a litellm exception, if any."""
    candidates = (
        getattr(getattr(exc, "response", None), "headers", None),
        getattr(exc, "litellm_response_headers", None),
        getattr(exc, "headers", None),
    )
    for headers in candidates:
        if not headers:
            continue
        try:
            items = {str(k).lower(): str(v) for k, v in headers.items()}
        except Exception:  # noqa: BLE001
            continue
        if "retry-after-ms" in items:
            try:
                return max(0.0, float(items["retry-after-ms"]) / 1000.0)
            except ValueError:
                pass
        value = items.get("retry-after")
        if value is None:
            continue
        try:
            return max(0.0, float(value))
        except ValueError:
            pass
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            continue
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())
    return None


def _backoff(attempt: int) -> float:
    # Exponential with jitter, so parallel callers that failed together do not retry together.
    return min(BACKOFF_CAP, BACKOFF_BASE * (2 ** attempt)) * random.uniform(0.5, 1.0)


def _refuses_temperature(exc: BaseException) -> bool:
    """litellm refusing it client-side (o-series models), or the server saying so (400)."""
    text = str(exc).lower()
    if "temperature" not in text:
        return False
    return type(exc).__name__ == "UnsupportedParamsError" or (
        _status_code(exc) == 400 and ("unsupported" in text or "not support" in text))


_FORMAT_WORDS = ("response_format", "json_schema", "schema", "not supported", "unsupported")


def _rejects_response_format(exc: BaseException) -> bool:
    name = type(exc).__name__
    if name in ("ContextWindowExceededError", "ContentPolicyViolationError", "AuthenticationError"):
        return False
    status = _status_code(exc)
    text = str(exc).lower()
    # llama-cpp-python's server answers an unknown response_format type with a 500 carrying its
    # request-validation error ("loc: body.response_format.type ... Input should be ...").
    if "response_format" in text and ("validation error" in text or "input should be" in text):
        return True
    if not (name in ("BadRequestError", "UnprocessableEntityError", "UnsupportedParamsError")
            or status in (400, 422)):
        return False
    return status == 422 or any(word in text for word in _FORMAT_WORDS)


def _finish_reason(value: Any) -> str | None:
    """A finish reason is a word; anything else a server sends there is no finish reason."""
    return value if isinstance(value, str) and value else None


def model_unanswered(err: BaseException) -> bool:
    """The model did not answer the call at all: a timeout, the call deadline, a connection that
    could not be made, or the circuit breaker (which stands for those). A reply of any kind — an
    error status, bad output, a cut-off — is an answer."""
    return isinstance(err, (LLMTimeoutError, LLMUnreachableError))


def _mark_down(meter: UsageMeter | None, err: LLMError) -> None:
    if meter is not None and meter.model_down is None:
        meter.model_down = err.message


def _pieces(text: str, size: int = 200) -> list[str]:
    """A cached reply replayed as a few chunks, so stream consumers see a normal stream."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


async def _aclose_quietly(response: Any) -> None:
    close = getattr(response, "aclose", None)
    if close is None:
        return
    try:
        await close()
    except Exception:  # noqa: BLE001 (closing an abandoned stream must not mask the real outcome)
        pass


# -- structured output -------------------------------------------------------------------------


def _schema_instruction(schema: dict[str, Any]) -> str:
    what = "a JSON object" if schema.get("type") == "object" else "JSON"
    return (f"Answer with only {what} matching this JSON schema, with no prose and no code fences:\n"
            + json.dumps(schema, ensure_ascii=False))


def _shape_request(messages: list[Message], schema: dict[str, Any], schema_name: str,
                   shape: str) -> tuple[list[Message], dict[str, Any] | None]:
    if shape == SHAPE_JSON_SCHEMA:
        return messages, {"type": "json_schema",
                          "json_schema": {"name": _safe_schema_name(schema_name), "schema": schema,
                                          "strict": False}}
    if shape == SHAPE_JSON_OBJECT:
        return messages, {"type": "json_object", "schema": schema}
    # Instruction only: copy, never mutate the caller's messages.
    copied = [dict(m) for m in messages]
    instruction = _schema_instruction(schema)
    if copied and copied[-1].get("role") == "user":
        copied[-1]["content"] = f"{copied[-1].get('content') or ''}\n\n{instruction}"
    else:
        copied.append({"role": "user", "content": instruction})
    return copied, None


def _safe_schema_name(name: str) -> str:
    # OpenAI requires ^[a-zA-Z0-9_-]{1,64}$.
    return (re.sub(r"[^A-Za-z0-9_-]", "_", name) or "output")[:64]


def _repair_instruction(problem: str, schema: dict[str, Any]) -> str:
    return (f"Your previous reply was not valid: {problem}. Answer again with only valid JSON matching "
            "this JSON schema, with no prose and no code fences:\n" + json.dumps(schema, ensure_ascii=False))


def _validator(schema: dict[str, Any]) -> Any:
    # check_schema costs 14-21 ms a call (measured in the compile benchmark); schemas repeat.
    return _validator_for_text(json.dumps(schema, sort_keys=True))


@functools.lru_cache(maxsize=64)
def _validator_for_text(schema_text: str) -> Any:
    import jsonschema  # noqa: PLC0415 (kept off the import path of offline mode)

    schema = json.loads(schema_text)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"invalid JSON schema: {exc.message}") from None  # a bug in kaas, not the model
    return cls(schema)


_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


# strict=False: control characters (a literal newline, a tab) inside strings are accepted, as
# every lenient JSON parser does. Models write them, and llama.cpp's grammar for JSON strings
# allows them, so a Markdown article body in a string would otherwise never parse.
_DECODER = json.JSONDecoder(strict=False)


def _drop_think(text: str) -> str:
    """``text`` without its ``<think>...</think>`` blocks. Each search starts where the last one
    ended, and the first ``<think>`` without a ``</think>`` after it ends the search: a reply of
    many unclosed ``<think>`` is read once, not once per ``<think>``."""
    kept: list[str] = []
    position = 0
    while (opened := _THINK_OPEN.search(text, position)) is not None:
        closed = _THINK_CLOSE.search(text, opened.end())
        if closed is None:
            break
        kept.append(text[position:opened.start()])
        position = closed.end()
    kept.append(text[position:])
    return "".join(kept)


def parse_json_reply(text: str) -> Any:
    """Parse a model's JSON reply robustly: drop <think> blocks and ``` fences, accept control
    characters inside strings, and take the first {...} or [...] block when prose surrounds it.
    Raises ValueError naming the real parse error: the one that got furthest into the JSON."""
    cleaned = _drop_think(text or "").strip()
    if not cleaned:
        raise ValueError("the reply was empty")
    fenced = _FENCE.search(cleaned)
    candidates = [fenced.group(1).strip()] if fenced else []
    candidates.append(cleaned)
    best: json.JSONDecodeError | None = None
    best_depth = -1
    for candidate in candidates:
        starts = [0] + sorted(i for i in (candidate.find("{"), candidate.find("[")) if i > 0)
        for start in starts:
            try:
                value, end = _decoded(candidate, start)
            except RecursionError:  # valid JSON nested past Python's stack: no schema wants that
                raise ValueError("the reply is nested too deeply") from None
            except json.JSONDecodeError as exc:
                # The attempt that read furthest is where the JSON really broke; an attempt that
                # failed at its first character (prose before the JSON) says nothing about it.
                if exc.pos - start > best_depth:
                    best, best_depth = exc, exc.pos - start
                continue
            if start == 0 and candidate[end:].strip() and not isinstance(value, (dict, list)):
                continue  # a number or word leading prose ("2 pages: {...}"): look for the JSON
            return value
    if best is None:
        raise ValueError("no JSON found in the reply")
    raise _parse_error(best)


def _decoded(candidate: str, start: int) -> tuple[Any, int]:
    """The JSON value at ``start`` of ``candidate`` and where it ends, its strings made text (a
    ``"\\ud83d"`` escape, half an emoji, is valid JSON but not text: it becomes U+FFFD)."""
    value, end = _DECODER.raw_decode(candidate, start)
    return clean_json(value), end


def _parse_error(exc: json.JSONDecodeError) -> ValueError:
    doc, pos = exc.doc, exc.pos
    near = doc[max(0, pos - 30):pos + 30].replace("\n", "\\n")
    end = "" if pos < len(doc) else " (the reply ends there: it was cut short)"
    return ValueError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}{end}, near {near!r}")


def _parse_and_validate(text: str, validator: Any) -> tuple[Any, str | None]:
    """(value, None) when ``text`` holds JSON valid for the schema, else (None, what was wrong)."""
    try:
        value = parse_json_reply(text)
    except ValueError as exc:
        return None, str(exc)
    errors = sorted(validator.iter_errors(value), key=lambda e: (len(list(e.absolute_path)), e.message))
    if errors:
        import jsonschema  # noqa: PLC0415

        best = jsonschema.exceptions.best_match(errors) or errors[0]
        where = "/".join(str(p) for p in best.absolute_path) or "(root)"
        message = best.message if len(best.message) <= 200 else best.message[:199] + "…"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return None, f"schema mismatch at {where}: {message}{more}"
    return value, None
