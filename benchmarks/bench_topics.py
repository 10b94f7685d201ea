"""Topics of an offline compile (issue 14, item 7): how many, their names and sizes, on a flat
``raw/`` (HotpotQA's paragraphs, one file each) and on folders (realdocs-dev), and how stable they are.

    .venv/bin/python benchmarks/bench_topics.py [--no-hotpotqa] [--samples N]

* realdocs-dev (``raw/flask/...``, ``raw/uvicorn/...``) compiled offline: topics and sizes.
* HotpotQA's 4,858 paragraphs in one flat ``raw/``, compiled offline: topics, sizes, names.
* Determinism: the topic rule run again on the same documents in another order (shuffled
  ``raw/`` listing) gives the same topic to every article.
* Stability: ``--samples`` times, one paragraph is left out and the topics are decided afresh for
  the rest (the rule alone, ``compile/topic_rule.py``, on the texts the compile gives it): the
  share of paragraphs that keep their topic. Then one new document is added to the compiled KB
  and compiled incrementally: articles that moved (must be 0) and the new one's topic.

Run against main's code (``PYTHONPATH=../main/py/src``) for the "before" figures (the
determinism and stability parts need the new rule and are skipped there).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import platform
import random
import re
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench_paths import eval_data
from kb_ai.compile.pipeline import run_compile
from kb_ai.config import load_settings
from kb_ai.store.catalog import build_catalog

REPO = Path(__file__).resolve().parents[1]
SHARED = eval_data()
HOTPOT = SHARED / "hotpotqa-dev500" / "corpus.jsonl"
REALDOCS = SHARED / "realdocs-dev"


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "doc"


def topics(root: Path) -> Counter[str]:
    return Counter(e.topic for e in build_catalog(root / "wiki").entries)


def show(name: str, counts: Counter[str], seconds: float) -> None:
    sizes = sorted(counts.values())
    print(f"\n## {name}: {sum(sizes):,} articles in {len(counts)} topics (compile {seconds:.0f} s)")
    if sizes:
        print(f"sizes: min {sizes[0]}, median {sizes[len(sizes) // 2]}, max {sizes[-1]}; "
              f"topics of 10-100 articles: {sum(10 <= s <= 100 for s in sizes)}; "
              f"'general' (in no group): {counts.get('general', 0)}; "
              f"largest: {', '.join(f'{t} ({n})' for t, n in counts.most_common(8))}")
        print("names: " + ", ".join(sorted(counts)))


def compile_timed(root: Path) -> float:
    started = time.monotonic()
    run_compile(load_settings(root, env={}), progress=False)
    return time.monotonic() - started


def rule_topics(records: list[tuple[str, str, str]]) -> dict[str, str]:
    """The topic the rule gives each (path, title, text) of a flat raw/ compiled afresh."""
    from kb_ai.compile.topic_rule import MAX_TOPIC_SIZE, MIN_TOPIC_SIZE, _texts_of_sources
    from kb_ai.offline.text_ranking import term_groups

    texts, titles = _texts_of_sources([(p, t, x) for p, t, x in records])
    groups = term_groups(texts, MIN_TOPIC_SIZE, MAX_TOPIC_SIZE, titles)
    return {key: groups.get(key) or "general" for key in texts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-hotpotqa", action="store_true")
    parser.add_argument("--samples", type=int, default=10)
    args = parser.parse_args()
    import kb_ai

    print(f"# code: {Path(kb_ai.__file__).parent}; machine: {platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}; load {os.getloadavg()[0]:.1f}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    try:
        import kb_ai.compile.topic_rule  # noqa: F401
        new_rule = True
    except ImportError:
        new_rule = False
    with tempfile.TemporaryDirectory(prefix="kaas-topics-") as tmp:
        if REALDOCS.is_dir():
            root = Path(tmp) / "realdocs"
            shutil.copytree(REALDOCS, root / "raw")
            show("realdocs-dev (folders)", topics(root) if compile_timed(root) >= 0 else Counter(), 0)
        if args.no_hotpotqa or not HOTPOT.is_file():
            return
        root = Path(tmp) / "hotpotqa"
        (root / "raw").mkdir(parents=True)
        records, used = [], set()
        for line in HOTPOT.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            title = " ".join(html.unescape(r["title"]).split())
            name, n = slug(title), 2
            while name in used:
                name, n = f"{slug(title)}-{n}", n + 1
            used.add(name)
            text = f"# {title}\n\n{r['text'].strip()}\n"
            (root / "raw" / f"{name}.md").write_text(text, encoding="utf-8")
            records.append((f"raw/{name}.md", title, text))
        seconds = compile_timed(root)
        show("HotpotQA (flat raw/, one file per paragraph)", topics(root), seconds)
        if not new_rule:
            return
        base = rule_topics(records)
        shuffled = list(records)
        random.Random(1).shuffle(shuffled)
        again = rule_topics(shuffled)
        print(f"\ndeterminism: same documents in another order -> {sum(again[k] == base[k] for k in base):,} "
              f"of {len(base):,} keep their topic")
        kept = []
        rng = random.Random(7)
        for _ in range(args.samples):
            gone = rng.randrange(len(records))
            rest = rule_topics(records[:gone] + records[gone + 1:])
            kept.append(sum(rest[k] == base[k] for k in rest) / len(rest))
        print(f"stability: one paragraph left out, topics decided afresh ({args.samples} samples): "
              f"{min(kept):.4f} min, {sum(kept) / len(kept):.4f} mean share of paragraphs keeping their topic")
        catalog = {e.path: e.topic for e in build_catalog(root / "wiki").entries}
        (root / "raw" / "new-film-note.md").write_text(
            "# The Quiet Harbour (film)\n\nThe Quiet Harbour is a 2019 American drama film directed by Ann Lee "
            "and starring John Moore as a fisherman who returns to his home town.\n", encoding="utf-8")
        compile_timed(root)
        after = {e.path: e.topic for e in build_catalog(root / "wiki").entries}
        moved = sum(1 for p, t in catalog.items() if after.get(p) != t)
        new = [f"{p} ({t})" for p, t in after.items() if p not in catalog]
        print(f"one document added, incremental compile: {moved} articles moved; new: {', '.join(new)}")


if __name__ == "__main__":
    main()
