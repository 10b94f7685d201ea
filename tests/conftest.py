"""Shared fixtures: an isolated environment (no KAAS_* leaks, no network) and wiki builders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kb_ai.store.articles import render_article
from kb_ai.store.kb import KnowledgeBase

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# litellm's async client otherwise uses aiohttp, which respx cannot see.
os.environ["DISABLE_AIOHTTP_TRANSPORT"] = "True"


REAL_LLM_BASE = os.environ.get("KAAS_REAL_LLM_BASE", "http://127.0.0.1:8765/v1")


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


def write_page(wiki: Path, path: str, title: str | None, summary: str | None, body: str, **extra) -> Path:
    meta = {}
    if title is not None:
        meta["title"] = title
    if summary is not None:
        meta["summary"] = summary
    meta.update(extra)
    file = wiki / path
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(render_article(meta, body), encoding="utf-8")
    return file


SAMPLE_PAGES = [
    ("retrieval/page-selection.md", "Page selection", "How the navigator picks pages from the catalog with one model call.",
     "# Page selection\n\nThe navigator sends the catalog to the model and asks for a JSON list of paths. "
     "Invented paths are dropped before any page is read.\n\n## Repair\n\nA near miss is repaired by title or slug."),
    ("retrieval/citations.md", "Citations", "How answers cite pages and how citations are validated.",
     "# Citations\n\nEvery claim in an answer cites a page as a Markdown link. "
     "Only pages that were actually read count as valid citations."),
    ("ops/configuration.md", "Configuration", "Settings, environment variables and kaas.toml.",
     "# Configuration\n\nThe KAAS_MODEL variable selects the language model. "
     "Without a model kaas runs in offline mode."),
    ("ops/deployment.md", "Deployment", "Running the chat server behind a reverse proxy.",
     "# Deployment\n\nThe server binds to the loopback address by default. "
     "A reverse proxy such as nginx terminates TLS in front of it."),
]


@pytest.fixture
def sample_kb(tmp_path) -> KnowledgeBase:
    """A small indexed wiki in tmp: four pages in two topics."""
    wiki = tmp_path / "wiki"
    for path, title, summary, body in SAMPLE_PAGES:
        write_page(wiki, path, title, summary, body, topic=path.split("/")[0])
    kb = KnowledgeBase(tmp_path)
    kb.reindex()
    return kb
