"""Server load with disconnects: concurrent chat streams where a share of clients go away midway.

    .venv/bin/python benchmarks/bench_server_disconnects.py [--streams 200] [--rounds 5] [--leave 0.5]
                                                            [--tokens 50] [--delay 0.2] [--seed 1]

Processes on 127.0.0.1, as in bench_server.py: a slow fake OpenAI-compatible model
(``server_fakes.fake_llm_app``: selection answered at once, the answer streamed TOKENS tokens one
every DELAY seconds, plus ``GET /stats``: streams started / completed / abandoned), and the kaas
server with that model configured, run by ``server_probe.py`` (``create_app`` as ``kaas serve``
builds it, plus a debug-only ``GET /_probe``: asyncio tasks, RSS, open fds).

Each round starts STREAMS chats at once; a LEAVE share of them close the connection after a
random number of answer tokens (0 = as soon as the response starts, up to half the answer),
the others read to the end. After each round the script waits until the server is idle again and
then reads the probe and the model's stats. Checked (exit status 1 otherwise):

- clients that stayed saw no error and got their ``done`` event;
- the server's asyncio tasks return to the idle baseline (measured after a warm-up chat);
- no model stream is left open: every stream the model started was read to the end or closed
  by the server; a model stream that ran to the end for a client that left is reported (it can
  only happen when the server lagged behind the model by the client's remaining tokens).

RSS after each round is reported (first vs last round: growth).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from bench_server import Process, free_port, ms, one_chat, pct
from server_probe import PROBE_PATH

LEAVE_MAX_SHARE = 0.5  # a leaving client reads at most this share of the answer's tokens


def log_summary(log: Path) -> str:
    """The server's stderr, condensed: distinct message lines (tracebacks' frames left out) by count."""
    from collections import Counter

    lines = [line for line in log.read_text(errors="replace").splitlines()
             if line.strip() and not line.startswith((" ", "Traceback", "During handling", "The above exception"))]
    return ", ".join(f"{n} x {line[:120]!r}" for line, n in Counter(lines).most_common(8)) or "empty"


# -- the fake model process ----------------------------------------------------------------------


def serve_fake_llm(port: int, tokens: int, delay: float) -> None:
    from dataclasses import asdict

    import uvicorn
    from server_fakes import FakeLLMStats, fake_llm_app
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    stats = FakeLLMStats()
    words = [f"w{i} " for i in range(tokens - 1)]

    def answer_words(prompt: str) -> list[str]:
        import re

        found = re.search(r'<page path="([^"]+)" title="([^"]*)"', prompt)
        return words + [f"[{found.group(2)}]({found.group(1)})" if found else "none"]

    async def stats_endpoint(request) -> JSONResponse:
        figures = asdict(stats)
        figures["requests"] = len(stats.requests)
        return JSONResponse(figures)

    app = fake_llm_app(stats, delay, answer_words)
    app.router.routes.append(Route("/stats", stats_endpoint, methods=["GET"]))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", backlog=4096)


# -- clients ---------------------------------------------------------------------------------------


async def chat_and_leave(client: httpx.AsyncClient, question: str, after_tokens: int) -> dict:
    """Start a chat and close the connection after ``after_tokens`` token events (0: as soon as
    the response starts)."""
    marks: dict[str, Any] = {"tokens": 0, "error": None, "left": False}
    try:
        async with client.stream("POST", "/api/chat", json={"question": question}) as response:
            marks["status"] = response.status_code
            async for line in response.aiter_lines():
                if marks["tokens"] >= after_tokens:
                    marks["left"] = True
                    break
                if line == "event: token":
                    marks["tokens"] += 1
                elif line == "event: done":
                    break  # the answer ended before this client's leaving point
    except httpx.HTTPError as exc:
        marks["error"] = type(exc).__name__
    return marks


@dataclass
class Round:
    number: int
    stayed: list[dict]
    left: list[dict]
    wall: float
    settle_seconds: float = 0.0
    probe: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)  # this round's model streams: started, completed, abandoned, open

    @property
    def errors(self) -> list[dict]:
        return [r for r in self.stayed if r["error"] or r.get("status") != 200]

    @property
    def model_completed_for_leavers(self) -> int:
        return max(0, self.model.get("completed", 0) - (len(self.stayed) - len(self.errors)))


async def run_round(number: int, url: str, streams: int, leave_share: float, tokens: int, questions: list[str],
                    rng: random.Random) -> Round:
    limits = httpx.Limits(max_connections=streams + 10, max_keepalive_connections=streams + 10)
    leaving = set(rng.sample(range(streams), round(streams * leave_share)))
    async with httpx.AsyncClient(base_url=url, timeout=180, limits=limits) as client:
        jobs = []
        for i in range(streams):
            question = questions[i % len(questions)]
            if i in leaving:
                jobs.append(chat_and_leave(client, question, rng.randint(0, int(tokens * LEAVE_MAX_SHARE))))
            else:
                jobs.append(one_chat(client, question))
        start = time.perf_counter()
        results = await asyncio.gather(*jobs)
        wall = time.perf_counter() - start
    return Round(number, [r for i, r in enumerate(results) if i not in leaving],
                 [r for i, r in enumerate(results) if i in leaving], wall)


async def settle(round_: Round, probe: Callable[[], Awaitable[dict]], model_stats: Callable[[], Awaitable[dict]],
                 baseline: int, before: dict, timeout: float = 300.0) -> None:
    """Wait until the server is back to ``baseline`` tasks and no model stream is open (or timeout),
    then record the probe and this round's model figures."""
    start = time.perf_counter()
    while True:
        try:
            figures, stats = await probe(), await model_stats()
        except httpx.TimeoutException:  # a server still busy with the round's backlog: keep waiting
            if time.perf_counter() - start > timeout:
                raise
            continue
        model = {key: stats[f"streams_{key}"] - before[f"streams_{key}"] for key in ("started", "completed", "abandoned")}
        model["open"] = model["started"] - model["completed"] - model["abandoned"]
        if (figures["tasks"] <= baseline and model["open"] == 0) or time.perf_counter() - start > timeout:
            break
        await asyncio.sleep(0.1)
    round_.settle_seconds = time.perf_counter() - start
    round_.probe, round_.model = figures, model


async def get_json(client: httpx.AsyncClient, url: str) -> dict:
    response = await client.get(url)
    response.raise_for_status()
    return response.json()


def violations(rounds: list[Round], baseline: int) -> list[str]:
    found = []
    for r in rounds:
        if r.errors:
            found.append(f"round {r.number}: {len(r.errors)} errors for clients that stayed, e.g. "
                         f"{r.errors[0].get('error')}: {r.errors[0].get('message')}")
        if r.probe.get("tasks", 1 << 30) > baseline:
            found.append(f"round {r.number}: {r.probe['tasks']} tasks alive after settling (baseline {baseline}): "
                         f"{r.probe.get('task_kinds')}")
        if r.model.get("open", 1):
            found.append(f"round {r.number}: {r.model.get('open')} model streams still open")
        if not any(x["left"] for x in r.left) and r.left:
            found.append(f"round {r.number}: no client managed to leave mid-answer")
    return found


def table(rounds: list[Round], baseline: int, tokens: int, delay: float) -> str:
    lines = ["| round | streams | left midway | stayed: ok / errors | stayed: end-to-end p50 / p95 | wall | "
             "model streams started / completed / closed early / open | completed for a client that left | "
             "settle | tasks after (idle baseline) | server RSS | open fds |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rounds:
        ok = [x for x in r.stayed if x not in r.errors]
        totals = [x["total"] for x in ok] or [float("nan")]
        m = r.model
        lines.append(
            f"| {r.number} | {len(r.stayed) + len(r.left)} | {sum(x['left'] for x in r.left)} | {len(ok)} / {len(r.errors)} | "
            f"{ms(pct(totals, .5))} / {ms(pct(totals, .95))} | {r.wall:.1f} s | {m['started']} / {m['completed']} / "
            f"{m['abandoned']} / {m['open']} | {r.model_completed_for_leavers} | {r.settle_seconds:.1f} s | "
            f"{r.probe['tasks']} ({baseline}) | {r.probe['rss_kb'] / 1024:.0f} MB | {r.probe['fds']} |")
    return "\n".join(lines)


async def bench(url: str, llm_url: str, args: argparse.Namespace, questions: list[str]) -> tuple[list[Round], int, dict]:
    rng = random.Random(args.seed)
    async with httpx.AsyncClient(timeout=30) as control:
        async def probe() -> dict:
            return await get_json(control, url + PROBE_PATH)

        async def model_stats() -> dict:
            return await get_json(control, llm_url + "/stats")

        async with httpx.AsyncClient(base_url=url, timeout=120) as warm:  # imports, lexical index, litellm
            first = await one_chat(warm, questions[0])
            if first["error"]:
                raise SystemExit(f"warm-up chat failed: {first}")
        await asyncio.sleep(1.0)
        idle = await probe()
        baseline = idle["tasks"]
        print(f"idle after warm-up: {idle}", flush=True)
        rounds = []
        for number in range(1, args.rounds + 1):
            before = await model_stats()
            round_ = await run_round(number, url, args.streams, args.leave, args.tokens, questions, rng)
            await settle(round_, probe, model_stats, baseline, before)
            rounds.append(round_)
            print(f"round {number}: {len(round_.stayed)} stayed ({len(round_.errors)} errors), "
                  f"{sum(x['left'] for x in round_.left)} left midway; wall {round_.wall:.1f} s; model {round_.model}; "
                  f"settled in {round_.settle_seconds:.1f} s: {json.dumps(round_.probe)}", flush=True)
        return rounds, baseline, idle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--leave", type=float, default=0.5, help="share of clients that disconnect midway")
    parser.add_argument("--articles", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=50)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--serve-fake-llm", metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake_llm:
        serve_fake_llm(int(args.serve_fake_llm), args.tokens, args.delay)
        return

    from kb_ai.store.kb import KnowledgeBase
    from wikigen import generate_wiki

    print(f"# kaas serve with disconnects — {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}; {args.articles} articles, {args.streams} streams "
          f"x {args.rounds} rounds, {args.leave:.0%} leave midway; model streams {args.tokens} tokens every "
          f"{args.delay * 1000:.0f} ms", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        made = generate_wiki(root, args.articles)
        KnowledgeBase(root).reindex()
        questions = [f"When was {name} founded and where?" for _path, name in made[:50]]
        llm_port, port = free_port(), free_port()
        url, llm_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{llm_port}"
        env = {"KAAS_MODEL": "openai/fake", "KAAS_API_BASE": f"{llm_url}/v1", "KAAS_API_KEY": "k",
               "KAAS_CACHE": "false", "KAAS_CONCURRENCY": str(args.streams + 10), "KAAS_TIMEOUT": "120",
               "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        server_log = root / "server-stderr.log"
        with Process([__file__, "--serve-fake-llm", str(llm_port), "--tokens", str(args.tokens), "--delay",
                      str(args.delay)], health=f"{llm_url}/stats"), \
             Process([str(HERE / "server_probe.py"), "--kb", str(root), "--port", str(port)],
                     env=env, health=url + "/healthz", log=server_log):
            rounds, baseline, idle = asyncio.run(bench(url, llm_url, args, questions))
        server_said = log_summary(server_log)
    print()
    print(table(rounds, baseline, args.tokens, args.delay))
    first, last = rounds[0].probe["rss_kb"], rounds[-1].probe["rss_kb"]
    print(f"\nserver RSS: idle after warm-up {idle['rss_kb'] / 1024:.0f} MB, after round 1 {first / 1024:.0f} MB, "
          f"after round {len(rounds)} {last / 1024:.0f} MB: growth {(last - first) / 1024:+.0f} MB "
          f"({(last - first) / first:+.1%}) over {len(rounds) - 1} rounds")
    print(f"server log (stderr): {server_said}")
    found = violations(rounds, baseline)
    print("violations: " + ("; ".join(found) if found else "none"))
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
