"""The litellm transport: every provider litellm knows (OpenAI, Anthropic, Bedrock, Ollama...).

litellm is imported lazily: ``import litellm`` costs seconds and hundreds of MB, and offline
mode (or a model served by the direct transport) never needs it. It is imported on the first
call that does (``load_litellm``), configured to stay quiet (nothing on stdout, which would
corrupt MCP stdio) and to use its bundled price list instead of fetching one. litellm's own
retries are off: the gateway retries, with its own error mapping and backoff.

litellm's model map (context windows, prices) is also read here without importing litellm
(``model_map_entry``), for the direct transport.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, AsyncIterator

from kb_ai.errors import MissingApiKeyError, UnknownModelError
from kb_ai.llm.replies import Reply, ReplyChunk, chunks_of, reply_of
from kb_ai.llm.transports import PLACEHOLDER_API_KEY, Request, aclose_quietly

# Providers that run locally (or take credentials from their own chain) and need no API key.
_KEYLESS_PROVIDERS = {
    "ollama", "ollama_chat", "lm_studio", "hosted_vllm", "vllm", "llamafile", "xinference",
    "openai_like", "custom_openai", "oobabooga", "petals", "triton", "custom",
    "bedrock", "sagemaker", "vertex_ai", "vertex_ai_beta", "azure_ai", "watsonx",
}

_litellm_module: Any = None
_litellm_lock = threading.Lock()


def warm_up() -> None:
    """Import litellm now (a server calls this at start-up so the first question does not wait)."""
    load_litellm()


def load_litellm() -> Any:
    """Import and configure litellm once. Slow the first time (seconds), free afterwards."""
    global _litellm_module
    if _litellm_module is not None:
        return _litellm_module
    with _litellm_lock:
        if _litellm_module is None:
            # Must be set before the import: litellm otherwise fetches its price list over the network.
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            import litellm  # noqa: PLC0415 (deliberately lazy)

            litellm.suppress_debug_info = True  # else it prints "Give Feedback / Get Help" to stdout
            litellm.set_verbose = False
            litellm.telemetry = False
            for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
                logging.getLogger(name).setLevel(logging.WARNING)
            _litellm_module = litellm
    return _litellm_module


def map_cost(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """USD for these tokens from the per-token prices of ``model``'s entry in litellm's model map
    (read, not imported); None when the map has no such prices for it."""
    entry = model_map_entry(model) or {}
    prices = entry.get("input_cost_per_token"), entry.get("output_cost_per_token")
    if not all(isinstance(p, (int, float)) and not isinstance(p, bool) for p in prices):
        return None
    return float(prices[0]) * prompt_tokens + float(prices[1]) * completion_tokens


def token_cost(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """USD for these tokens per litellm's price list; None when litellm has no price for
    ``model``. Imports litellm."""
    try:
        prompt_cost, completion_cost = load_litellm().cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
        return float(prompt_cost or 0.0) + float(completion_cost or 0.0)
    except Exception:  # noqa: BLE001 (an unknown price is an answer)
        return None


def _model_map() -> dict[str, Any]:
    """litellm's model map (context windows, prices), read from the JSON file litellm ships
    without importing litellm (~0.06 s instead of 7-15 s). Empty when it cannot be found. Not
    kept: the whole map is ~5.5 MB of Python objects; ``model_map_entry`` keeps the entries used."""
    try:
        spec = importlib.util.find_spec("litellm")
        folder = Path(next(iter(spec.submodule_search_locations)))  # type: ignore[union-attr, arg-type]
        data = json.loads((folder / "model_prices_and_context_window_backup.json").read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 (no map: context window unknown, cost via litellm)
        return {}
    return data if isinstance(data, dict) else {}


@functools.lru_cache(maxsize=32)
def model_map_entry(model: str) -> dict[str, Any] | None:
    """``model``'s entry in litellm's model map (also under its name without the provider)."""
    table = _model_map()
    entry = table.get(model) or table.get(model.split("/", 1)[-1])
    return entry if isinstance(entry, dict) else None


class LiteLLMTransport:
    name = "litellm"

    def __init__(self, model: str, *, api_base: str | None = None, api_key: str | None = None,
                 timeout: float = 60.0):
        self.model = model
        self.api_base = api_base
        self.api_key = api_key
        self.timeout = timeout
        self._supported_params: set[str] | None = None

    def where(self) -> str:
        if self.api_base:
            return f"the LLM server at {self.api_base}"
        try:
            _, provider, _, _ = load_litellm().get_llm_provider(self.model)
            return f"the {provider} API"
        except Exception:  # noqa: BLE001
            return "the LLM server"

    def prepare(self) -> None:
        load_litellm()  # the one-off import is not part of any call's time

    def preflight(self) -> None:
        provider = self._provider()
        if self.api_key or self.api_base or provider in _KEYLESS_PROVIDERS:
            return
        try:
            env = load_litellm().validate_environment(self.model)
        except Exception:  # noqa: BLE001 (a failed check must not block a call that may work)
            return
        missing = [k for k in (env or {}).get("missing_keys") or [] if "KEY" in k or "TOKEN" in k]
        if missing:
            raise MissingApiKeyError(
                f"missing API key for {provider}: set KAAS_API_KEY or {' / '.join(missing)}"
            )

    def _provider(self) -> str:
        try:
            _, provider, _, _ = load_litellm().get_llm_provider(self.model)
        except Exception:  # noqa: BLE001 (litellm raises BadRequestError with a page of advice)
            raise UnknownModelError(
                f"unknown model {self.model!r}: litellm cannot tell which provider serves it; "
                "use a litellm model string such as openai/gpt-4o-mini "
                "(or openai/<name> with KAAS_API_BASE for an OpenAI-compatible server)"
            ) from None
        return str(provider)

    def context_window(self) -> int | None:
        """The model's input token limit according to litellm's model map; None when unknown."""
        try:
            value = load_litellm().get_model_info(self.model).get("max_input_tokens")
            return int(value) if value else None
        except Exception:  # noqa: BLE001 (unknown models raise; "unknown" is an answer)
            return None

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return token_cost(self.model, prompt_tokens, completion_tokens) or 0.0

    def supports(self, param: str) -> bool:
        if self._supported_params is None:
            try:
                litellm = load_litellm()
                _, provider, _, _ = litellm.get_llm_provider(self.model)
                params = litellm.get_supported_openai_params(model=self.model, custom_llm_provider=provider) or []
                self._supported_params = set(params)
            except Exception:  # noqa: BLE001
                self._supported_params = set()
        return param in self._supported_params

    def _kwargs(self, request: Request, *, stream: bool) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "timeout": self.timeout,
            "num_retries": 0,  # the gateway retries, with its own error mapping and backoff
            "max_retries": 0,  # the openai client's own retries, likewise
            "drop_params": False,  # a silently dropped response_format would defeat shape detection
        }
        if self.api_base:
            kwargs["api_base"] = self.api_base
        api_key = self.api_key or (PLACEHOLDER_API_KEY if self.api_base else None)
        if api_key:
            kwargs["api_key"] = api_key
        kwargs.update(request.fields(stream=stream, usage_in_stream=stream and self.supports("stream_options")))
        return kwargs

    async def complete(self, request: Request) -> Reply:
        response = await load_litellm().acompletion(**self._kwargs(request, stream=False))
        return reply_of(response, self.where())

    async def stream(self, request: Request) -> AsyncIterator[ReplyChunk]:
        response = await load_litellm().acompletion(**self._kwargs(request, stream=True))
        return _chunks(response, self.where())


async def _chunks(response: Any, where: str) -> AsyncIterator[ReplyChunk]:
    """litellm's stream as ``ReplyChunk``s; litellm's stream is closed unless it ran to its end."""
    finished = False
    try:
        async for chunk in response:
            for piece in chunks_of(chunk, where):
                yield piece
        finished = True
    finally:
        if not finished:
            await aclose_quietly(response)

