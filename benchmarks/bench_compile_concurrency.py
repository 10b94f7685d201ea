"""Compile throughput against a slow model: the same corpus compiled at several concurrencies.

    .venv/bin/python benchmarks/bench_compile_concurrency.py [--sources 1000] [--latency 1.0] [--levels 4 16 64]

A fake OpenAI-compatible server on 127.0.0.1 (bench_compile.py's planner and writer replies)
answers every call after ``--latency`` seconds. Per concurrency (``KAAS_CONCURRENCY``), a fresh
copy of the corpus is compiled once by ``kaas compile`` in its own process: wall time, model
calls, calls per second, and the most calls the fake server had in progress at once (the
concurrency actually reached). Printed with the load average: the machine may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
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

from bench_compile import fake_reply, make_corpus  # noqa: E402

KAAS = str(Path(sys.executable).parent / "kaas")


class SlowModel:
    def __init__(self, latency: float):
        self.latency = latency
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
                await asyncio.sleep(self.latency)
                return JSONResponse(fake_reply(body))
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
    args = parser.parse_args()
    model = SlowModel(args.latency)
    api_base = model.start()
    print(f"# compile of {args.sources} sources against a model answering after {args.latency:g} s — "
          f"{platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    print("| concurrency | wall | model calls | calls/s | most calls in progress | load |")
    print("| ---: | ---: | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        make_corpus(corpus / "raw", args.sources)
        for level in args.levels:
            kb = Path(tmp) / f"kb-{level}"
            shutil.copytree(corpus, kb)
            env = {k: v for k, v in os.environ.items() if not k.startswith("KAAS_")}
            env.update(KAAS_MODEL="openai/bench-model", KAAS_API_BASE=api_base, KAAS_API_KEY="sk-bench",
                       KAAS_CONCURRENCY=str(level), KAAS_CACHE="false", KAAS_TIMEOUT="600")
            model.calls, model.peak = 0, 0
            start = time.perf_counter()
            out = subprocess.run([KAAS, "compile", "--kb", str(kb)], capture_output=True, text=True, env=env)
            wall = time.perf_counter() - start
            if out.returncode not in (0, 1):
                print(f"| {level} | failed ({out.returncode}) | | | | {out.stderr[-300:]!r} |")
                continue
            calls = model.calls  # as the model saw them
            load = " ".join(f"{x:.1f}" for x in os.getloadavg())
            print(f"| {level} | {wall:.1f} s | {calls} | {calls / wall:.1f} | {model.peak} | {load} |", flush=True)


if __name__ == "__main__":
    main()
