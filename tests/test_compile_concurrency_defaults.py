"""How many model calls a compile has in flight when ``concurrency`` is not set: by the kind of
model server (a hosted API serves many at once; a server on the user's own machine or network
works on a few and queues the rest). Set in kaas.toml or KAAS_CONCURRENCY, it wins everywhere."""

from __future__ import annotations

import asyncio
import json

import pytest
import respx

from kb_ai.compile.pipeline import run_compile
from kb_ai.config import load_settings
from kb_ai.llm.config import HOSTED_CONCURRENCY, LOCAL_CONCURRENCY, call_concurrency, provider_kind
from kb_ai.store.kb import init_kb


@pytest.mark.parametrize("model, api_base, kind", [
    ("openai/gpt-4o-mini", None, "hosted"),
    ("anthropic/claude-3-5-haiku-latest", None, "hosted"),
    ("openai/llama3", "https://models.example.com/v1", "hosted"),
    ("gpt-4o", None, "hosted"),
    ("ollama/llama3.2", None, "local"),
    ("ollama_chat/qwen2.5", "https://gpu-box.example.com", "local"),  # a local provider wherever it runs
    ("openai/smollm2", "http://127.0.0.1:8765/v1", "local"),
    ("openai/smollm2", "http://localhost:1234/v1", "local"),
    ("openai/smollm2", "http://[::1]:8080/v1", "local"),
    ("openai/qwen", "http://192.168.1.20:11434/v1", "local"),
    ("openai/qwen", "http://gpu.local:8000/v1", "local"),
    ("hosted_vllm/qwen", "http://10.0.0.5:8000/v1", "local"),
    ("hosted_vllm/qwen", "https://vllm.example.com/v1", "hosted"),
    ("openai/x", "http://[not an address/v1", "hosted"),  # unparsable: no guess of local
])
def test_the_provider_kind(model, api_base, kind):
    assert provider_kind(model, api_base) == kind


def test_defaults_by_kind_and_the_setting_overrides_them(tmp_path):
    hosted = load_settings(tmp_path, env={"KAAS_MODEL": "openai/gpt-4o-mini"})
    local = load_settings(tmp_path, env={"KAAS_MODEL": "openai/m", "KAAS_API_BASE": "http://127.0.0.1:8765/v1"})
    assert call_concurrency(hosted, hosted.model) == HOSTED_CONCURRENCY > LOCAL_CONCURRENCY
    assert call_concurrency(local, local.model) == LOCAL_CONCURRENCY
    (tmp_path / "kaas.toml").write_text("concurrency = 7\n")
    assert call_concurrency(load_settings(tmp_path, env={"KAAS_MODEL": "ollama/x"}), "ollama/x") == 7
    pinned = load_settings(tmp_path, env={"KAAS_MODEL": "openai/gpt-4o-mini", "KAAS_CONCURRENCY": "2"})
    assert call_concurrency(pinned, pinned.model) == 2


def _count_peak(delay: float):
    """A compile fake on a local address that records the most calls it had at once."""
    from fixtures.compile.fake_model import compile_responder

    seen = {"now": 0, "peak": 0}

    async def reply(request):
        seen["now"] += 1
        seen["peak"] = max(seen["peak"], seen["now"])
        try:
            await asyncio.sleep(delay)
            return compile_responder(json.loads(request.content))
        finally:
            seen["now"] -= 1

    mock = respx.mock(using="httpx", assert_all_called=False)
    mock.post("http://127.0.0.1:9999/v1/chat/completions").mock(side_effect=reply)
    mock.post("https://api.example.com/v1/chat/completions").mock(side_effect=reply)
    return mock, seen


@pytest.mark.parametrize("api_base, env, expected", [
    ("http://127.0.0.1:9999/v1", {}, LOCAL_CONCURRENCY),
    ("https://api.example.com/v1", {}, 12),  # hosted: the 12 articles written at once (limit 16)
    ("https://api.example.com/v1", {"KAAS_CONCURRENCY": "2"}, 2),
])
def test_a_compile_has_as_many_calls_in_flight_as_its_default_or_setting(tmp_path, api_base, env, expected):
    """Twelve sources, twelve articles: a hosted API gets all twelve writes at once (under its
    default of 16), a local server at most LOCAL_CONCURRENCY; the setting wins."""
    init_kb(tmp_path)
    for i in range(12):
        (tmp_path / "raw" / f"note{i:02}.md").write_text(f"# Note {i}\n\nThe note number {i} is about item {i} in the kitchen.\n")
    settings = load_settings(tmp_path, env={"KAAS_MODEL": "openai/fake", "KAAS_API_BASE": api_base,
                                             "KAAS_API_KEY": "sk-test", "KAAS_CACHE": "false",
                                             "KAAS_MAX_RETRIES": "0", **env})
    mock, seen = _count_peak(0.2)
    with mock:
        report = run_compile(settings, progress=False)
    assert report.created and not report.failed
    assert seen["peak"] == expected
