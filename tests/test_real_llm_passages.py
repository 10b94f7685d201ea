"""Opt-in: passage-level citations (issue 15, item 3) on a real model's answer (llama.cpp,
SmolLM2-135M; see test_real_llm.py). Run with the server up:

    KAAS_REAL_LLM=1 .venv/bin/pytest -q -m real_llm tests/test_real_llm_passages.py

The model is asked about one page (given, so the one call is the answer) and the citation step
runs on what it really wrote. Every passage a citation carries must be the page's own text: the
quote is what a reader sees of ``body[start:end]`` and is in the rendered page, the anchor is the
rendered id of the last heading before it (test_cited_passages._check_passage). The 135M model
seldom writes the ``[Title](path)`` links the prompt asks for (0 of 9 real-docs answers did:
docs/benchmarks.md), so its answer is also taken with every sentence citing the page read, as
the prompt asks (benchmarks/bench_real_passages.py: ``cited_as_asked``): at least one of its
sentences must then stand on a passage, and every passage found must verify.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kb_ai.config import Settings
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.citations import validate_citations
from kb_ai.navigate.read import read_pages
from kb_ai.navigate.records import AskRequest

from helpers import REAL_LLM_BASE
from test_cited_passages import _check_passage

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_real_passages import ATTEMPTS, cited_as_asked, interrupted  # noqa: E402

pytestmark = [pytest.mark.real_llm, pytest.mark.slow, pytest.mark.usefixtures("real_llm_server")]

SETTINGS_BODY = ("# Server settings\n\nHow the server is set up.\n\n## Port\n\nThe server listens on port 8123 by default. "
                 "Use the `--port` option to change it.\n\n## Workers\n\nThe server starts 3 worker processes by default. "
                 "Each worker handles requests on its own.\n\n## Timeouts\n\nIdle connections are closed after 45 seconds.\n")
SETTINGS = ("server/settings.md", "Server settings", "Port, workers and timeouts of the server.", SETTINGS_BODY)
QUESTION = "Which port does the server listen on by default?"


async def test_a_real_models_answer_cites_passages_that_are_in_the_page(make_kb):
    kb = make_kb(SETTINGS, sample=False)
    path, title = SETTINGS[0], SETTINGS[1]
    settings = Settings(kb=kb.root, model="openai/smollm2", api_base=REAL_LLM_BASE, api_key="none", timeout=180.0,
                        max_retries=1, cache=False, answer_fallback=False)
    service = build_service(settings)
    for _attempt in range(ATTEMPTS):  # the shared server ends a stream when another request comes: ask again
        result = await ask(service, AskRequest(question=QUESTION, paths=[path], suggest=False, model_only=True))
        if not interrupted(result.error):
            break
    assert result.error is None, result.error
    assert result.mode == "llm" and not result.offline and result.answer.strip()

    # the links the model wrote itself: what their citations carry is the page's own text
    for citation in result.citations:
        assert citation["path"] == path
        for passage in citation.get("passages", []):
            _check_passage(kb, path, passage)

    # the model's sentences, each citing the page as the prompt asks
    pages, _ = read_pages(kb, [path], settings.read_budget, QUESTION, catalog=kb.catalog())
    citations, _ = validate_citations(cited_as_asked(result.answer, title, path), pages)  # (links it made up stay invalid)
    assert [c.path for c in citations] == [path]
    passages = citations[0].passages
    assert passages, f"no sentence of the model's answer stands on a passage of the page: {result.answer!r}"
    for passage in passages:
        _check_passage(kb, path, passage)  # the page's words at their heading, never the model's
    assert any(p["anchor"] == "h-port" for p in passages), passages  # the answer is under "Port"
    print(f"\nanswer: {result.answer!r}\nmodel's own citations: {result.citations}\n"
          f"passages as asked: {[p['quote'] for p in passages]}")
