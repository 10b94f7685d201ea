"""`kaas compile` in-process and on a local Ray cluster (the `cluster` setting), same corpus, same
fake model answering every call after ``--latency`` seconds.

    PYTHONPATH=py/src .venv/bin/python benchmarks/bench_cluster.py [--sources 1000] [--latency 1.0]
        [--concurrency 16]

Per mode a fresh copy of bench_compile.py's corpus is compiled by ``kaas compile --json`` in its
own process: wall time, model calls (as the fake saw them), the driver's peak RSS (its process
only: the Ray processes are not the driver), and on Ray the report's note (tasks, workers, tasks
per worker, seconds until the cluster was ready). "Ray overhead per task" = (Ray wall - cluster
start - in-process wall) / tasks. Also checks the two wikis are byte-identical. Prints the load
average: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_compile import make_corpus  # noqa: E402
from bench_compile_concurrency import SlowModel  # noqa: E402

# The compile as `kaas compile` runs it, then the driver process's own peak RSS (Ray's processes
# are others).
DRIVER = """
import json, resource, sys
from kb_ai.compile.pipeline import run_compile
from kb_ai.config import load_settings
report = run_compile(load_settings(sys.argv[1]), progress=False)
print(json.dumps({"notes": report.notes, "failed": report.failed}))
print(json.dumps({"maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""
SPREAD = re.compile(r"ran on the Ray cluster .*?: (\d+) tasks on (\d+) workers(?:, (\d+)-(\d+) per worker)? "
                    r"\(cluster ready after ([\d.]+) s\)")


def snapshot(kb: Path) -> dict[str, bytes]:
    wiki = kb / "wiki"
    return {p.relative_to(wiki).as_posix(): p.read_bytes() for p in sorted(wiki.rglob("*"))
            if p.is_file() and p.name != "log.md"}


def run(kb: Path, api_base: str, concurrency: int, cluster: str | None, model: SlowModel) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAAS_")}
    env.update(KAAS_MODEL="openai/bench-model", KAAS_API_BASE=api_base, KAAS_API_KEY="sk-bench", KAAS_CACHE="false",
               KAAS_CONCURRENCY=str(concurrency), KAAS_TIMEOUT="600")
    if cluster:
        env["KAAS_CLUSTER"] = cluster
    model.calls = 0
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(kb)], capture_output=True, text=True, env=env)
    out, err, status = proc.stdout, proc.stderr, proc.returncode
    wall = time.perf_counter() - start
    lines = [line for line in out.splitlines() if line.startswith("{")]  # Ray prints notices too
    peak = json.loads(lines[-1])["maxrss_kib"] if status == 0 and len(lines) == 2 else 0
    out = lines[0] if status == 0 and len(lines) == 2 else ""
    report = json.loads(out) if out.strip().startswith("{") else {}
    note = next((n for n in report.get("notes", []) if n.startswith("ran on the Ray cluster")), "")
    return {"status": status, "wall": wall, "calls": model.calls, "peak_kib": peak, "note": note,
            "failed": len(report.get("failed", [])), "stderr": err[-500:]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sources", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    model = SlowModel(args.latency)
    api_base = model.start()
    print(f"# {args.sources} sources, fake model {args.latency:g} s per call, concurrency {args.concurrency}, "
          f"{os.cpu_count()} cores, load {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        make_corpus(corpus / "raw", args.sources)
        results = {}
        for mode, cluster in (("in-process", None), ("ray local", "local")):
            kb = Path(tmp) / mode.replace(" ", "-")
            shutil.copytree(corpus, kb)
            results[mode] = run(kb, api_base, args.concurrency, cluster, model)
            r = results[mode]
            print(f"{mode}: exit {r['status']}, {r['wall']:.1f} s, {r['calls']} calls, failed {r['failed']}, "
                  f"driver peak RSS {r['peak_kib'] / 1024:.0f} MB; {r['note']} {r['stderr'] if r['status'] else ''}",
                  flush=True)
        same = snapshot(Path(tmp) / "in-process") == snapshot(Path(tmp) / "ray-local")
    base, ray = results["in-process"], results["ray local"]
    match = SPREAD.search(ray["note"])
    if match:
        tasks, ready = int(match.group(1)), float(match.group(5))
        per_task = (ray["wall"] - ready - base["wall"]) / max(1, tasks)
        print(f"wikis byte-identical: {same}; Ray overhead per task: {per_task * 1000:.0f} ms "
              f"({tasks} tasks, cluster start {ready:.1f} s); load {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    else:
        print(f"wikis byte-identical: {same}; no Ray note in the report")


if __name__ == "__main__":
    main()
