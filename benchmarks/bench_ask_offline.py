"""Offline `kaas ask` speed on generated wikis.

    .venv/bin/python benchmarks/bench_ask_offline.py [SIZES...]     (default: 1000 5000)

For each size: index time, first ask (builds and saves the lexical index), a cold `kaas ask`
process (wall time, and the part spent importing), and warm in-process asks (mean over 40
questions, each naming one article's invented proper name; hit rate = gold page ranked first).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from kb_ai.config import load_settings  # noqa: E402
from kb_ai.navigate.ask import ask, build_service  # noqa: E402
from kb_ai.navigate.records import AskRequest  # noqa: E402
from kb_ai.store.kb import KnowledgeBase  # noqa: E402
from wikigen import generate_wiki  # noqa: E402

KAAS = str(Path(sys.executable).with_name("kaas"))


def cold_process(root: Path, question: str) -> tuple[float, float]:
    env = {**os.environ, "KAAS_KB": str(root)}
    env.pop("KAAS_MODEL", None)
    start = time.perf_counter()
    subprocess.run([KAAS, "ask", question], env=env, check=True, capture_output=True)
    total = time.perf_counter() - start
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import kb_ai.cli, kb_ai.navigate.ask, kb_ai.navigate.offline_navigator"],
                   check=True, capture_output=True)
    imports = time.perf_counter() - start
    return total, imports


def bench(size: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        made = generate_wiki(root, size)
        start = time.perf_counter()
        KnowledgeBase(root).reindex()
        index_s = time.perf_counter() - start
        settings = load_settings(root, env={})
        start = time.perf_counter()
        asyncio.run(ask(build_service(settings), AskRequest(question="bridge history")))
        first_s = time.perf_counter() - start
        cold_total, cold_imports = min(cold_process(root, f"When was {made[size // 2][1]} founded?") for _ in range(3))
        service = build_service(settings)
        rng = random.Random(1)
        sample = rng.sample(made, min(40, len(made)))  # 40 questions, fewer on a tiny wiki
        times, hits = [], 0
        for path, name in sample:
            start = time.perf_counter()
            result = asyncio.run(ask(service, AskRequest(question=f"When was {name} founded and where?")))
            times.append(time.perf_counter() - start)
            hits += bool(result.pages) and result.pages[0]["path"] == path
        return {"size": size, "index_s": index_s, "first_ask_s": first_s, "cold_total_s": cold_total,
                "cold_imports_s": cold_imports, "warm_mean_ms": statistics.mean(times) * 1000,
                "warm_p95_ms": sorted(times)[int(len(times) * 0.95) - 1] * 1000, "hit_rate": hits / len(sample)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[1000, 5000], help="wiki sizes (articles)")
    sizes = parser.parse_args().sizes
    print(f"# offline ask — {platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}")
    print("| articles | kaas index | first ask (builds index) | cold `kaas ask` process | of which imports | warm ask mean | warm p95 | gold page first |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for size in sizes:
        r = bench(size)
        print(f"| {r['size']:,} | {r['index_s']:.2f} s | {r['first_ask_s']:.2f} s | {r['cold_total_s']:.2f} s | "
              f"{r['cold_imports_s']:.2f} s | {r['warm_mean_ms']:.1f} ms | {r['warm_p95_ms']:.1f} ms | {r['hit_rate']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
