"""Own CPU per question and per re-index (issue 32), in CPU time (the machine is shared).

    python benchmarks/bench_perf.py search  [--pages 100000] [--questions 30]
    python benchmarks/bench_perf.py reindex [--articles 100000] [--kb DIR] [--runs 3]

- search: the keyword index's ``search`` (BM25 scores and the top 10) over an index of PAGES
  pages, twice: "all ties" (every page the same length holding the question's two words once:
  every page ties) and "varied" (the catalog lines of a generated wiki, ``tests/wikigen.py``).
  CPU per question (``time.process_time``), p50 and p95, next to the top k as it was chosen
  before issue 32 (every page tied with the k-th sorted with a Python key), run interleaved
  on the same index; both must return the same pages.
- reindex: ``kaas index`` of a generated wiki of ARTICLES articles (made in a temporary folder
  unless ``--kb`` names one): the first index, then RUNS no-op re-indexes, each a fresh process:
  its CPU (user + system) and peak RSS from the children's rusage.

Every line says the machine, the date and the load average.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "py" / "src"))

import numpy as np  # noqa: E402

from kb_ai.offline.lexical import LexicalIndex, ScoredPage  # noqa: E402
from kb_ai.store.catalog import Catalog, CatalogEntry  # noqa: E402

KAAS = str(Path(sys.executable).parent / "kaas")


def header(what: str) -> None:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"# {what} — {platform.node()} {platform.machine()} {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {load}",
          flush=True)


def old_search(index: LexicalIndex, query: str, k: int) -> list[ScoredPage]:
    """``LexicalIndex.search`` before issue 32: every page tied with the k-th, sorted in Python."""
    scores = index._term_scores(index._query(query))
    hits = np.nonzero(scores > 0)[0]
    if len(hits) > k:
        kth = np.partition(scores[hits], len(hits) - k)[len(hits) - k]
        hits = hits[scores[hits] >= kth]
    ranked = sorted(hits, key=lambda i: (-float(scores[i]), index.paths[i]))[:k]
    return [ScoredPage(index.paths[i], float(scores[i])) for i in ranked]


def all_ties(n: int) -> LexicalIndex:
    rng = np.random.default_rng(5)
    paths = [f"topic-{i % 16}/page-{i:06d}.md" for i in rng.permutation(n)]
    indptr = np.array([0, n, 2 * n], dtype=np.int64)
    docs = np.concatenate([np.arange(n, dtype=np.int32)] * 2)
    return LexicalIndex(paths, {"river": 0, "bridg": 1}, indptr, docs, np.ones(2 * n, dtype=np.uint16),
                        np.full(n, 12.0), np.ones(n, dtype=bool), np.zeros(n, dtype=np.uint64))


def varied(n: int) -> LexicalIndex:
    from wikigen import generate_article

    rng = random.Random(7)
    entries = []
    for i in range(n):
        path, meta, _body, _name = generate_article(i, rng)
        entries.append(CatalogEntry(path=path, title=meta["title"], summary=meta["summary"], topic=meta["topic"]))
    return LexicalIndex.build(Path("."), Catalog(entries), with_bodies=False)


def cpu_ms(fn) -> tuple[float, object]:
    start = time.process_time()
    result = fn()
    return (time.process_time() - start) * 1000, result


def run_search(args) -> None:
    questions = {"all ties": ["river bridge"] * args.questions,
                 "varied": ["When was the northern bridge founded?", "ancient river festival", "modular compiler",
                            "solar reactor history",
                            "Which glacier has 12 principal parts?"] * (args.questions // 5 or 1)}
    for name, build in (("all ties", all_ties), ("varied", varied)):
        index = build(args.pages)
        index.search("warm up", 10)
        new, old = [], []
        for query in questions[name]:  # interleaved: the same load on both
            ms_new, got = cpu_ms(lambda index=index, query=query: index.search(query, 10))
            ms_old, want = cpu_ms(lambda index=index, query=query: old_search(index, query, 10))
            assert got == want, (query, got, want)
            new.append(ms_new)
            old.append(ms_old)
        header(f"search, {name}, {args.pages:,} pages, top 10")
        for label, spent in (("now", new), ("before", old)):
            spent.sort()
            print(f"{label:>6}: CPU per question p50 {statistics.median(spent):.1f} ms, "
                  f"p95 {spent[int(len(spent) * 0.95) - 1]:.1f} ms ({len(spent)} questions)")


def child_run(cmd: list[str]) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS MB) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss // 1024  # the largest child so far: run the biggest first


def run_reindex(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        kb = Path(args.kb) if args.kb else Path(tmp) / "kb"
        if not args.kb:
            from wikigen import generate_wiki

            generate_wiki(kb, args.articles)
            (kb / "raw").mkdir(exist_ok=True)
        cmd = [KAAS, "--kb", str(kb), "index"]
        wall, cpu, rss = child_run(cmd)
        header(f"kaas index, {args.articles:,} articles")
        print(f"first index: {wall:.2f} s wall, {cpu:.2f} s CPU, peak RSS {rss} MB", flush=True)
        time.sleep(2.5)  # past the racy window: files written just before an index are read again
        for run in range(args.runs):
            wall, cpu, _rss = child_run(cmd)
            print(f"no-op re-index {run + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    search = sub.add_parser("search")
    search.add_argument("--pages", type=int, default=100_000)
    search.add_argument("--questions", type=int, default=30)
    reindex = sub.add_parser("reindex")
    reindex.add_argument("--articles", type=int, default=100_000)
    reindex.add_argument("--kb", default=None)
    reindex.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    {"search": run_search, "reindex": run_reindex}[args.what](args)


if __name__ == "__main__":
    main()
