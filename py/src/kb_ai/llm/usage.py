"""Usage and cost per LLM call and per request."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class CallUsage:
    """One model call attempt (or one cache hit, with ``cached=True``, which costs nothing).

    A failed attempt (an error status, a timeout, a refused request) is a call too: ``error``
    holds its error code; its tokens are what the server reported, usually none."""

    purpose: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    seconds: float
    cached: bool = False
    error: str | None = None
    # A response-format probe: the server refused the shape of structured output asked for,
    # and the gateway asks again in the next shape (``LLMGateway._probe_shapes``). Sent, not failed.
    probe: bool = False
    cached_prompt_tokens: int = 0  # of prompt_tokens, served from the provider's prompt cache (as reported)


@dataclass
class UsageMeter:
    """Collects the calls of one request (an ask, a compile stage). Thread-safe."""

    calls: list[CallUsage] = field(default_factory=list)
    # Why the model did not answer a call of this request (a timeout, the call deadline, an
    # unreachable server, the circuit breaker), set by the gateway; None while it answers. An
    # ask stops asking it then: the rest of the answer is made without it.
    model_down: str | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, call: CallUsage) -> None:
        with self._lock:
            self.calls.append(call)

    @property
    def llm_calls(self) -> int:
        """Every request sent to a model, failed ones included."""
        return sum(1 for c in self.calls if not c.cached)

    @property
    def failed_calls(self) -> int:
        """Attempts that failed; response-format probes are not failures (``probes``)."""
        return sum(1 for c in self.calls if not c.cached and c.error is not None and not c.probe)

    @property
    def probes(self) -> int:
        """Requests the server refused for their response_format shape, asked again in the next."""
        return sum(1 for c in self.calls if c.probe)

    @property
    def cache_hits(self) -> int:
        return sum(1 for c in self.calls if c.cached)

    @property
    def prompt_tokens(self) -> int:
        return sum(c.prompt_tokens for c in self.calls if not c.cached)

    @property
    def cached_prompt_tokens(self) -> int:
        return sum(c.cached_prompt_tokens for c in self.calls if not c.cached)

    @property
    def completion_tokens(self) -> int:
        return sum(c.completion_tokens for c in self.calls if not c.cached)

    @property
    def cost_usd(self) -> float:
        return round(sum(c.cost_usd for c in self.calls if not c.cached), 8)

    def summary(self, mode: str) -> dict:
        """The ``usage`` object of the API, the CLI's --json and the SSE ``usage`` event."""
        return {
            "llm_calls": self.llm_calls,
            "failed_calls": self.failed_calls,
            "probes": self.probes,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "cost_usd": self.cost_usd,
            "cache_hits": self.cache_hits,
            "mode": mode,
            "calls": [asdict(c) for c in self.calls],
        }
