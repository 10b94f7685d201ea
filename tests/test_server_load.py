"""Load with disconnects (benchmarks/bench_server_disconnects.py at a smaller scale): real uvicorn,
the real model path (gateway, direct HTTP transport), a slow loopback model; half the clients go
away midway. The clients that stay see no
error, the server's asyncio tasks return to their idle count, and the model stream of every client
that left is closed (not left running for nobody)."""

from __future__ import annotations

import asyncio
import random
import sys
from dataclasses import asdict
from pathlib import Path

import httpx
import pytest
from kb_ai.server import create_app
from helpers import llm_settings
from server_fakes import FakeLLMServer, ServerThread

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_server_disconnects import get_json, run_round, settle, violations
from server_probe import PROBE_PATH, probe_route

pytestmark = pytest.mark.slow  # load: 40 streams over a paced model, twice

STREAMS, ROUNDS, TOKENS = 40, 2, 40  # the fake model's answer is ~40 words, one every 0.1 s


def test_streams_with_disconnects_leave_no_error_no_task_and_no_model_stream(sample_kb):
    with FakeLLMServer(token_delay=0.1) as llm:
        settings = llm_settings(sample_kb, model="openai/fake", api_base=llm.api_base, timeout=30.0,
                                concurrency=STREAMS + 10)
        with ServerThread(create_app(settings, extra_routes=[probe_route()])) as server:
            rounds, baseline = asyncio.run(_rounds(server.url, llm))
    found = violations(rounds, baseline)
    assert not found, found
    for r in rounds:
        assert len(r.stayed) == len(r.left) == STREAMS // 2
        assert all(x["tokens"] > 0 and x["error"] is None for x in r.stayed)
        assert sum(x["left"] for x in r.left) == STREAMS // 2
        assert r.probe["tasks"] <= baseline, r.probe
        # every model stream ran to the end for a client that stayed, or was closed by the server
        assert r.model["completed"] == len(r.stayed), r.model
        assert r.model["abandoned"] == r.model["started"] - r.model["completed"] > 0, r.model
        assert r.model["open"] == 0


async def _rounds(url: str, llm: FakeLLMServer):
    async with httpx.AsyncClient(timeout=30) as control:
        async def probe() -> dict:
            return await get_json(control, url + PROBE_PATH)

        async def model_stats() -> dict:
            return asdict(llm.stats)

        async with httpx.AsyncClient(base_url=url, timeout=60) as warm:  # first-call imports and caches
            response = await warm.post("/api/chat", json={"question": "How are citations validated?"})
            assert "event: done" in response.text
        await asyncio.sleep(0.5)
        baseline = (await probe())["tasks"]
        rng = random.Random(5)
        rounds = []
        questions = ["How are citations validated?", "How does page selection work?", "What is in the catalog?"]
        for number in range(1, ROUNDS + 1):
            before = await model_stats()
            round_ = await run_round(number, url, STREAMS, 0.5, TOKENS, questions, rng)
            await settle(round_, probe, model_stats, baseline, before, timeout=20)
            rounds.append(round_)
        return rounds, baseline
