"""HTTP server load and latency: concurrent chat streams against a model streaming at a fixed rate.

    .venv/bin/python benchmarks/bench_server.py [--streams 200] [--articles 1000] [--tokens 50] [--delay 0.02]

Every server runs in its own process on 127.0.0.1 (the client's load does not share the
server's GIL). Two set-ups:

- paced navigator: the kaas app with a navigator that streams TOKENS tokens every DELAY seconds
  and no model client at all — what the server itself costs (routing, catalog, reading pages,
  citations, SSE framing);
- full path: ``python -m kb_ai.server`` with a model configured, against a fake OpenAI-compatible
  server (its own process) that answers selection at once and streams the answer at a fixed rate —
  the same path as production; run twice, with the gateway's direct HTTP transport for
  OpenAI-compatible servers (the default) and with every call through litellm
  (``KAAS_DIRECT_HTTP=false``).

Reported per request: time to the first event (``pages``), to the first token, to the end, and
the server's own time = end-to-end minus the model's streaming time (tokens x delay).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- server processes (this script re-runs itself with --serve-...) ------------------------------


def serve_paced(kb: str, port: int, tokens: int, delay: float) -> None:
    import uvicorn

    from kb_ai.config import Settings
    from kb_ai.navigate.ask import AskService
    from kb_ai.server import create_app
    from kb_ai.store.kb import KnowledgeBase
    from server_fakes import PacedNavigator

    settings = Settings(kb=Path(kb))
    kb_obj = KnowledgeBase(Path(kb))
    app = create_app(settings, service=AskService(kb_obj, settings, PacedNavigator(tokens, delay, pages=3)))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", backlog=4096)


def serve_fake_llm(port: int, tokens: int, delay: float) -> None:
    import uvicorn

    from server_fakes import FakeLLMStats, fake_llm_app

    words = [f"w{i} " for i in range(tokens - 1)]

    def answer_words(prompt: str) -> list[str]:
        import re

        found = re.search(r'<page path="([^"]+)" title="([^"]*)"', prompt)
        cite = f"[{found.group(2)}]({found.group(1)})" if found else "none"
        return words + [cite]

    uvicorn.run(fake_llm_app(FakeLLMStats(), delay, answer_words), host="127.0.0.1", port=port,
                log_level="warning", backlog=4096)


class Process:
    """A server in its own process. Its stderr goes to a file (``log``, or a temporary one): a
    never-read pipe would block a server that logs a lot once the pipe buffer fills."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None, health: str | None = None,
                 log: Path | None = None):
        self.health = health
        self._log_file = open(log, "w+") if log else tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed in __exit__)
        self.proc = subprocess.Popen([sys.executable, *args], env={**os.environ, **(env or {})},
                                     stdout=subprocess.DEVNULL, stderr=self._log_file, text=True)

    def __enter__(self) -> "Process":
        deadline = time.monotonic() + 60
        while self.health and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log_file.seek(0)
                raise RuntimeError(self._log_file.read() or "server exited")
            try:
                httpx.get(self.health, timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log_file.close()


# -- the client ----------------------------------------------------------------------------------


async def one_chat(client: httpx.AsyncClient, question: str) -> dict:
    start = time.perf_counter()
    marks: dict = {"tokens": 0, "error": None}
    try:
        async with client.stream("POST", "/api/chat", json={"question": question}) as response:
            marks["status"] = response.status_code
            event = None
            async for line in response.aiter_lines():
                now = time.perf_counter() - start
                if line.startswith("event: "):
                    event = line[7:]
                    if event == "pages":
                        marks.setdefault("pages", now)
                    elif event == "token":
                        marks.setdefault("first_token", now)
                        marks["tokens"] += 1
                    elif event == "done":
                        marks["done"] = now
                elif line.startswith("data: ") and event == "error":
                    payload = json.loads(line[6:])
                    marks["error"], marks["message"] = payload.get("code"), payload.get("message")
    except httpx.HTTPError as exc:
        marks["error"] = type(exc).__name__
    marks["total"] = time.perf_counter() - start
    if "done" not in marks and not marks["error"]:
        marks["error"] = "no done event"
    return marks


def ask_numbered(url: str, question: str, count: int) -> None:
    """Asks ``count`` questions one after another ("<question> 0", "<question> 1", ...: each its
    own, so no answer cache serves them), as a user of a running server would."""
    async def run() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=600) as client:
            for i in range(count):
                await one_chat(client, f"{question} {i}")
    asyncio.run(run())


async def load(url: str, streams: int, questions: list[str], pid: int | None = None) -> tuple[list[dict], float, float]:
    """Run ``streams`` chats at once. Returns (results, wall seconds, server CPU seconds per chat)."""
    limits = httpx.Limits(max_connections=streams + 10, max_keepalive_connections=streams + 10)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        await one_chat(client, questions[0])  # warm-up: lexical index, imports, connections
        cpu = cpu_seconds(pid) if pid else 0.0
        start = time.perf_counter()
        results = await asyncio.gather(*(one_chat(client, questions[i % len(questions)]) for i in range(streams)))
        wall = time.perf_counter() - start
        cpu_per_chat = (cpu_seconds(pid) - cpu) / streams if pid else float("nan")
        return list(results), wall, cpu_per_chat


async def sequential(url: str, paths: list[str], rounds: int = 60) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {"GET /api/index": [], "GET /api/pages/<path>": [], "GET /wiki/<path>": []}
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for i in range(rounds):
            path = paths[i % len(paths)]
            for label, route in (("GET /api/index", "/api/index"), ("GET /api/pages/<path>", f"/api/pages/{path}"),
                                 ("GET /wiki/<path>", f"/wiki/{path}")):
                start = time.perf_counter()
                response = await client.get(route)
                response.raise_for_status()
                timings[label].append(time.perf_counter() - start)
    return timings


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def ms(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value >= 0.0095 else f"{value * 1000:.1f} ms"


def report_load(label: str, results: list[dict], wall: float, cpu: float, llm_seconds: float) -> str:
    errors = [r for r in results if r["error"]]
    ok = [r for r in results if not r["error"]]
    if errors:
        counts = Counter(str(r["error"]) for r in errors)
        print(f"{label}: errors {dict(counts)}; first: {errors[0].get('message')}", file=sys.stderr)
    if not ok:
        return f"| {label} | {len(results)} | {len(errors)} | {wall:.2f} s | – | – | – | – | – |"
    own = [r["total"] - llm_seconds for r in ok]
    return (f"| {label} | {len(results)} | {len(errors)} | {wall:.2f} s | {ms(pct([r['pages'] for r in ok], .5))} / "
            f"{ms(pct([r['pages'] for r in ok], .95))} | {ms(pct([r['first_token'] for r in ok], .5))} / "
            f"{ms(pct([r['first_token'] for r in ok], .95))} | {ms(statistics.median(r['total'] for r in ok))} | "
            f"{ms(statistics.median(own))} / {ms(pct(own, .95))} | {ms(cpu)} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--articles", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=50)
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--only", choices=["paced", "full"], help="run one set-up")
    parser.add_argument("--serve-paced", nargs=2, metavar=("KB", "PORT"))
    parser.add_argument("--serve-fake-llm", metavar="PORT")
    args = parser.parse_args()
    if args.serve_paced:
        serve_paced(args.serve_paced[0], int(args.serve_paced[1]), args.tokens, args.delay)
        return
    if args.serve_fake_llm:
        serve_fake_llm(int(args.serve_fake_llm), args.tokens, args.delay)
        return

    from kb_ai.store.kb import KnowledgeBase
    from wikigen import generate_wiki

    llm_seconds = args.tokens * args.delay
    print(f"# kaas serve — {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d')}; {args.articles} articles, model streams {args.tokens} tokens every "
          f"{args.delay * 1000:.0f} ms = {llm_seconds:.2f} s per answer", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        made = generate_wiki(root, args.articles)
        KnowledgeBase(root).reindex()
        questions = [f"When was {name} founded and where?" for _path, name in made[:50]]
        paths = [path for path, _name in made[:20]]
        rows, extra = [], []
        if args.only in (None, "paced"):
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            with Process([__file__, "--serve-paced", str(root), str(port), "--tokens", str(args.tokens),
                          "--delay", str(args.delay)], health=url + "/healthz") as server:
                results, wall, cpu = asyncio.run(load(url, args.streams, questions, server.proc.pid))
                rows.append(report_load("paced navigator", results, wall, cpu, llm_seconds))
                for label, values in asyncio.run(sequential(url, paths)).items():
                    extra.append(f"| {label} | {ms(pct(values, .5))} | {ms(pct(values, .95))} |")
                single = asyncio.run(load(url, 1, questions))[0][0]
                extra.append(f"| POST /api/chat alone: first event / own time | {ms(single['pages'])} | "
                             f"{ms(single['total'] - llm_seconds)} |")
        if args.only in (None, "full"):
            for direct in (True, False):  # the gateway's direct HTTP transport, then litellm
                llm_port, port = free_port(), free_port()
                url = f"http://127.0.0.1:{port}"
                env = {"KAAS_MODEL": "openai/fake", "KAAS_API_BASE": f"http://127.0.0.1:{llm_port}/v1",
                       "KAAS_API_KEY": "k", "KAAS_CACHE": "false", "KAAS_CONCURRENCY": str(args.streams + 10),
                       "KAAS_TIMEOUT": "120", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                       "KAAS_DIRECT_HTTP": "true" if direct else "false"}
                with Process([__file__, "--serve-fake-llm", str(llm_port), "--tokens", str(args.tokens),
                              "--delay", str(args.delay)], health=f"http://127.0.0.1:{llm_port}/v1/chat/completions"), \
                     Process(["-m", "kb_ai.server", "--kb", str(root), "--port", str(port)], env=env,
                             health=url + "/healthz") as server:
                    results, wall, cpu = asyncio.run(load(url, args.streams, questions, server.proc.pid))
                    label = "full path, direct HTTP (default)" if direct else "full path, through litellm"
                    rows.append(report_load(label, results, wall, cpu, llm_seconds))

    print("\n| set-up | streams | errors | wall time | first event p50 / p95 | first token p50 / p95 | end-to-end p50 | "
          "server's own time p50 / p95 | server CPU per chat |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(row)
    if extra:
        print("\n| request (one at a time, paced navigator) | p50 | p95 |")
        print("| --- | ---: | ---: |")
        print("\n".join(extra))


if __name__ == "__main__":
    main()
