"""Compile throughput against a slow model: the same corpus compiled at several concurrencies.

    .venv/bin/python benchmarks/bench_compile_concurrency.py [--sources 1000] [--latency 1.0] [--levels 4 16 64]
        [--server-slots N] [--timeout SECONDS] [--api-base URL --model MODEL]

A fake OpenAI-compatible server on 127.0.0.1 (bench_compile.py's planner and writer replies)
answers every call after ``--latency`` seconds. Per concurrency (``KAAS_CONCURRENCY``), a fresh
copy of the corpus is compiled once by ``kaas compile`` in its own process: wall time, the plan
and write stages' times (from the compile's JSON report), model calls, calls per second, and the
most calls the fake server had in progress at once (the concurrency actually reached). Printed
with the load average: the machine may be shared.

``--server-slots N``: the fake works on at most N calls at once and queues the rest, as a local
model server does (Ollama's ``OLLAMA_NUM_PARALLEL``, llama.cpp's ``--parallel``); 0 (default): no
limit, as a hosted API. "most calls in progress" then counts the queued calls too.
``--api-base URL --model MODEL``: compile against that (real) OpenAI-compatible server instead
of the fake (e.g. the local smollm2 at http://127.0.0.1:8765/v1, model ``openai/smollm2``); the
calls it had in progress are then not known ("-").
``--timeout``: kaas's ``KAAS_TIMEOUT`` (default 600 s: no call times out); a queued call waits
against it, so a short one shows what a concurrency above the server's slots costs ("failed":
sources the compile could not finish).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_compile import fake_response, make_corpus  # noqa: E402

KAAS = str(Path(sys.executable).parent / "kaas")


class SlowModel:
    def __init__(self, latency: float, slots: int = 0):
        self.latency = latency
        self.slots = slots
        self.semaphore: asyncio.Semaphore | None = None
        self.active = 0
        self.peak = 0
        self.calls = 0

    def start(self) -> str:
        import uvicorn
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        async def chat(request: Request) -> JSONResponse:
            body = await request.json()
            self.calls += 1
            self.active += 1
            self.peak = max(self.peak, self.active)
            try:
                if self.slots:
                    if self.semaphore is None:  # made on the server's own event loop
                        self.semaphore = asyncio.Semaphore(self.slots)
                    async with self.semaphore:
                        await asyncio.sleep(self.latency)
                else:
                    await asyncio.sleep(self.latency)
                return fake_response(body)
            finally:
                self.active -= 1

        app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                               access_log=False, backlog=4096))
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.05)
        return f"http://127.0.0.1:{port}/v1"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sources", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--levels", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--server-slots", type=int, default=0,
                        help="calls the fake works on at once, the rest queued (0: no limit)")
    parser.add_argument("--timeout", type=float, default=600.0, help="KAAS_TIMEOUT for the compile")
    parser.add_argument("--api-base", default=None, help="a real OpenAI-compatible server instead of the fake")
    parser.add_argument("--model", default="openai/bench-model", help="the model, with --api-base")
    args = parser.parse_args()
    model = SlowModel(args.latency, args.server_slots)
    if args.api_base:
        api_base, model.peak = args.api_base, "-"
        server = f"the server at {args.api_base}, model {args.model}"
    else:
        api_base = model.start()
        slots = f"{args.server_slots} at once, the rest queued" if args.server_slots else "any number at once"
        server = f"a model answering after {args.latency:g} s ({slots})"
    print(f"# compile of {args.sources} sources against {server} — "
          f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    print(f"# KAAS_TIMEOUT={args.timeout:g}")
    print("| concurrency | wall | plan | write | model calls | calls/s | most calls in progress | failed | load at end |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        make_corpus(corpus / "raw", args.sources)
        for level in args.levels:
            kb = Path(tmp) / f"kb-{level}"
            shutil.copytree(corpus, kb)
            env = {k: v for k, v in os.environ.items() if not k.startswith("KAAS_")}
            env.update(KAAS_MODEL=args.model, KAAS_API_BASE=api_base, KAAS_API_KEY="sk-bench",
                       KAAS_CONCURRENCY=str(level), KAAS_CACHE="false", KAAS_TIMEOUT=f"{args.timeout:g}")
            if not args.api_base:
                model.calls, model.peak = 0, 0
            start = time.perf_counter()
            out = subprocess.run([KAAS, "compile", "--json", "--kb", str(kb)], capture_output=True, text=True,
                                 env=env)
            wall = time.perf_counter() - start
            if out.returncode not in (0, 1):
                print(f"| {level} | failed ({out.returncode}) | | | | | | | {out.stderr[-300:]!r} |")
                continue
            stages, failed = _stage_seconds(out.stdout), _failed(out.stdout)
            if failed == "?":  # stopped without a report: say why
                failed = "stopped: " + (out.stderr.strip().splitlines() or ["?"])[-1][:160]
            calls = model.calls if not args.api_base else _calls(out.stdout)  # as the model saw them
            load = " ".join(f"{x:.1f}" for x in os.getloadavg())
            print(f"| {level} | {wall:.1f} s | {stages.get('plan', 0):.1f} s | {stages.get('write', 0):.1f} s "
                  f"| {calls} | {calls / wall:.1f} | {model.peak} | {failed} | {load} |", flush=True)


def _calls(report: str) -> int:
    """Model calls a ``kaas compile --json`` report counts (0 when it is not one)."""
    try:
        return int(json.loads(report).get("usage", {}).get("llm_calls", 0))
    except (ValueError, AttributeError, TypeError):
        return 0


def _failed(report: str) -> str:
    """Sources a ``kaas compile --json`` report lists as failed ("?" when it is not one)."""
    try:
        return str(len(json.loads(report).get("failed", [])))
    except (ValueError, AttributeError):
        return "?"


def _stage_seconds(report: str) -> dict[str, float]:
    """Each stage's seconds in a ``kaas compile --json`` report ({} when it is not one)."""
    try:
        data = json.loads(report)
    except ValueError:
        return {}
    return {s.get("name"): float(s.get("seconds") or 0) for s in data.get("stages", []) if isinstance(s, dict)}


if __name__ == "__main__":
    main()
