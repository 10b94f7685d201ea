"""Usage and cost per LLM call and per request."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class CallUsage:
    """One model call (or one cache hit, with ``cached=True``, which costs nothing)."""

    purpose: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    seconds: float
    cached: bool = False


@dataclass
class UsageMeter:
    """Collects the calls of one request (an ask, a compile stage). Thread-safe."""

    calls: list[CallUsage] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def add(self, call: CallUsage) -> None:
        with self._lock:
            self.calls.append(call)

    @property
    def llm_calls(self) -> int:
        return sum(1 for c in self.calls if not c.cached)

    @property
    def cache_hits(self) -> int:
        return sum(1 for c in self.calls if c.cached)

    @property
    def prompt_tokens(self) -> int:
        return sum(c.prompt_tokens for c in self.calls if not c.cached)

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
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "cache_hits": self.cache_hits,
            "mode": mode,
            "calls": [asdict(c) for c in self.calls],
        }
