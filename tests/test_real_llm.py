"""Opt-in: the ask path against a real OpenAI-compatible server (llama.cpp via
../shared/tools/real-llm-server, SmolLM2-135M). Run it with the server up:

    ../shared/tools/real-llm-server 8765 &
    KAAS_REAL_LLM=1 .venv/bin/pytest -q -m real_llm

The model is tiny, so answer quality is not asserted; what is proven is the real protocol path:
llama.cpp rejects OpenAI's json_schema response_format and the gateway adapts, streaming works,
usage is counted, and every citation returned is a page that was read.
"""

from __future__ import annotations

import json

import pytest

from conftest import REAL_LLM_BASE

from kb_ai.config import Settings
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest

pytestmark = [pytest.mark.real_llm, pytest.mark.usefixtures("real_llm_server")]
BASE = REAL_LLM_BASE


async def test_ask_against_a_real_llama_cpp_server(sample_kb):
    settings = Settings(kb=sample_kb.root, model="openai/smollm2", api_base=BASE, api_key="none",
                        timeout=120.0, max_retries=1, cache=True)  # a fresh KB: no hits
    result = await ask(build_service(settings), AskRequest(question="How are citations validated?", suggest=True))
    assert result.error is None, result.error
    assert result.mode == "llm"
    assert result.pages, result.notices
    read = {p["path"] for p in result.pages}
    assert all(c["path"] in read for c in result.citations)
    assert result.answer.strip()
    purposes = [c["purpose"] for c in result.usage["calls"]]
    assert "select" in purposes and "answer" in purposes and "suggest" in purposes
    assert result.usage["prompt_tokens"] > 0 and result.usage["completion_tokens"] > 0
    assert result.usage["cost_usd"] == 0.0  # a local model has no price
    capabilities = json.loads((sample_kb.state_dir / "cache" / "llm-capabilities.json").read_text())
    assert "json_schema" not in json.dumps(capabilities)  # llama.cpp refused OpenAI's shape; the gateway adapted


async def test_hierarchical_navigation_against_a_real_server(tmp_path):
    """Topics first, then pages, with a real model: the topic call goes out with the gateway's
    adapted JSON shape and whatever the model answers (a real topic, an invented one, none)
    ends in a well-formed answer — never an error."""
    from kb_ai.store.kb import KnowledgeBase
    from wikigen import generate_wiki

    made = generate_wiki(tmp_path, 200)
    KnowledgeBase(tmp_path).reindex()
    settings = Settings(kb=tmp_path, model="openai/smollm2", api_base=BASE, api_key="none", timeout=180.0,
                        max_retries=1, cache=False, select_budget=800, navigation="topics", read_budget=1500)
    path, name = made[42]
    result = await ask(build_service(settings), AskRequest(question=f"When was {name} founded?"))
    assert result.error is None, result.error
    purposes = [c["purpose"] for c in result.usage["calls"]]
    assert purposes[0] == "select-topics" and "answer" in purposes or not result.pages, (purposes, result.notices)
    read = {p["path"] for p in result.pages}
    assert all(c["path"] in read for c in result.citations)
