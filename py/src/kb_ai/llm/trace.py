"""The gateway's debug trace: with ``trace_file`` set (``kaas --debug``), every request and raw
reply is appended as one JSON line, to see why the model chose what it chose.

The line is written where the attempt ends, on the caller's thread (in the server: the event
loop), on purpose: the trace is a debugging switch, off unless asked for, and one appended line
per model call (a call that took seconds) keeps the trace in the order things happened and
complete when the process is killed, which a writer thread or queue would not. With the trace
off, nothing here runs. ``llm-capabilities.json`` (``structured.ShapeMemory``) is likewise read
once per process and written only when a server turns out to need another response format."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kb_ai.errors import LLMError
from kb_ai.files import append_state_text

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Exchange:
    """What one attempt sent and got, for the trace."""

    kind: str  # text, json, json-repair, stream
    purpose: str
    messages: list[dict[str, str]]
    shape: str | None = None  # the response_format shape of a JSON call
    max_tokens: int | None = None


class Tracer:
    def __init__(self, path: Path | None, *, model: str, api_base: str | None):
        self.path = None if path is None else Path(path)
        self.model = model
        self.api_base = api_base
        self._lock = threading.Lock()

    def write(self, exchange: Exchange, *, reply: str | None, usage: Any, cached: bool,
              error: LLMError | None, attempt: int, seconds: float, note: str | None = None) -> None:
        """One line for one attempt (or cache hit). ``usage`` has ``prompt_tokens``,
        ``completion_tokens``, ``cost_usd`` and ``finish_reason``, or is None."""
        if self.path is None:
            return
        record = {
            "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "purpose": exchange.purpose,
            "kind": exchange.kind,
            "model": self.model,
            "api_base": self.api_base,
            "response_format": exchange.shape,
            "max_tokens": exchange.max_tokens,
            "attempt": attempt,
            "messages": exchange.messages,
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
            with self._lock:
                replaced = append_state_text(self.path, json.dumps(record, ensure_ascii=False) + "\n")
            if replaced:
                log.warning("LLM trace %s was %s; started afresh", self.path, replaced)
        except OSError as exc:
            log.warning("could not write LLM trace %s (%s)", self.path, exc)
