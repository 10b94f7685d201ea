"""First event under N concurrent chats (issue 17 item 5): `kaas serve`'s default configuration
against a slow fake model, set-ups measured alternately in one run.

    .venv/bin/python benchmarks/bench_first_event.py [--streams 200] [--tokens 50] [--delay 0.02]
        [--rounds 3] [--setup LABEL=PYTHONPATH:ENV=V,ENV=V ...] [--client lean|httpx] [--profile DIR]

- The model: bench_server.py's fake OpenAI-compatible server in its own process (selection answered
  at once, answers streamed TOKENS tokens DELAY s apart).
- The server: ``python -m kb_ai.server`` (= ``kaas serve``: watcher, warm-up, uvicorn's
  defaults) on a generated 100-article wiki, one process per set-up and round.
- The client: by default a lean one (a raw socket per chat that looks for ``event: pages`` /
  ``event: token`` / ``event: done`` in the bytes; no SSE parser), because on a 2-core machine
  the load generator's own CPU competes with the server; ``--client httpx`` is
  bench_server.py's httpx client. The client's CPU is reported.
- Set-ups: ``--setup "main=../main/py/src"`` runs the server with that PYTHONPATH in front
  (e.g. main's code); ``--setup "w2=:KAAS_SERVE_WORKERS=2"`` sets variables. Default: this tree.

Reported per set-up and round: ``pages`` (the first event with content) p50/p95, ``status`` if
the server sends one, first token p95, end-to-end p50, errors, CPU seconds per chat of the
server (all its processes), of the fake model and of the client, and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_server import Process, free_port, ms, one_chat, pct  # noqa: E402

QUESTION = "When was the northern bridge founded?"
WARM_UP_CHATS = 8
MARKS = {b"event: status": "status_event", b"event: pages": "pages", b"event: token": "first_token",
         b"event: done": "done", b"event: error": "error_event"}


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process and all its descendants, living ones (/proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += times.get(current, 0.0)
        todo.extend(child for child, parent in parents.items() if parent == current)
    return total


async def lean_chat(host: str, port: int, question: str) -> dict:
    """One chat over a raw connection: the times at which the event names first appear."""
    start = time.perf_counter()
    marks: dict = {"error": None}
    body = json.dumps({"question": question}).encode()
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        tail = b""
        while True:
            data = await reader.read(65536)
            if not data:
                break
            now = time.perf_counter() - start
            window = tail + data
            for needle, name in MARKS.items():
                if name not in marks and needle in window:
                    marks[name] = now
            tail = data[-16:]
        writer.close()
    except OSError as exc:
        marks["error"] = type(exc).__name__
    marks["total"] = time.perf_counter() - start
    if marks["error"] is None and "error_event" in marks:
        marks["error"] = "error event"
    if marks["error"] is None and "done" not in marks:
        marks["error"] = "no done event"
    return marks


async def run_load(url: str, port: int, streams: int, client_kind: str,
                   sequential: bool = False) -> tuple[list[dict], float]:
    """``streams`` chats at once after a warm-up. Returns (results, client CPU seconds)."""
    if client_kind == "lean":
        # Warm-up: a few chats at once, so that every worker process (--workers) has loaded its
        # catalog and keyword index before the measured burst.
        await asyncio.gather(*(lean_chat("127.0.0.1", port, QUESTION) for _ in range(WARM_UP_CHATS)))
        cpu = time.process_time()
        if sequential:  # one at a time: the server's CPU per chat without contention
            results = [await lean_chat("127.0.0.1", port, QUESTION) for _ in range(streams)]
            return results, time.process_time() - cpu
        results = await asyncio.gather(*(lean_chat("127.0.0.1", port, QUESTION) for _ in range(streams)))
        return list(results), time.process_time() - cpu
    import httpx

    limits = httpx.Limits(max_connections=streams + 10, max_keepalive_connections=streams + 10)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        await asyncio.gather(*(one_chat(client, QUESTION) for _ in range(WARM_UP_CHATS)))
        cpu = time.process_time()
        results = await asyncio.gather(*(one_chat(client, QUESTION) for _ in range(streams)))
        return list(results), time.process_time() - cpu


def parse_setup(text: str) -> tuple[str, str, dict[str, str]]:
    label, _, rest = text.partition("=")
    path, _, variables = rest.partition(":")
    env = dict(item.split("=", 1) for item in variables.split(",") if item)
    return label, path, env


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--articles", type=int, default=100)
    parser.add_argument("--tokens", type=int, default=50)
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--client", choices=["lean", "httpx"], default="lean")
    parser.add_argument("--setup", action="append", default=[])
    parser.add_argument("--sequential", action="store_true", help="chats one at a time (CPU per chat)")
    parser.add_argument("--profile", type=Path, help="py-spy record each server into this folder")
    parser.add_argument("--profile-seconds", type=int, default=0, help="only the first N seconds (the burst's start)")
    args = parser.parse_args()
    setups = [parse_setup(s) for s in args.setup] or [("this tree", "", {})]

    from kb_ai.store.kb import KnowledgeBase
    from wikigen import generate_wiki

    print(f"# {args.streams} concurrent chats, fake model streaming {args.tokens} tokens {args.delay * 1000:.0f} ms "
          f"apart, {args.articles} articles, {args.client} client — {platform.node()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    print("| set-up | round | errors | pages p50 / p95 | status p95 | first token p95 | end-to-end p50 | "
          "server CPU/chat | fake CPU/chat | client CPU/chat | load |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generate_wiki(root, args.articles)
        KnowledgeBase(root).reindex()
        llm_port = free_port()
        fake = Process([str(REPO / "benchmarks" / "bench_server.py"), "--serve-fake-llm", str(llm_port),
                        "--tokens", str(args.tokens), "--delay", str(args.delay)],
                       health=f"http://127.0.0.1:{llm_port}/v1/chat/completions")
        with fake:
            summary: dict[str, list[float]] = {label: [] for label, _, _ in setups}
            for round_ in range(1, args.rounds + 1):
                for label, path, extra in setups:
                    env = {k: v for k, v in os.environ.items() if not k.startswith("KAAS_")}
                    env.update(KAAS_MODEL="openai/fake", KAAS_API_BASE=f"http://127.0.0.1:{llm_port}/v1",
                               KAAS_API_KEY="k", KAAS_CACHE="false", KAAS_TIMEOUT="120",
                               LITELLM_LOCAL_MODEL_COST_MAP="True", **extra)
                    if path:
                        env["PYTHONPATH"] = path
                    port = free_port()
                    url = f"http://127.0.0.1:{port}"
                    server = Process(["-m", "kb_ai.server", "--kb", str(root), "--port", str(port)], env=env,
                                     health=url + "/healthz")
                    with server:
                        time.sleep(1.0)  # the warm-up thread
                        spy = None
                        if args.profile:
                            args.profile.mkdir(parents=True, exist_ok=True)
                            target = args.profile / f"{label.replace(' ', '_')}-{round_}.txt"
                            duration = ["-d", str(args.profile_seconds)] if args.profile_seconds else []
                            spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "-s",
                                                    "-f", "raw", "-r", "200", *duration, "-o", str(target), "-p",
                                                    str(server.proc.pid)], stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.DEVNULL)
                            time.sleep(1.0)
                        server_cpu, fake_cpu = tree_cpu(server.proc.pid), tree_cpu(fake.proc.pid)
                        results, client_cpu = asyncio.run(run_load(url, port, args.streams, args.client, args.sequential))
                        server_cpu = tree_cpu(server.proc.pid) - server_cpu
                        fake_cpu = tree_cpu(fake.proc.pid) - fake_cpu
                        if spy is not None:
                            spy.send_signal(2)
                            spy.wait(30)
                    ok = [r for r in results if not r["error"]]
                    n = len(results)
                    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
                    if not ok:
                        print(f"| {label} | {round_} | {n} | – | – | – | – | | | | {load} |", flush=True)
                        continue
                    pages = [r["pages"] for r in ok if "pages" in r]
                    status = [r["status_event"] for r in ok if "status_event" in r]  # the lean client only
                    summary[label].append(pct(pages, .95))
                    print(f"| {label} | {round_} | {n - len(ok)} | {ms(pct(pages, .5))} / {ms(pct(pages, .95))} | "
                          f"{ms(pct(status, .95)) if status else '–'} | "
                          f"{ms(pct([r['first_token'] for r in ok], .95))} | "
                          f"{ms(statistics.median(r['total'] for r in ok))} | {ms(server_cpu / n)} | "
                          f"{ms(fake_cpu / n)} | {ms(client_cpu / n)} | {load} |", flush=True)
            for label, values in summary.items():
                if values:
                    print(f"# {label}: pages p95 over rounds: median {ms(statistics.median(values))}, "
                          f"min {ms(min(values))}, max {ms(max(values))}")


if __name__ == "__main__":
    main()
