"""The model's context window, for the selection budget: what litellm's model map knows, else
the ``context_window`` setting (kaas.toml, ``KAAS_CONTEXT_WINDOW``), else what the server says.

A local OpenAI-compatible server (``openai/<alias>`` with an ``api_base``) is unknown to litellm,
and most of them report their context: llama.cpp's ``GET /props``
(``default_generation_settings.n_ctx``, or ``n_ctx``), vLLM's ``GET /v1/models``
(``data[].max_model_len``; llama.cpp's ``meta.n_ctx_train`` there too), Ollama's
``POST /api/show`` (``model_info["<arch>.context_length"]``, or ``num_ctx`` in its parameters).
``probe_context_window`` asks them in that order, each with a short timeout, once per process
and server (``ContextWindows``); a server that answers none of them gives None, and the caller
says which budget it used instead.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

import httpx

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 3.0  # seconds for each of the probes: a server that knows answers at once
MAX_PROBE_BYTES = 1_000_000
_NUM_CTX = re.compile(r"\bnum_ctx\s+(\d+)")


@dataclass(frozen=True)
class Window:
    tokens: int | None
    source: str  # "model map" | "setting" | "server (<endpoint>)" | "unknown"


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _from_props(body: Any) -> int | None:
    if not isinstance(body, dict):
        return None
    settings = body.get("default_generation_settings")
    return _positive(settings.get("n_ctx")) if isinstance(settings, dict) and "n_ctx" in settings \
        else _positive(body.get("n_ctx"))


def _from_models(body: Any, model: str) -> int | None:
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    entries = [d for d in data if isinstance(d, dict)]
    entries.sort(key=lambda d: d.get("id") != model)  # the model asked for first, then any
    for entry in entries:
        meta = entry.get("meta") if isinstance(entry.get("meta"), dict) else {}
        found = _positive(entry.get("max_model_len")) or _positive(meta.get("n_ctx")) or _positive(meta.get("n_ctx_train"))
        if found:
            return found
    return None


def _from_show(body: Any) -> int | None:
    if not isinstance(body, dict):
        return None
    params = body.get("parameters")
    if isinstance(params, str) and (match := _NUM_CTX.search(params)):
        return int(match.group(1))
    info = body.get("model_info")
    if isinstance(info, dict):
        for key, value in info.items():
            if isinstance(key, str) and key.endswith(".context_length") and _positive(value):
                return value
    return None


def _root(api_base: str) -> str:
    base = api_base.rstrip("/")
    return base[:-3] if base.endswith("/v1") else base


async def probe_context_window(api_base: str, model: str, api_key: str | None = None) -> tuple[int | None, str]:
    """(tokens, endpoint) the server at ``api_base`` reports for ``model``; (None, "") when none
    of the probes answers with a context size. Never raises."""
    name = model.split("/", 1)[1] if "/" in model else model
    root = _root(api_base)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key and api_key != "none" else {}
    probes = (("GET", f"{root}/props", None, _from_props),
              ("GET", f"{api_base.rstrip('/')}/models", None, lambda b: _from_models(b, name)),
              ("POST", f"{root}/api/show", {"model": name}, _from_show))
    try:
        async with httpx.AsyncClient(timeout=PROBE_TIMEOUT, headers=headers, follow_redirects=False) as client:
            for method, url, body, read in probes:
                try:
                    response = await client.request(method, url, json=body)
                    if response.status_code != 200 or len(response.content) > MAX_PROBE_BYTES:
                        continue
                    found = read(response.json())
                except Exception as exc:  # noqa: BLE001 (a probe: any failure means "not known here")
                    log.debug("context window probe %s failed: %s", url, exc)
                    continue
                if found:
                    return found, url[len(root):] or url
    except Exception as exc:  # noqa: BLE001
        log.debug("context window probe of %s failed: %s", api_base, exc)
    return None, ""


class ContextWindows:
    """The context window of one model, found once (per instance: one per navigator, so per
    process) and kept."""

    def __init__(self, known: int | None, setting: int | None, api_base: str | None, model: str,
                 api_key: str | None = None):
        self._known, self._setting = known, setting
        self._api_base, self._model, self._api_key = api_base, model, api_key
        self._found: Window | None = None

    async def get(self) -> Window:
        if self._found is not None:
            return self._found
        if self._known:
            self._found = Window(self._known, "model map")
        elif self._setting:
            self._found = Window(self._setting, "setting")
        elif not self._api_base:
            self._found = Window(None, "unknown")
        else:  # two first questions at once may both probe: harmless, and no lock to bind to a loop
            tokens, endpoint = await probe_context_window(self._api_base, self._model, self._api_key)
            self._found = Window(tokens, f"server ({endpoint})" if tokens else "unknown")
            log.info("context window of %s: %s (%s)", self._model, tokens, self._found.source)
        return self._found
