"""Autolinks (issue 30): links per article, orphans and broken links before/after the compile's
mention links, a no-change recompile, and multi-hop reading with and without the link graph.

    .venv/bin/python benchmarks/bench_autolink.py [--corpus DIR ...] [--hotpotqa N] [--multihop]

1. Each ``--corpus`` folder (default: ../shared/eval-data/realdocs-dev) is copied into a temp KB's
   raw/ and compiled offline twice: without the autolink stage ("before"), then ``--full`` with it
   ("after"); then once more with nothing changed, which must write no file (bytes and mtimes of
   wiki/ and the manifest compared). Counted: articles, links to other articles per article,
   orphans (no other article links to them), broken links (``kaas lint``).
2. ``--hotpotqa N``: the HotpotQA distractor corpus (one source per paragraph) compiled offline
   with the autolink stage, then ``kaas eval`` offline (2 rounds) on the first N questions:
   mentions only (no link graph), links as candidates without preference, and with
   ``bridge.LINK_PREFERENCE``. 3. ``--multihop``: the same three on bench_multihop.py's chains
   compiled from raw/ (their names mentioned in prose).
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from kb_ai.compile import pipeline
from kb_ai.compile.pipeline import run_compile
from kb_ai.config import Settings, load_settings
from kb_ai.navigate import bridge
from kb_ai.quality.eval import run_eval_file
from kb_ai.quality.lint import lint_kb
from kb_ai.store.articles import load_article
from kb_ai.store.backlinks import page_links
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.paths import slugify

REPO = Path(__file__).resolve().parents[1]
SHARED = next((up / "shared" / "eval-data" for up in REPO.parents if (up / "shared" / "eval-data").is_dir()),
              REPO.parent / "shared" / "eval-data")


def graph(root: Path) -> dict[str, float]:
    kb = KnowledgeBase(root)
    kb.reindex()
    catalog = kb.catalog()
    into: dict[str, int] = {e.path: 0 for e in catalog.entries}
    links = 0
    for entry in catalog.entries:
        out = page_links(entry.path, load_article(kb.wiki_dir, entry.path).body, catalog)
        links += len(out)
        for target in out:
            into[target] += 1
    broken = sum(1 for f in lint_kb(kb).findings if f.check == "broken-link")
    n = len(catalog)
    return {"articles": n, "links_per_article": links / n if n else 0.0,
            "orphans": sum(1 for v in into.values() if v == 0), "broken": broken}


def state(root: Path) -> dict[str, tuple[bytes, int]]:
    files = [*sorted((root / "wiki").rglob("*.md")), root / ".kaas" / "manifest.json"]
    return {str(f.relative_to(root)): (f.read_bytes(), f.stat().st_mtime_ns) for f in files}


def without_autolink():
    """The compile as it was before the autolink stage (for "before")."""
    saved = pipeline.autolink
    pipeline.autolink = lambda run, written, check=(): False
    return saved


def corpus(folder: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(folder, root / "raw", ignore=shutil.ignore_patterns("SOURCE.md"))
        saved = without_autolink()
        try:
            run_compile(Settings(kb=root), progress=False)
        finally:
            pipeline.autolink = saved
        before = graph(root)
        start = time.perf_counter()
        report = run_compile(Settings(kb=root), full=True, progress=False)
        seconds = time.perf_counter() - start
        after = graph(root)
        stage = report.stage("autolink")
        snapshot = state(root)
        again = run_compile(Settings(kb=root), progress=False)
        unchanged = state(root) == snapshot and not again.updated and not again.created
        print(f"| {folder.name} | {before['articles']} | {before['links_per_article']:.2f} → "
              f"{after['links_per_article']:.2f} | {before['orphans']} → {after['orphans']} | "
              f"{before['broken']} → {after['broken']} | {stage.counts.get('links', 0)} in "
              f"{stage.counts.get('linked', 0)} articles, {stage.seconds:.2f} s (compile {seconds:.1f} s) | "
              f"{'nothing' if unchanged else 'CHANGED'} |")


def hotpot_raw(root: Path) -> Path:
    data = SHARED / "hotpotqa-dev500"
    used: set[str] = set()
    for line in (data / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        title = " ".join(html.unescape(record["title"]).split())
        bucket = int(hashlib.sha1(title.encode("utf-8")).hexdigest(), 16) % 64
        slug = slugify(title, fallback="page")
        path, n = f"p{bucket:02d}/{slug}.md", 2
        while path in used:
            path, n = f"p{bucket:02d}/{slug}-{n}.md", n + 1
        used.add(path)
        file = root / "raw" / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(f"# {title}\n\n{' '.join(record['text'].split())}\n", encoding="utf-8")
    questions = root / "questions.jsonl"
    questions.write_text("".join(json.dumps({"id": q["id"], "question": q["question"], "gold_pages": q["gold_titles"],
                                             "answer": q["answer"], "answer_aliases": q.get("answer_aliases", [])},
                                            ensure_ascii=False) + "\n"
                                 for q in map(json.loads, (data / "questions.jsonl").read_text().splitlines())),
                         encoding="utf-8")
    return questions


CONFIGS = [("mentions only (no link graph)", dict(links=False, preference=0.0)),
           ("links, no preference", dict(links=True, preference=0.0)),
           ("links, preference", dict(links=True, preference=None))]


def compare(root: Path, questions: Path, limit: int | None, label: str, rounds: int = 2) -> None:
    settings = replace(load_settings(root, env={}), max_rounds=rounds)
    original_options, original_preference = bridge.BridgeOptions, bridge.LINK_PREFERENCE
    print(f"\n{label}\n\n| navigation | all gold pages read | answer contains gold | pages read |\n"
          "| --- | ---: | ---: | ---: |")
    for name, config in CONFIGS:
        preference = original_preference if config["preference"] is None else config["preference"]

        class Options(original_options):  # the flags of this configuration, wherever options are made
            links_flag = config["links"]  # bound now, not when an instance is made

            def __init__(self, *args, **kwargs):
                kwargs.setdefault("links", self.links_flag)
                super().__init__(*args, **kwargs)

        bridge.BridgeOptions, bridge.LINK_PREFERENCE = Options, preference
        try:
            s = run_eval_file(settings, questions, limit=limit).summary()
        finally:
            bridge.BridgeOptions, bridge.LINK_PREFERENCE = original_options, original_preference
        print(f"| {name}{f' {preference}' if config['preference'] is None else ''} | {s['all_gold_read'] * 100:.1f}% | "
              f"{s['answer_contains_gold'] * 100:.1f}% | {s['pages_read_mean']:.2f} |")


def hotpot(limit: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        questions = hotpot_raw(root)
        start = time.perf_counter()
        report = run_compile(Settings(kb=root), progress=False)
        stage = report.stage("autolink")
        g = graph(root)
        print(f"\nHotpotQA compiled offline: {g['articles']} articles in {time.perf_counter() - start:.0f} s; autolink "
              f"{stage.counts.get('links', 0)} links in {stage.counts.get('linked', 0)} articles "
              f"({stage.seconds:.1f} s); {g['links_per_article']:.2f} links per article, {g['orphans']} orphans, "
              f"{g['broken']} broken")
        compare(root, questions, limit, f"HotpotQA, first {limit} questions, offline, 2 rounds")


def multihop() -> None:
    """bench_multihop.py's chains as raw/ sources (their links made plain text: the compile's
    mention links are the only links), compiled offline with the autolink stage."""
    import random  # noqa: PLC0415
    import re  # noqa: PLC0415

    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_multihop  # noqa: PLC0415

    pages, questions = bench_multihop.chains(random.Random(16))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for path, _title, _summary, body in pages:
            file = root / "raw" / path
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", body) + "\n", encoding="utf-8")
        report = run_compile(Settings(kb=root), progress=False)
        g = graph(root)
        print(f"\nmulti-hop chains compiled offline: {g['articles']} articles, autolink "
              f"{report.stage('autolink').counts.get('links', 0)} links, {g['orphans']} orphans, {g['broken']} broken")
        target = root / "questions.jsonl"
        target.write_text("".join(json.dumps({k: v for k, v in q.items() if k != "hops"}) + "\n" for q in questions),
                          encoding="utf-8")
        for rounds in (2, 3):
            compare(root, target, None, f"bench_multihop chains ({len(questions)} questions), offline, {rounds} rounds",
                    rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, action="append", default=None)
    parser.add_argument("--hotpotqa", type=int, default=0, help="questions of HotpotQA to evaluate (0: skip)")
    parser.add_argument("--multihop", action="store_true")
    args = parser.parse_args()
    print(f"# Autolinks — {platform.node()} {platform.machine()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}\n")
    print("| corpus | articles | links per article | orphans | broken links | autolink stage | recompile, no change |")
    print("| --- | ---: | ---: | ---: | ---: | --- | --- |")
    for folder in args.corpus or [SHARED / "realdocs-dev"]:
        corpus(folder)
    if args.hotpotqa:
        hotpot(args.hotpotqa)
    if args.multihop:
        multihop()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
