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

from helpers import REAL_LLM_BASE

from kb_ai.config import Settings
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest

pytestmark = [pytest.mark.real_llm, pytest.mark.slow, pytest.mark.usefixtures("real_llm_server")]
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


def test_a_real_model_cannot_hang_kaas_ask(tmp_path):
    """Issue 12, item 20: `kaas ask --json` on a 13-page wiki was still waiting after 300 s against
    this server (no max_tokens; httpx's timeout is per read; timed-out selections retried). Every
    call now has a reply limit and a wall-clock deadline, so the ask ends within a bound however
    slow or verbose the model is (the server is shared: the bound is the deadline's, not a speed)."""
    import os
    import subprocess
    import sys
    import time

    from wikigen import DEPOT_QUESTION, generate_depot_wiki

    generate_depot_wiki(tmp_path)
    deadline = 60
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAAS_")}
    env.update(KAAS_MODEL="openai/smollm2", KAAS_API_BASE=BASE, KAAS_API_KEY="none", KAAS_CACHE="false",
               KAAS_MAX_RETRIES="1", KAAS_TIMEOUT="60", KAAS_CALL_DEADLINE=str(deadline), KAAS_DEBUG="1")
    bound = 4 * deadline + 30  # selection, its repair, the answer, each at most one deadline; start-up
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "kb_ai", "--kb", str(tmp_path), "ask", "--json", DEPOT_QUESTION],
                              env=env, capture_output=True, text=True, timeout=bound)
    except subprocess.TimeoutExpired:
        pytest.fail(f"kaas ask --json was still waiting after {bound} s")
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["answer"].strip() and data["mode"] == "llm"
    calls = data["usage"]["calls"]
    assert all(c["seconds"] <= deadline + 2 for c in calls), calls
    trace = [json.loads(line) for line in (tmp_path / ".kaas" / "logs" / "llm-trace.jsonl").read_text().splitlines()]
    sent = [t for t in trace if not t["cached"]]
    assert sent and all(isinstance(t["max_tokens"], int) and t["max_tokens"] <= 1_500 for t in sent), sent
    print(f"\nkaas ask --json finished in {elapsed:.1f} s with {len(calls)} calls; notices: {data['notices']}")


async def test_a_real_reply_with_literal_newlines_in_a_string_is_accepted():
    """Issue 12, item 10: llama.cpp's JSON grammar lets a string hold raw control characters
    ([^"\\\\]), and the real model writes Markdown bodies with real line breaks. Here a schema
    pattern makes the grammar force them, so the case is reproduced every time: such a reply is
    JSON for any lenient parser and must be accepted on the first call, not rejected twice."""
    from kb_ai.llm.gateway import GatewayConfig, LLMGateway
    from kb_ai.llm.usage import UsageMeter

    schema = {"type": "object", "required": ["body"], "properties": {
        "body": {"type": "string", "pattern": "^# [A-Za-z ]{3,20}\n\n[A-Za-z ,.]{10,80}$"}}}
    messages = [{"role": "user", "content": "Write a Markdown article about buses: a # title line, a blank line, "
                                            "then one sentence. Answer with JSON {\"body\": \"...\"}."}]
    gateway = LLMGateway(GatewayConfig(model="openai/smollm2", api_base=BASE, api_key="none", timeout=120,
                                       max_retries=1))
    meter = UsageMeter()
    value = await gateway.complete_json(messages, schema=schema, schema_name="article", purpose="compile.write",
                                        meter=meter, max_tokens=120)
    assert "\n\n" in value["body"]
    answered = [c for c in meter.calls if c.error is None]
    assert len(answered) == 1, meter.calls  # no repair round
