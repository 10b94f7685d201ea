"""The gateway's configuration, as the settings and a knowledge base give it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kb_ai.config import Settings


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
        concurrency=settings.concurrency,
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
