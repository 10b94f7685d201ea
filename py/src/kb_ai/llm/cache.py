"""A content-addressed cache of model replies, on disk.

Only deterministic requests (temperature 0) are cached, by the gateway. The key is the sha256 of
the canonical JSON of everything that shapes the reply: model, api_base, messages, temperature,
max_tokens, the JSON schema asked for (not the ``response_format`` shape used to send it, which
depends on what the server accepts) and the kind of call (``text``, ``json``, ``stream``).

One small JSON file per entry, ``<dir>/ab/<hash>.json``, written atomically, so concurrent
writers (two CLI processes, the HTTP server) never leave a half-written file. An entry that is
not a regular file of cached JSON (a folder, a FIFO, a link to a device or a huge file, garbage)
is a miss with a one-line warning, never waited on; the next successful call replaces it. Each
entry names the key it was written for, and a hit must name the key looked up: an entry copied or
renamed under another request's name (the reply to a prompt made from pages another reader may
see) is a damaged entry, a miss, never that request's reply. litellm's own ``Cache`` is not
used: it crashes on a hit without its proxy extras (see DESIGN.md, "Known traps").
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kb_ai.files import DamagedFileError, read_state_json, write_state_bytes

log = logging.getLogger(__name__)

CACHE_FORMAT = 2  # bump to invalidate every entry when the key or value layout changes (2: entries name their key)
MAX_ENTRY_BYTES = 64 << 20  # a reply is bounded by max_tokens: far below this


@dataclass(frozen=True)
class CachedReply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    model: str
    created: float


def cache_key(*, kind: str, model: str, api_base: str | None, messages: list[dict[str, Any]],
              temperature: float, max_tokens: int | None, schema: dict[str, Any] | None = None) -> str:
    """The sha256 hex digest of the canonical JSON of a request's reply-shaping parts."""
    payload = {
        "v": CACHE_FORMAT,
        "kind": kind,
        "model": model,
        "api_base": api_base,
        "messages": messages,
        "temperature": float(temperature),
        "max_tokens": max_tokens,
        "schema": schema,
    }
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ResponseCache:
    """Reply cache in ``directory``. Never raises on I/O trouble: a cache must not break a call."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    def path_for(self, key: str) -> Path:
        # Two-character fan-out keeps folders small on file systems that dislike huge directories.
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> CachedReply | None:
        """The cached reply for ``key``, or None on a miss (including an unreadable or corrupt file)."""
        path = self.path_for(key)
        try:
            data = read_state_json(path, MAX_ENTRY_BYTES)
            if data is None:
                return None
            if not isinstance(data, dict) or not isinstance(data.get("text"), str):
                raise DamagedFileError("not a cached reply")
            if data.get("key") != key:
                raise DamagedFileError("the entry of another request")
            return CachedReply(
                text=data["text"],
                prompt_tokens=int(data.get("prompt_tokens") or 0),
                completion_tokens=int(data.get("completion_tokens") or 0),
                model=str(data.get("model") or ""),
                created=float(data.get("created") or 0.0),
            )
        except (DamagedFileError, ValueError, TypeError, OverflowError) as exc:
            log.warning("ignoring damaged LLM cache entry %s (%s)", path, exc)
            return None

    def put(self, key: str, *, text: str, prompt_tokens: int, completion_tokens: int, model: str) -> None:
        """Store a reply (atomically; replaces a corrupt entry). Errors are logged, not raised."""
        record = {
            "key": key,
            "text": text,
            "prompt_tokens": int(prompt_tokens),
            "completion_tokens": int(completion_tokens),
            "model": model,
            "created": time.time(),
        }
        try:
            write_state_bytes(self.path_for(key), json.dumps(record, ensure_ascii=False).encode("utf-8"))
        except OSError as exc:
            log.warning("could not write LLM cache entry in %s (%s)", self.directory, exc)
