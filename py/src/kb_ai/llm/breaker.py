"""A circuit breaker: after a few consecutive calls that the model did not answer, stop calling it.

A server that accepts connections and never answers costs every call its whole deadline. A
compile of 1,000 sources would pay that 1,000 times, an HTTP server every question. So the
gateway counts *calls* (each with all its attempts) that failed because the model did not
answer — a timeout, the call deadline, a connection that could not be made — and after
``threshold`` of them in a row treats the model as down: calls fail at once with
``LLMModelDownError`` (code ``llm_unreachable``) until ``cooldown`` seconds have passed. Then one
call is let through as a probe; if the model answers it (with anything: a reply, an error
status, bad output), the breaker closes; if not, it stays open for another cool-down.

One breaker per gateway: per configured model, per process (a CLI run, a server). Thread-safe:
a gateway serves several event loops.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from kb_ai.errors import LLMModelDownError


@dataclass(frozen=True)
class Admission:
    probe: bool = False  # the one call let through after a cool-down


class CircuitBreaker:
    def __init__(self, threshold: int, cooldown: float, *, where: str = "the model",
                 clock: Callable[[], float] = time.monotonic):
        self.threshold = max(0, int(threshold))  # 0: never open
        self.cooldown = max(0.0, float(cooldown))
        self.where = where
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._last = ""
        self._opened_at: float | None = None
        self._probing = False

    @property
    def open(self) -> bool:
        with self._lock:
            return self._opened_at is not None

    def admit(self) -> Admission:
        """Let a call through, or raise LLMModelDownError while the model is treated as down."""
        with self._lock:
            if self._opened_at is None:
                return Admission()
            waited = self._clock() - self._opened_at
            if waited >= self.cooldown and not self._probing:
                self._probing = True
                return Admission(probe=True)
            left = max(0.0, self.cooldown - waited)
            raise LLMModelDownError(
                f"{self.where} is treated as down: {self._failures} calls in a row got no answer "
                f"(last: {self._last}); calls fail at once for {left:.0f} s more "
                "(KAAS_BREAKER_FAILURES, KAAS_BREAKER_COOLDOWN)")

    def settle(self, admission: Admission, *, answered: bool | None, reason: str = "") -> None:
        """The outcome of an admitted call: the model answered (True), did not (False), or the
        call was abandoned before either was known (None)."""
        if self.threshold == 0:
            return
        with self._lock:
            if admission.probe:
                self._probing = False
            if answered is None:
                return
            if answered:
                self._failures, self._opened_at = 0, None
                return
            self._failures += 1
            self._last = reason
            if admission.probe or self._failures >= self.threshold:
                self._opened_at = self._clock()
