"""Different words for the same thing (issue 26, item 2): paraphrased questions, offline.

    PYTHONPATH=py/src .venv/bin/python benchmarks/bench_vocab.py [--split dev|test] [--work DIR] [--grid]

The questions (benchmarks/questions/vocab_dev.jsonl) were written from the pages' text in a
reader's own words: most of their key words are not on the page that answers them. Three
knowledge bases, compiled offline into ``--work`` (kept and reused when there):

* ``demo``: examples/demo;
* ``own``: this repository's wiki/ (indexed);
* ``own-q``: the same wiki, each page's "Questions this page answers" list (written with the
  pages, long before these questions) moved from the body into frontmatter ``questions:``: what
  a compile model that writes ``questions:`` gives an offline reader (the repository's wiki has
  carried them in frontmatter since; on it ``own`` and ``own-q`` are now the same wiki);
* ``docs``: ../shared/eval-data/realdocs-dev (uvicorn, flask) compiled offline.

Mechanisms: no expansion, and RM3 (``offline/feedback.py``) at ``feedback.MEASURED``; ``--grid``
tries other k, m, λ (ranking only). ``questions:`` is measured as ``own-q`` against ``own``.

For each mechanism it prints, per knowledge base and in all: the share of questions whose gold
page is in the top 3 / top 5 of the keyword ranking the offline navigator uses, in the pages it
selects (after abstention and the relative cutoff), and whose offline answer holds every fact
(``quality.scoring.contains_answer``), plus the selection time per question.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "py" / "src"))

from bench_paths import eval_data  # noqa: E402
from kb_ai.compile.pipeline import run_compile  # noqa: E402
from kb_ai.config import load_settings  # noqa: E402
from kb_ai.navigate.ask import ask, build_service  # noqa: E402
from kb_ai.navigate.navigator import LexicalIndexCache  # noqa: E402
from kb_ai.navigate.offline_navigator import OfflineNavigator  # noqa: E402
from kb_ai.navigate.records import AskRequest  # noqa: E402
from kb_ai.offline import feedback  # noqa: E402
from kb_ai.offline.lexical import page_terms  # noqa: E402
from kb_ai.quality.scoring import contains_answer, scoring_text  # noqa: E402
from kb_ai.store.kb import KnowledgeBase  # noqa: E402

QUESTIONS = REPO / "benchmarks" / "questions" / "vocab_dev.jsonl"
REALDOCS = eval_data("realdocs-dev")
_ANSWERS_LIST = re.compile(r"\n## Questions this page answers\n(?P<items>(?:\n?> - .*)+)\n?")


def build(work: Path) -> dict[str, Path]:
    roots = {name: work / name for name in ("demo", "own", "own-q", "docs")}
    if not (roots["demo"] / "wiki" / "master-index.md").exists():
        shutil.copytree(REPO / "examples" / "demo" / "raw", roots["demo"] / "raw", dirs_exist_ok=True)
        run_compile(load_settings(roots["demo"], env={}), progress=False)
    if not (roots["docs"] / "wiki" / "master-index.md").exists():
        for project in ("uvicorn", "flask"):
            shutil.copytree(REALDOCS / project, roots["docs"] / "raw" / project, dirs_exist_ok=True)
        run_compile(load_settings(roots["docs"], env={}), progress=False)
    for name in ("own", "own-q"):
        if not (roots[name] / "wiki" / "master-index.md").exists():
            shutil.copytree(REPO / "wiki", roots[name] / "wiki", dirs_exist_ok=True)
            if name == "own-q":
                for page in (roots[name] / "wiki").rglob("*.md"):
                    _questions_to_frontmatter(page)
            KnowledgeBase(roots[name]).reindex()
    return roots


def _questions_to_frontmatter(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    found = _ANSWERS_LIST.search(text)
    if not found or not text.startswith("---\n"):
        return
    items = [line[4:].strip() for line in found["items"].splitlines() if line.startswith("> - ")]
    body = text[:found.start()] + "\n" + text[found.end():]
    lines = "".join(f"  - {json.dumps(q)}\n" for q in items[:8])
    page.write_text(body.replace("---\n", f"---\nquestions:\n{lines}", 1), encoding="utf-8")


def _gold_rank(paths: list[str], gold: list[str]) -> int | None:
    return next((i for i, p in enumerate(paths) if p in gold), None)


def measure(roots: dict[str, Path], rows: list[dict], answers: bool) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for corpus in dict.fromkeys(r["corpus"] for r in rows):
        root = roots[corpus]
        kb = KnowledgeBase(root)
        catalog = kb.require_catalog()
        cache = LexicalIndexCache(kb.wiki_dir, kb.state_dir / "lexical-index")
        index = cache.get(catalog)
        navigator = OfflineNavigator(cache)
        service = build_service(load_settings(root, env={})) if answers else None
        stats = {"n": 0, "top3": 0, "top5": 0, "selected": 0, "facts": 0, "ms": 0.0}
        for row in (r for r in rows if r["corpus"] == corpus):
            start = time.perf_counter()
            query = feedback.expanded_query(
                index, row["question"], lambda p, kb=kb, catalog=catalog: page_terms(kb.wiki_dir, catalog.by_path[p]))
            ranked = [h.path for h in index.search(query, 5)]
            stats["ms"] += (time.perf_counter() - start) * 1000
            rank = _gold_rank(ranked, row["gold"])
            selected = navigator._select(row["question"], catalog, 5).paths
            stats["n"] += 1
            stats["top3"] += rank is not None and rank < 3
            stats["top5"] += rank is not None
            stats["selected"] += _gold_rank(selected, row["gold"]) is not None
            if service is not None:
                result = asyncio.run(ask(service, AskRequest(question=row["question"])))
                text = scoring_text(result.answer)
                stats["facts"] += all(contains_answer(text, fact) for fact in row["facts"])
        out[corpus] = stats
    return out


def report(label: str, results: dict[str, dict[str, float]], answers: bool) -> None:
    counted = [r for name, r in results.items() if name != "own-q"]  # own-q asks own's questions again
    total = {k: sum(r[k] for r in counted) for k in ("n", "top3", "top5", "selected", "facts", "ms")}
    cells = []
    for name, r in [*results.items(), ("all", total)]:
        n = r["n"] or 1
        cell = f"{r['top3']:.0f}/{r['top5']:.0f}/{r['selected']:.0f}"
        if answers:
            cell += f"/{r['facts']:.0f}"
        cells.append(f"{cell} of {r['n']:.0f}")
    print(f"| {label} | " + " | ".join(cells) + f" | {total['ms'] / max(total['n'], 1):.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="dev", choices=("dev", "test"))
    parser.add_argument("--work", type=Path, default=None, help="where the knowledge bases are built (kept)")
    parser.add_argument("--grid", action="store_true", help="also try other RM3 settings (dev tuning)")
    parser.add_argument("--no-answers", action="store_true", help="selection only (no full offline ask)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="kaas-vocab-"))
    roots = build(work)
    rows = [json.loads(line) for line in QUESTIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [r for r in rows if r["split"] == args.split]
    own_rows = [dict(r, corpus="own-q") for r in rows if r["corpus"] == "own"]
    answers = not args.no_answers
    print(f"{platform.node()} {platform.machine()} python {platform.python_version()}; "
          f"{time.strftime('%Y-%m-%d')}; split {args.split}; {len(rows)} questions; work {work}\n")
    names = list(dict.fromkeys(r["corpus"] for r in rows + own_rows))
    print("| mechanism | " + " | ".join(names) + " | all | ms/question |")
    print("|---|" + "---|" * (len(names) + 2))
    shipped = (feedback.FEEDBACK_PAGES, feedback.EXPANSION_TERMS, feedback.FEEDBACK_WEIGHT)
    k, m, lam = feedback.MEASURED
    settings = [("no expansion", (k, 0, lam)), (f"RM3 k={k} m={m} λ={lam}", feedback.MEASURED)]
    if args.grid:
        settings += [(f"RM3 k={k} m={m} λ={lam}", (k, m, lam)) for k in (3, 5) for m in (5, 10, 20)
                     for lam in (0.3, 0.5) if (k, m, lam) != feedback.MEASURED]
    for n, (label, (k, m, lam)) in enumerate(settings):
        feedback.FEEDBACK_PAGES, feedback.EXPANSION_TERMS, feedback.FEEDBACK_WEIGHT = k, m, lam
        if (k, m, lam) == shipped or (m == 0 and shipped[1] == 0):
            label += " (shipped)"
        report(label, measure(roots, rows + own_rows, answers and n < 2), answers and n < 2)
    feedback.FEEDBACK_PAGES, feedback.EXPANSION_TERMS, feedback.FEEDBACK_WEIGHT = shipped
    print("\ncells: gold in top 3 / top 5 of the ranking / in the pages selected" + (" / facts held" if answers else ""))


if __name__ == "__main__":
    main()
