"""Issue 18's table, row by row (ours only; the upstream's figures from the issue are the reference).

    .venv/bin/python benchmarks/bench_issue18.py question    [--articles 100] [--questions 200]
    .venv/bin/python benchmarks/bench_issue18.py cold        --kb DIR [--runs 5]    (an indexed KB, e.g. 100,000 articles)
    .venv/bin/python benchmarks/bench_issue18.py memory      --kb DIR [--questions 100]
    .venv/bin/python benchmarks/bench_issue18.py idle        --kb DIR [--seconds 30]
    .venv/bin/python benchmarks/bench_issue18.py concurrency [--streams 200] [--tokens 50] [--delay 0.02]

- question: a running `kaas serve` (offline) of a generated wiki, questions one at a time: p50/p95
  per question (client wall time) and the server's CPU per question (/proc).
- cold: a fresh `kaas ask` process (offline) per run: wall time and the process's CPU time
  (user + system, from the children's rusage), after one warm-up run (page cache, snapshot).
- memory: `kaas serve` (offline, and with an OpenAI-compatible fake model) after N questions:
  VmRSS and VmHWM from /proc, and whether litellm was imported (/proc/PID/maps).
- idle: `kaas serve` warmed by one question, then left alone: CPU seconds used over the window.
- concurrency: 200 chats at once against a fake model streaming TOKENS tokens every DELAY s
  (selection answered at once), the server's model-call limit at the old shared 4 and at the
  serving default: first event (``pages``) p50/p95.

The machine is shared: wall times are noisy, so CPU time and counts are reported next to them,
and `uptime`'s load average is printed with every result.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_server import Process, ask_numbered, cpu_seconds, free_port, load, ms, one_chat, pct  # noqa: E402

KAAS = str(Path(sys.executable).parent / "kaas")
QUESTION = "When was the northern bridge founded?"


def load_average() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def header(what: str) -> None:
    print(f"# {what} — {platform.node()} {platform.machine()} {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {load_average()}",
          flush=True)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAAS_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", **extra)
    return env


def generated_kb(tmp: str, articles: int) -> Path:
    from kb_ai.store.kb import KnowledgeBase
    from wikigen import generate_wiki

    root = Path(tmp)
    generate_wiki(root, articles)
    KnowledgeBase(root).reindex()
    return root


def serve(kb: Path, env: dict[str, str] | None = None) -> tuple[Process, str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    return Process(["-m", "kb_ai.server", "--kb", str(kb), "--port", str(port)], env=env or clean_env(),
                   health=url + "/healthz"), url


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


# -- rows ------------------------------------------------------------------------------------------


def row_question(args) -> None:
    header(f"running server, one question at a time, {args.articles}-article wiki (offline)")
    with tempfile.TemporaryDirectory() as tmp:
        kb = generated_kb(tmp, args.articles)
        server, url = serve(kb)
        with server:
            async def run() -> tuple[list[float], float]:
                async with httpx.AsyncClient(base_url=url, timeout=60) as client:
                    for _ in range(5):
                        await one_chat(client, QUESTION)  # warm-up
                    cpu = cpu_seconds(server.proc.pid)
                    times = [(await one_chat(client, QUESTION))["total"] for _ in range(args.questions)]
                    return times, (cpu_seconds(server.proc.pid) - cpu) / args.questions
            times, cpu = asyncio.run(run())
    print(f"| per question p50 / p95 (client wall) | server CPU per question | questions | {load_average()} |")
    print("| ---: | ---: | ---: | --- |")
    print(f"| {ms(pct(times, .5))} / {ms(pct(times, .95))} | {ms(cpu)} | {args.questions} | |")


def row_cold(args) -> None:
    kb = args.kb
    articles = (kb / "wiki" / "master-index.md").read_text(encoding="utf-8").count("\n- [")
    header(f"cold `kaas ask` process (offline), {articles:,} articles")
    env = clean_env(PYTHONUNBUFFERED="1")

    def once() -> tuple[float, float]:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([KAAS, "ask", "--kb", str(kb), QUESTION], check=True, capture_output=True, env=env)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    once()  # page cache; writes the snapshot and index if they are missing
    samples = [once() for _ in range(args.runs)]
    print(f"| wall p50 (min) | CPU (user+sys) p50 (min) | runs | {load_average()} |")
    print("| ---: | ---: | ---: | --- |")
    walls, cpus = [s[0] for s in samples], [s[1] for s in samples]
    print(f"| {statistics.median(walls):.2f} s ({min(walls):.2f} s) | {statistics.median(cpus):.2f} s "
          f"({min(cpus):.2f} s) | {args.runs} | |")


def row_memory(args) -> None:
    from server_fakes import FakeLLMServer

    kb = args.kb
    header(f"`kaas serve` memory after {args.questions} questions")
    print(f"| set-up | VmRSS | VmHWM | litellm loaded | {load_average()} |")
    print("| --- | ---: | ---: | --- | --- |")
    with FakeLLMServer(token_delay=0) as llm:
        for label, env in (("offline", clean_env()),
                           ("OpenAI-compatible model (fake, 127.0.0.1)",
                            clean_env(KAAS_MODEL="openai/fake", KAAS_API_BASE=llm.api_base, KAAS_API_KEY="x",
                                      KAAS_CACHE="false"))):
            server, url = serve(kb, env)
            with server:
                ask_numbered(url, QUESTION, args.questions)
                time.sleep(2)  # the warm-up thread, if any, has finished
                pid = server.proc.pid
                maps = Path(f"/proc/{pid}/maps").read_text()
                print(f"| {label} | {status_kb(pid, 'VmRSS') / 1024:.0f} MB | {status_kb(pid, 'VmHWM') / 1024:.0f} MB "
                      f"| {'yes' if 'litellm' in maps else 'no'} | |", flush=True)


def row_idle(args) -> None:
    kb = args.kb
    header(f"`kaas serve` CPU while idle over {args.seconds} s")
    server, url = serve(kb)
    with server:
        asyncio.run(_one(url))
        time.sleep(3)  # let the warm-up settle
        pid = server.proc.pid
        before, start = cpu_seconds(pid), time.perf_counter()
        time.sleep(args.seconds)
        used, wall = cpu_seconds(pid) - before, time.perf_counter() - start
    print(f"| CPU seconds used | share of a core | window | {load_average()} |")
    print("| ---: | ---: | ---: | --- |")
    print(f"| {used:.2f} s | {used / wall:.4f} | {wall:.0f} s | |")


async def _one(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await one_chat(client, QUESTION)


def row_concurrency(args) -> None:
    header(f"{args.streams} concurrent chats against a fake model streaming {args.tokens} tokens every "
           f"{args.delay * 1000:.0f} ms, {args.articles} articles")
    print(f"| server's model-call limit | errors | first event p50 / p95 | first token p95 | end-to-end p50 | {load_average()} |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        kb = generated_kb(tmp, args.articles)
        from wikigen import generate_wiki  # noqa: F401  (questions name the generated pages)
        questions = [QUESTION]
        llm_port = free_port()
        fake = Process([str(REPO / "benchmarks" / "bench_server.py"), "--serve-fake-llm", str(llm_port),
                        "--tokens", str(args.tokens), "--delay", str(args.delay)],
                       health=f"http://127.0.0.1:{llm_port}/v1/chat/completions")
        with fake:
            for label, limits in (("4 shared by every call (the old default)", {"KAAS_SERVE_CONCURRENCY": "4"}),
                                  ("256, streams not limited apart", {"KAAS_SERVE_STREAMS": "256"}),
                                  ("serving defaults: 256, of which 32 streams", {})):
                env = clean_env(KAAS_MODEL="openai/fake", KAAS_API_BASE=f"http://127.0.0.1:{llm_port}/v1",
                                KAAS_API_KEY="k", KAAS_CACHE="false", KAAS_TIMEOUT="120", **limits)
                server, url = serve(kb, env)
                with server:
                    results, _wall, _cpu = asyncio.run(load(url, args.streams, questions, server.proc.pid))
                ok = [r for r in results if not r["error"]]
                errors = len(results) - len(ok)
                if not ok:
                    print(f"| {label} | {errors} | – | – | – | |")
                    continue
                print(f"| {label} | {errors} | {ms(pct([r['pages'] for r in ok], .5))} / "
                      f"{ms(pct([r['pages'] for r in ok], .95))} | {ms(pct([r['first_token'] for r in ok], .95))} | "
                      f"{ms(statistics.median(r['total'] for r in ok))} | {load_average()} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="row", required=True)
    p = sub.add_parser("question")
    p.add_argument("--articles", type=int, default=100)
    p.add_argument("--questions", type=int, default=200)
    p = sub.add_parser("cold")
    p.add_argument("--kb", type=Path, required=True)
    p.add_argument("--runs", type=int, default=5)
    p = sub.add_parser("memory")
    p.add_argument("--kb", type=Path, required=True)
    p.add_argument("--questions", type=int, default=100)
    p = sub.add_parser("idle")
    p.add_argument("--kb", type=Path, required=True)
    p.add_argument("--seconds", type=float, default=30)
    p = sub.add_parser("concurrency")
    p.add_argument("--streams", type=int, default=200)
    p.add_argument("--articles", type=int, default=100)
    p.add_argument("--tokens", type=int, default=50)
    p.add_argument("--delay", type=float, default=0.02)
    args = parser.parse_args()
    {"question": row_question, "cold": row_cold, "memory": row_memory, "idle": row_idle,
     "concurrency": row_concurrency}[args.row](args)


if __name__ == "__main__":
    main()
