"""Shared fixtures: an isolated environment (no KAAS_* leaks, no network), knowledge bases
(``make_kb``, ``sample_kb``) and the real-model server. Builders live in helpers.py."""

from __future__ import annotations

import os

import pytest

from kb_ai import faults
from kb_ai.store.kb import KnowledgeBase

from browser_support import CHROMIUM, CHROMIUM_ARGS, browser_missing
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
        # 60 s: the server answers one request at a time, and is shared (a reply may be on its way)
        httpx.get(REAL_LLM_BASE + "/models", timeout=60).raise_for_status()
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


# -- the real browser (tests/browser_support.py) ----------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    missing = browser_missing()
    if missing:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"browser test cannot run under CI: {missing}")
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def ui_kb(make_kb) -> KnowledgeBase:
    return make_kb(
        ("retrieval/catalog.md", "The catalog", "master-index.md: one line per article, by topic.",
         "# The catalog\n\nThe catalog lists every article with its title and summary. "
         "The navigator reads the catalog to choose pages.\n\n## Format\n\nOne line per article.\n\n"
         "## Regeneration\n\nRun kaas index after editing articles; see [Citations](citations.md).\n\n"
         "<script>window.__pwned = true</script><img src=x onerror=\"window.__pwned = true\">"),
        tags=["demo"])
