"""Shared fixtures: an isolated environment (no KAAS_* leaks, no network), knowledge bases
(``make_kb``, ``sample_kb``) and the real-model server. Builders live in helpers.py."""

from __future__ import annotations

import os

import pytest

from kb_ai import faults
from kb_ai.store.kb import KnowledgeBase

from helpers import REAL_LLM_BASE, build_kb

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# litellm's async client otherwise uses aiohttp, which respx cannot see.
os.environ["DISABLE_AIOHTTP_TRANSPORT"] = "True"


@pytest.fixture(scope="session")
def real_llm_server() -> str:
    """The real OpenAI-compatible server of ../shared/tools/real-llm-server, for opt-in
    ``real_llm`` tests: skipped unless KAAS_REAL_LLM=1, failed if that is set and none answers."""
    import httpx

    if os.environ.get("KAAS_REAL_LLM") != "1":
        pytest.skip("set KAAS_REAL_LLM=1 and start ../shared/tools/real-llm-server to run")
    try:
        httpx.get(REAL_LLM_BASE + "/models", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        pytest.fail(f"KAAS_REAL_LLM=1 but no server at {REAL_LLM_BASE}: {exc}")
    return REAL_LLM_BASE


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch):
    for name in list(os.environ):
        if name.startswith("KAAS_") or name in {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL"}:
            monkeypatch.delenv(name, raising=False)
    faults.reset()  # fault-point counts start afresh in every test


@pytest.fixture
def make_kb(tmp_path):
    """``make_kb(*pages, root=tmp_path, **options)``: helpers.build_kb in this test's tmp dir."""

    def make(*pages, root=None, **options) -> KnowledgeBase:
        return build_kb(tmp_path if root is None else root, *pages, **options)

    return make


@pytest.fixture
def sample_kb(make_kb) -> KnowledgeBase:
    """A small indexed wiki in tmp: four pages in two topics (helpers.SAMPLE_PAGES)."""
    return make_kb()
