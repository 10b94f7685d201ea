"""Selection at scale with a model: is the selection prompt bounded, and what does kaas cost
per question besides the model? Generated wikis, a zero-latency fake OpenAI-compatible server on
127.0.0.1 (tests/server_fakes.py), the real LLM path (litellm, gateway, navigator).

    .venv/bin/python benchmarks/bench_selection_scale.py [SIZES...]     (default: 1000 10000)

Per size and navigation ("shortlist": keyword shortlist then one selection call; "topics": the
model picks a topic, then pages in it — the fake model takes the first topic shown, i.e. the one
with the most keyword hits; "offline": no model at all): the selection budget in force (the fake model is unknown to litellm, so the default
6,000 tokens applies), the largest selection prompt sent (characters / 3.5, the same estimate
the budget uses, and the fake server's own count), LLM calls per question, kaas time per
question excluding the time spent inside model calls, the share of questions whose gold page was
among the catalog lines shown to the model (offline: among the selected pages), and the
process's peak memory (cumulative: the process's peak so far).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import re
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from kb_ai.config import Settings  # noqa: E402
from kb_ai.navigate.ask import ask, build_service  # noqa: E402
from kb_ai.navigate.records import AskRequest  # noqa: E402
from kb_ai.navigate.select import select_budget_for  # noqa: E402
from kb_ai.store.kb import KnowledgeBase  # noqa: E402
from server_fakes import FakeLLMServer  # noqa: E402
from wikigen import generate_wiki  # noqa: E402

QUESTIONS = 30
_LINE = re.compile(r"^- \[", re.MULTILINE)


def run_questions(service, sample, llm: FakeLLMServer | None) -> dict:
    own_times, calls, prompt_tokens, lines_shown, gold_shown = [], [], [], [], 0
    for path, name in sample:
        before = len(llm.stats.requests) if llm else 0
        start = time.perf_counter()
        result = asyncio.run(ask(service, AskRequest(question=f"When was {name} founded and where?")))
        total = time.perf_counter() - start
        model_time = sum(c["seconds"] for c in result.usage.get("calls", []))
        own_times.append(total - model_time)
        calls.append(result.usage["llm_calls"])
        if llm is None:
            gold_shown += path in [p["path"] for p in result.pages]
            continue
        selects = [r for r in llm.stats.requests[before:] if not r.get("stream")]
        texts = ["\n".join(str(m.get("content") or "") for m in r["messages"]) for r in selects]
        prompt_tokens.append(max(len(t) / 3.5 for t in texts))
        pages_prompt = texts[-1]  # the page selection (after the topic step, if any)
        lines_shown.append(len(_LINE.findall(pages_prompt)))
        gold_shown += f"]({path})" in pages_prompt
    own_times.sort()
    return {
        "max_prompt": max(prompt_tokens) if prompt_tokens else 0,
        "mean_lines": statistics.mean(lines_shown) if lines_shown else 0,
        "calls": statistics.mean(calls), "own_mean_ms": statistics.mean(own_times) * 1000,
        "own_p95_ms": own_times[int(len(own_times) * 0.95) - 1] * 1000, "gold_shown": gold_shown / len(sample),
    }


def bench(size: int, llm: FakeLLMServer) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        made = generate_wiki(root, size)
        KnowledgeBase(root).reindex()
        sample = random.Random(3).sample(made, QUESTIONS)
        for navigation in ("shortlist", "topics", None):
            if navigation is None:
                settings = Settings(kb=root)  # offline: no model
            else:
                settings = Settings(kb=root, model="openai/fake-zero-latency", api_base=llm.api_base, api_key="x",
                                    cache=False, max_retries=0, navigation=navigation)
            service = build_service(settings)
            budget = select_budget_for(service.navigator.gateway.context_window(), settings.select_budget) if navigation else 0
            asyncio.run(ask(service, AskRequest(question="warm-up: bridge history")))  # index build, imports
            row = run_questions(service, sample, llm if navigation else None)
            row.update(size=size, budget=budget, mode=navigation or "offline",
                       peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[1000, 10000], help="wiki sizes (articles)")
    sizes = parser.parse_args().sizes
    print(f"# selection at scale — {platform.node()} {platform.machine()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}")
    print("| articles | navigation | selection budget | largest selection prompt | page lines shown (mean) "
          "| LLM calls / question | kaas time / question, excl. model calls: mean / p95 "
          "| gold page shown to the model (offline: selected) | peak RSS |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with FakeLLMServer(token_delay=0) as llm:
        for size in sizes:
            for r in bench(size, llm):
                budget = f"{r['budget']:,} tokens" if r["budget"] else "—"
                prompt = f"{r['max_prompt']:,.0f} tokens" if r["max_prompt"] else "—"
                lines = f"{r['mean_lines']:,.0f}" if r["mean_lines"] else "—"
                print(f"| {r['size']:,} | {r['mode']} | {budget} | {prompt} | {lines} | {r['calls']:.1f} | "
                      f"{r['own_mean_ms']:.0f} ms / {r['own_p95_ms']:.0f} ms | {r['gold_shown']:.2f} | "
                      f"{r['peak_mb']:,.0f} MB |", flush=True)


if __name__ == "__main__":
    main()
