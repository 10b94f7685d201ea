"""Benchmark `kaas compile`: time per source, no-op re-run, LLM calls per source, peak memory.

    .venv/bin/python benchmarks/bench_compile.py                 # 1,000 and 10,000 sources
    .venv/bin/python benchmarks/bench_compile.py --sizes 200     # a quick run
    .venv/bin/python benchmarks/bench_compile.py --modes offline # skip the LLM path

A synthetic corpus (Markdown, text and HTML notes in 25 folders, 2% exact copies) is compiled
twice per mode, each mode in a fresh subprocess (so peak RSS is that run's):

* ``offline``: no model; the whole time is kaas's own work.
* ``llm``: a zero-latency fake OpenAI-compatible server on 127.0.0.1 (Starlette + uvicorn in
  this process) answers plan and write calls instantly. The run uses concurrency 1, so calls do
  not overlap: "gateway time" is the wall time spent inside ``LLMGateway.complete_json`` (schema
  validation, response cache, litellm, the loopback round trip), of which "HTTP call time" is what
  the gateway records per call; "kaas time" is the wall time minus the gateway time.

Prints a table and the JSON of every run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

WORDS = (
    "invoice receipt bank sync ledger tax estimate quarter client project budget release deploy staging "
    "incident alert token rotation worker queue export report account plan pricing trial discount team "
    "review meeting decision owner deadline mobile web api database backup migration schema customer "
    "support ticket refund currency payment card transfer reconcile category rule vendor contract"
).split()
TOPICS = [f"area-{i:02d}" for i in range(25)]


# ---------------------------------------------------------------------------------------------
# corpus


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 16))]
    return " ".join(words).capitalize() + "."


def make_corpus(raw: Path, n: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    originals: list[tuple[str, str]] = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        folder = raw / topic
        folder.mkdir(parents=True, exist_ok=True)
        if originals and rng.random() < 0.02:  # an exact copy of an earlier document
            name, text = rng.choice(originals)
            (folder / f"copy-{i:05d}-{name}").write_text(text, encoding="utf-8")
            continue
        title = f"Note {i:05d} on {rng.choice(WORDS)} {rng.choice(WORDS)}"
        sections = []
        for s in range(rng.randint(2, 4)):
            paragraphs = [" ".join(sentence(rng) for _ in range(rng.randint(2, 5))) for _ in range(rng.randint(1, 3))]
            sections.append((f"Part {s + 1}: {rng.choice(WORDS)}", paragraphs))
        kind = rng.choice(["md", "md", "txt", "html"])
        if kind == "md":
            body = f"---\ntitle: {title}\ndate: 2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}\n---\n# {title}\n\n"
            body += "\n\n".join(f"## {h}\n\n" + "\n\n".join(ps) for h, ps in sections)
        elif kind == "txt":
            body = f"{title}\n{'=' * len(title)}\n\n" + "\n\n".join(f"{h}\n\n" + "\n\n".join(ps) for h, ps in sections)
        else:
            body = (f"<html><head><title>{title}</title></head><body><nav><a href='/'>Home</a></nav><article>"
                    f"<h1>{title}</h1>" + "".join(f"<h2>{h}</h2>" + "".join(f"<p>{p}</p>" for p in ps)
                                                    for h, ps in sections) + "</article></body></html>")
        name = f"note-{i:05d}.{kind}"
        (folder / name).write_text(body, encoding="utf-8")
        originals.append((name, body))


# ---------------------------------------------------------------------------------------------
# the zero-latency fake server

_SOURCE = re.compile(r'<source path="([^"]+)" title="([^"]*)"[^>]*>\n(.*?)\n</source>', re.S)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "note"


def fake_reply(body: dict) -> dict:
    text = "\n".join(str(m.get("content") or "") for m in body.get("messages", []))
    if "decide where its knowledge belongs" in text:
        _, title, _ = _SOURCE.search(text).groups()
        folder = re.search(r'folder-topic="([^"]*)"', text)
        value = {"updates": [], "creates": [{"topic": folder.group(1) if folder else "general", "slug": _slug(title),
                                              "title": title, "summary": f"What the notes say about {title}."}]}
    else:
        sources = _SOURCE.findall(text)
        title_match = re.search(r'Write the new article "(.*?)"', text) or re.search(r'<article [^>]*title="([^"]*)"', text)
        title = title_match.group(1) if title_match else "Article"
        body_text = "\n\n".join(s[2] for s in sources)
        if "Return `edits`" in text:
            value = {"summary": f"Notes about {title}.", "tags": ["notes"],
                     "edits": [{"heading": "Update", "action": "add", "text": body_text}]}
        else:
            value = {"summary": f"Notes about {title}.", "tags": ["notes"], "body": f"# {title}\n\n{body_text}"}
    content = json.dumps(value)
    return {
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1_700_000_000, "model": "bench-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": len(text) // 4, "completion_tokens": len(content) // 4,
                  "total_tokens": (len(text) + len(content)) // 4},
    }


def fake_response(body: dict):
    """``fake_reply`` as the server sends it: JSON, or a stream when the request asks for one
    (compile's plan and write calls stream)."""
    from starlette.responses import JSONResponse, Response

    reply = fake_reply(body)
    if not body.get("stream"):
        return JSONResponse(reply)
    content = reply["choices"][0]["message"]["content"]

    def event(choice: dict | None, usage: dict | None = None) -> str:
        payload = {"id": reply["id"], "object": "chat.completion.chunk", "created": reply["created"],
                   "model": reply["model"], "choices": [choice] if choice else [], **({"usage": usage} if usage else {})}
        return f"data: {json.dumps(payload)}\n\n"

    events = [event({"index": 0, "delta": {"role": "assistant", "content": content[i:i + 200]}, "finish_reason": None})
              for i in range(0, len(content), 200)]
    events += [event({"index": 0, "delta": {}, "finish_reason": "stop"}), event(None, reply["usage"]), "data: [DONE]\n\n"]
    return Response("".join(events), media_type="text/event-stream")


def start_fake_server() -> tuple[str, object]:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def chat(request: Request) -> JSONResponse:
        return fake_response(await request.json())

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}/v1", server


# ---------------------------------------------------------------------------------------------
# one measured run (in a child process)


def child(kb: Path, mode: str, api_base: str | None) -> dict:
    from kb_ai.compile.pipeline import run_compile
    from kb_ai.config import Settings

    if mode == "llm":
        settings = Settings(kb=kb, model="openai/bench-model", api_base=api_base, api_key="sk-bench", concurrency=1)
    else:
        settings = Settings(kb=kb)
    llm_seconds: list[float] = []
    gateway_seconds: list[float] = []

    if mode == "llm":
        from kb_ai.llm import gateway, usage
        from kb_ai.llm.transports.litellm import load_litellm

        original_add = usage.UsageMeter.add

        def add(self, call):
            llm_seconds.append(call.seconds)
            original_add(self, call)

        usage.UsageMeter.add = add
        original_json = gateway.LLMGateway.complete_json

        async def complete_json(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return await original_json(self, *args, **kwargs)
            finally:
                gateway_seconds.append(time.perf_counter() - start)

        gateway.LLMGateway.complete_json = complete_json
        load_litellm()  # import cost (seconds) is not per-source work: pay it before the clock starts
    else:
        import kb_ai.compile.dedup  # noqa: F401
        import trafilatura  # noqa: F401
    t0 = time.perf_counter()
    first = run_compile(settings, progress=False)
    first_seconds = time.perf_counter() - t0
    first_llm = sum(llm_seconds)
    first_gateway = sum(gateway_seconds)
    t1 = time.perf_counter()
    second = run_compile(settings, progress=False)
    noop_seconds = time.perf_counter() - t1
    sources = first.sources["total"]
    return {
        "mode": mode, "sources": sources, "compiled": sources - first.sources["duplicates"] - first.sources["skipped"],
        "articles": len(first.created), "first_seconds": round(first_seconds, 2),
        "llm_seconds": round(first_llm, 2), "gateway_seconds": round(first_gateway, 2),
        "kaas_seconds": round(first_seconds - first_gateway, 2),
        "kaas_ms_per_source": round(1000 * (first_seconds - first_gateway) / sources, 2),
        "gateway_ms_per_call": round(1000 * first_gateway / max(1, len(gateway_seconds)), 2),
        "http_ms_per_call": round(1000 * first_llm / max(1, len(llm_seconds)), 2),
        "llm_calls": first.llm_calls, "llm_calls_per_source": round(first.llm_calls / sources, 3),
        "stages": {s.name: s.seconds for s in first.stages},
        "noop_seconds": round(noop_seconds, 2), "noop_llm_calls": second.llm_calls,
        "noop_stages": {s.name: s.seconds for s in second.stages},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "failed": len(first.failed) + len(first.held),
    }


def run_child(kb: Path, mode: str, api_base: str | None) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(kb), mode, api_base or ""],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"child failed ({mode}, {kb}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--modes", nargs="+", default=["offline", "llm"], choices=["offline", "llm"])
    parser.add_argument("--child", nargs=3, metavar=("KB", "MODE", "API_BASE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kb, mode, api_base = args.child
        print(json.dumps(child(Path(kb), mode, api_base or None)))
        return
    api_base = None
    if "llm" in args.modes:
        api_base, _ = start_fake_server()
    print(f"# machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"{platform.system()} {platform.release()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    results = []
    with tempfile.TemporaryDirectory(prefix="kaas-bench-") as tmp:
        for n in args.sizes:
            corpus = Path(tmp) / f"corpus-{n}"
            make_corpus(corpus, n)
            for mode in args.modes:
                kb = Path(tmp) / f"kb-{n}-{mode}"
                shutil.copytree(corpus, kb / "raw")
                result = run_child(kb, mode, api_base)
                results.append(result)
                print(json.dumps(result), flush=True)
                shutil.rmtree(kb)
    print()
    print("| sources | mode | first compile | kaas time / source | LLM calls / source | no-op re-run | "
          "no-op LLM calls | peak RSS |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['sources']:,} | {r['mode']} | {r['first_seconds']:.1f} s | {r['kaas_ms_per_source']:.1f} ms | "
              f"{r['llm_calls_per_source']:.2f} | {r['noop_seconds']:.2f} s | {r['noop_llm_calls']} | "
              f"{r['peak_rss_mb']:.0f} MB |")


if __name__ == "__main__":
    main()
