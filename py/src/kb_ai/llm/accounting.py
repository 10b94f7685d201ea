"""The gateway's books: what each attempt cost (``UsageMeter``), the response cache and the trace.

Every call attempt, failed ones included (it was sent, and may be billed), and every cache hit
adds a ``CallUsage`` to the request's meter and, with a trace file, a line to the trace.
Temperature-0 calls are cached on disk (``cache.py``); only what the gateway accepted is put there.
"""

from __future__ import annotations

import asyncio

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kb_ai.errors import LLMError
from kb_ai.llm.cache import ResponseCache, cache_key
from kb_ai.llm.config import GatewayConfig
from kb_ai.llm.replies import Usage, usage_numbers
from kb_ai.llm.trace import Exchange, Tracer
from kb_ai.llm.usage import CallUsage, UsageMeter

Message = dict[str, str]


@dataclass
class Outcome:
    """One successful model response, as the gateway accounts for it."""

    text: str | None
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    finish_reason: str | None = None
    over_limit: bool = False  # longer than a reply of max_tokens may be: cut there, never cached
    cached_prompt_tokens: int = 0  # of prompt_tokens, served from the server's prompt cache (as it reported)


NOTHING = Outcome(text=None, prompt_tokens=0, completion_tokens=0, cost_usd=0.0)


class Books:
    def __init__(self, config: GatewayConfig, *, cost: Callable[[int, int], float],
                 clock: Callable[[], float]):
        self.model = config.model
        self.api_base = config.api_base
        self._cost = cost
        self._clock = clock
        self._cache = ResponseCache(config.cache_dir) if config.cache_dir else None
        self._tracer = Tracer(config.trace_file and Path(config.trace_file), model=config.model,
                              api_base=config.api_base)

    def outcome(self, text: str | None, usage: Usage | None, messages: list[Message], *,
                finish_reason: str | None = None, over_limit: bool = False) -> Outcome:
        """A reply with its tokens (as reported, or estimated) and their cost."""
        prompt_tokens, completion_tokens = usage_numbers(usage, messages, text or "")
        return Outcome(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                       cost_usd=self._cost(prompt_tokens, completion_tokens), finish_reason=finish_reason,
                       over_limit=over_limit, cached_prompt_tokens=(usage.cached_tokens if usage else None) or 0)

    def answered(self, exchange: Exchange, meter: UsageMeter | None, reply: Outcome, started: float,
                 attempt: int, *, error: LLMError | None = None, note: str | None = None,
                 traced: str | None = None) -> None:
        """An attempt that got a reply (all of it, or part of a stream): ``traced`` is the reply
        text the trace shows when it is not ``reply.text``."""
        seconds = self._clock() - started
        self._record(meter, exchange.purpose, reply, seconds, error=error)
        self._tracer.write(exchange, reply=reply.text if traced is None else traced, usage=reply, cached=False,
                           error=error, attempt=attempt, seconds=seconds, note=note)

    def failed(self, exchange: Exchange, meter: UsageMeter | None, err: LLMError, started: float,
               attempt: int, *, probe: bool = False) -> None:
        """An attempt that failed: counted, with its error (``probe``: a response_format shape the
        server refused, counted as a probe, not a failure)."""
        seconds = self._clock() - started
        self._record(meter, exchange.purpose, NOTHING, seconds, error=err, probe=probe)
        self._tracer.write(exchange, reply=None, usage=None, cached=False, error=err, attempt=attempt,
                           seconds=seconds)

    def _record(self, meter: UsageMeter | None, purpose: str, reply: Outcome, seconds: float,
                error: LLMError | None = None, probe: bool = False) -> None:
        if meter is not None:
            meter.add(CallUsage(purpose=purpose, model=self.model, prompt_tokens=reply.prompt_tokens,
                                completion_tokens=reply.completion_tokens, cost_usd=reply.cost_usd,
                                seconds=round(seconds, 4), cached=False,
                                error=None if error is None else error.code, probe=probe,
                                cached_prompt_tokens=reply.cached_prompt_tokens))

    # -- cache ------------------------------------------------------------------------------------

    def key(self, kind: str, messages: list[Message], temperature: float, max_tokens: int | None,
            schema: dict[str, Any] | None = None) -> str | None:
        """The cache key of a request; None when it is not cached. Only deterministic requests
        are worth replaying."""
        if self._cache is None or temperature != 0:
            return None
        return cache_key(kind=kind, model=self.model, api_base=self.api_base, messages=messages,
                         temperature=temperature, max_tokens=max_tokens, schema=schema)

    def cached(self, key: str | None) -> Any:
        """The cache entry under ``key``; None when there is none (or no cache)."""
        if self._cache is None or key is None:
            return None
        return self._cache.get(key)

    async def fetch(self, key: str | None) -> Any:
        """``cached`` for async callers: the disk read runs in a worker thread, never on the event
        loop; a request that is not cached (no key) costs no thread at all."""
        return None if key is None else await asyncio.to_thread(self.cached, key)

    async def store(self, key: str | None, reply: Outcome, text: str | None = None) -> None:
        """``put`` for async callers: the durable write runs in a worker thread (nothing without a key)."""
        if key is not None:
            await asyncio.to_thread(self.put, key, reply, text)

    def hit(self, cached: Any, messages: list[Message], *, purpose: str, meter: UsageMeter | None,
            kind: str) -> None:
        """A reply served from the cache: counted (free), traced."""
        if meter is not None:
            meter.add(CallUsage(purpose=purpose, model=self.model, prompt_tokens=cached.prompt_tokens,
                                completion_tokens=cached.completion_tokens, cost_usd=0.0, seconds=0.0,
                                cached=True))
        usage = Outcome(text=cached.text, prompt_tokens=cached.prompt_tokens,
                        completion_tokens=cached.completion_tokens, cost_usd=0.0)
        self._tracer.write(Exchange(kind, purpose, messages), reply=cached.text, usage=usage, cached=True,
                           error=None, attempt=0, seconds=0.0)

    def put(self, key: str | None, reply: Outcome, text: str | None = None) -> None:
        if self._cache is None or key is None:
            return
        self._cache.put(key, text=text if text is not None else (reply.text or ""),
                        prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
                        model=self.model)
