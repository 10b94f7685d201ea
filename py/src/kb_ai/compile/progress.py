"""A one-line progress bar on stderr, drawn only when stderr is a terminal; and, for the
server's Compile button, the same stages and counts as events to a ``listener``."""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO

from kb_ai.untrusted_text import terminal_safe

BAR_WIDTH = 24
REDRAW_SECONDS = 0.1


class Progress:
    """``start(stage, total)``, ``advance(label)`` per unit, ``done()`` at the end of a stage."""

    def __init__(self, enabled: bool | None = None, stream: TextIO | None = None,
                 listener: Callable[[dict], None] | None = None):
        """``listener`` gets ``{"stage", "count", "total", "in_flight"}`` at each stage's start, at
        most every ``REDRAW_SECONDS`` while it advances (and at its last unit), and ``{"stage",
        "done": True}`` at its end (``in_flight``: model calls the model is working on now, 0
        offline). It must not raise and must be quick (the compile waits for it)."""
        self.listener = listener
        self._told = 0.0
        self.stream = stream or sys.stderr
        if enabled is None:
            enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled
        self.stage = ""
        self.total = 0
        self.count = 0
        self._last = 0.0
        self._width = 0
        # Model calls in flight now (the gateway's ``in_flight``), shown while a stage runs.
        self.in_flight: Callable[[], int] | None = None
        self._label = ""
        self._told_flying = 0

    def start(self, stage: str, total: int) -> None:
        self.stage, self.total, self.count = stage, total, 0
        self._tell(force=True)
        self._draw("", force=True)

    def advance(self, label: str = "", step: int = 1) -> None:
        self.count += step
        self._tell()
        self._draw(label)

    def _tell(self, force: bool = False) -> None:
        if self.listener is None:
            return
        now = time.monotonic()
        if force or now - self._told >= REDRAW_SECONDS or self.count >= self.total:
            self._told = now
            self._told_flying = self.calls_in_flight()
            self.listener({"stage": self.stage, "count": self.count, "total": self.total,
                           "in_flight": self._told_flying})

    def refresh(self) -> None:
        """Between units: redraw the line, and tell the listener when the calls in flight
        changed since it was last told (a stage waiting on a slow model may not advance for a
        long time; the plan stage advances only once a wave's calls are all back)."""
        if not self.stage:
            return
        if self.calls_in_flight() != self._told_flying:
            self._tell(force=True)
        self._draw(self._label)

    def calls_in_flight(self) -> int:
        """Model calls in flight now (0 when no model is used)."""
        return self.in_flight() if self.in_flight is not None else 0

    def done(self) -> None:
        if self.listener is not None and self.stage:
            self.listener({"stage": self.stage, "count": self.count, "total": self.total, "in_flight": 0,
                           "done": True})
        self.stage = ""  # between stages: nothing for ``refresh`` to draw
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def _draw(self, label: str, force: bool = False) -> None:
        if not self.enabled:
            return
        self._label = label
        now = time.monotonic()
        if not force and now - self._last < REDRAW_SECONDS and self.count < self.total:
            return
        self._last = now
        total = max(self.total, 1)
        filled = int(BAR_WIDTH * min(self.count, total) / total)
        # The label is a source's file name: anything in it that could act on the terminal goes.
        flying = self.calls_in_flight()
        calls = f" ({flying} call{'' if flying == 1 else 's'} in flight)" if flying else ""
        line = f"{self.stage:<7} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {self.count}/{self.total}{calls} {terminal_safe(label)}"
        line = line[:100]
        pad = max(0, self._width - len(line))
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()
        self._width = len(line)
