"""CLI cold start: `kaas ask` from process start to the first answer token.

    .venv/bin/python benchmarks/bench_cli_cold_start.py [--articles 1000] [--kb DIR] [--runs 5]

Four set-ups, each a fresh `kaas ask` process per run (stdout unbuffered, timed to its first
byte of answer text and to exit):

- offline, in-process: no model; the process loads the catalog and the saved keyword index;
- offline, via `kaas serve`: a server of the same KB runs (started once, warmed by one question);
- model, in-process: a zero-latency fake OpenAI-compatible server on 127.0.0.1 (tests/server_fakes.py);
  the process imports the model client (litellm) itself;
- model, via `kaas serve`: the same, through a running server.

``--kb DIR`` uses an existing indexed KB (e.g. a generated 100,000-article wiki) instead of
generating one.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
KAAS = str(Path(sys.executable).parent / "kaas")

from server_fakes import FakeLLMServer  # noqa: E402
from wikigen import generate_wiki  # noqa: E402

QUESTION = "When was the northern bridge founded?"


def env_for(model_base: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAAS_")}
    env.update(PYTHONUNBUFFERED="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    if model_base:
        env.update(KAAS_MODEL="openai/fake-zero-latency", KAAS_API_BASE=model_base, KAAS_API_KEY="x",
                   KAAS_CACHE="false")
    return env


def one_ask(kb: Path, env: dict[str, str]) -> tuple[float, float]:
    start = time.perf_counter()
    proc = subprocess.Popen([KAAS, "ask", "--kb", str(kb), QUESTION], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    first = proc.stdout.read(1)
    first_at = time.perf_counter() - start
    proc.communicate()
    total = time.perf_counter() - start
    if proc.returncode != 0 or not first:
        raise RuntimeError(f"kaas ask failed ({proc.returncode})")
    return first_at, total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RunningServe:
    def __init__(self, kb: Path, env: dict[str, str]):
        self.port = free_port()
        self.proc = subprocess.Popen([KAAS, "serve", "--kb", str(kb), "--port", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            raise RuntimeError("kaas serve did not start")
        with httpx.stream("POST", f"http://127.0.0.1:{self.port}/api/chat", json={"question": QUESTION},
                          timeout=600) as r:  # warm-up: catalog, index, model client
            r.read()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def measure(kb: Path, env: dict[str, str], runs: int) -> tuple[float, float]:
    one_ask(kb, env)  # page cache, saved index
    samples = [one_ask(kb, env) for _ in range(runs)]
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--articles", type=int, default=1000)
    parser.add_argument("--kb", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"# CLI cold start — {platform.node()} {platform.machine()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}")
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(token_delay=0) as llm:
        kb = args.kb
        if kb is None:
            kb = Path(tmp)
            generate_wiki(kb, args.articles)
            subprocess.run([KAAS, "index", "--kb", str(kb)], check=True, capture_output=True, env=env_for(None))
        articles = (kb / "wiki" / "master-index.md").read_text().count("\n- [")
        print(f"{articles:,} articles; median of {args.runs} runs")
        print("| set-up | first answer token | process exit |")
        print("| --- | ---: | ---: |")
        for label, base in (("offline", None), ("model (zero-latency fake server)", llm.api_base)):
            env = env_for(base)
            first, total = measure(kb, env, args.runs)
            print(f"| {label}, in-process | {first * 1000:,.0f} ms | {total * 1000:,.0f} ms |", flush=True)
            serve = RunningServe(kb, env)
            try:
                first, total = measure(kb, env, args.runs)
            finally:
                serve.close()
            print(f"| {label}, via a running `kaas serve` | {first * 1000:,.0f} ms | {total * 1000:,.0f} ms |", flush=True)


if __name__ == "__main__":
    main()
