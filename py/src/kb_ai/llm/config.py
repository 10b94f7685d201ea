"""The gateway's configuration, as the settings and a knowledge base give it."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from kb_ai.config import Settings

# Model calls in flight for one compile or CLI process when ``concurrency`` is not set, by the
# kind of model server (docs/benchmarks.md, "Compile throughput at 1,000 sources"): a hosted API
# serves many calls at once, and a compile against a slow one is bound by how many it has out
# (1,000 sources, 1 s calls: 16 took 0.42x the wall time of 4; 64 took 0.75x of 16, all of it in
# the write stage, since planning proposes 8 sources at a time, for four times the request and
# token rate a provider's rate limits see). A server on the user's own machine or network (Ollama,
# llama.cpp, LM Studio) works on 1-4 calls at once and queues the rest: more calls in flight buy
# nothing there, and a queued call waits against ``timeout`` (with 4 out on a one-slot server, a
# call that takes a quarter of the timeout already times out).
HOSTED_CONCURRENCY = 16
LOCAL_CONCURRENCY = 2
# litellm providers that are such a local server whatever their address (vLLM batches many
# calls at once: it counts as hosted unless it is on a local address).
LOCAL_PROVIDERS = frozenset({"ollama", "ollama_chat", "lm_studio", "llamafile", "oobabooga", "xinference"})


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
    stream_concurrency: int | None = None  # streamed replies in flight, within ``concurrency`` (a server); None: no own limit
    cache_dir: Path | None = None  # None: no response cache
    trace_file: Path | None = None  # JSONL of every prompt and raw reply, when set
    # Talk to OpenAI-compatible servers (openai/<model> + api_base) over httpx directly instead
    # of through litellm (llm/transports/openai_http.py). False: always litellm.
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
        concurrency=call_concurrency(settings, model),
        stream_concurrency=settings.stream_concurrency,
        cache_dir=(state_dir / "cache" / "llm") if settings.cache else None,
        trace_file=(state_dir / "logs" / "llm-trace.jsonl") if settings.debug else None,
        direct_http=settings.direct_http,
    )


def call_deadline(config: GatewayConfig) -> float:
    """Seconds one call may take in all: every attempt, the waits between them and a whole
    streamed reply included."""
    if config.call_deadline:
        return float(config.call_deadline)
    return 3.0 * float(config.timeout)


# The slowest model a streamed long call is given time for, prompt read and reply written: a 0.5B
# model on one shared core read a prompt at ~7 and wrote ~5 tokens a second (docs/benchmarks.md, "Model-path compile checks"); progress itself is
# watched chunk by chunk (``timeout`` without one closes the stream).
STREAM_MIN_TOKENS_PER_SECOND = 4.0


def stream_deadline(config: GatewayConfig, max_tokens: int, prompt_tokens: int = 0) -> float:
    """Seconds a streamed long call (``complete_json(stream=True)``) may take in all: the
    ``call_deadline`` setting when one is set, else enough to read ``prompt_tokens`` and write
    ``max_tokens`` at ``STREAM_MIN_TOKENS_PER_SECOND`` (never less than the default ``call_deadline``)."""
    if config.call_deadline:
        return float(config.call_deadline)
    work = (max_tokens + prompt_tokens) / STREAM_MIN_TOKENS_PER_SECOND
    return max(call_deadline(config), work + float(config.timeout))


def provider_kind(model: str, api_base: str | None) -> str:
    """``"local"`` for a model server on the user's own machine or network (a local provider
    such as ``ollama/...``, or an ``api_base`` on localhost, a ``.local`` name, or a loopback,
    private or link-local address); ``"hosted"`` otherwise."""
    provider = model.split("/", 1)[0].lower() if "/" in model else ""
    if provider in LOCAL_PROVIDERS:
        return "local"
    try:
        host = (urlsplit(api_base).hostname or "") if api_base else ""
    except ValueError:
        host = ""
    if host == "localhost" or host.endswith((".localhost", ".local")):
        return "local"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "hosted"  # a name: not resolved here (no lookup to pick a default)
    return "hosted" if address.is_global else "local"


def call_concurrency(settings: Settings, model: str | None) -> int:
    """Model calls in flight for one compile or CLI process: ``settings.concurrency`` when set,
    else the default for ``model``'s provider kind."""
    if settings.concurrency is not None:
        return settings.concurrency
    if provider_kind(model or "", settings.api_base) == "local":
        return LOCAL_CONCURRENCY
    return HOSTED_CONCURRENCY
