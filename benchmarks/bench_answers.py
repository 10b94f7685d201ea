"""Offline answers and abstention (issue 15): facts held, answer contains gold, and the abstention
trade-off curve, on data whose truth is known.

    .venv/bin/python benchmarks/bench_answers.py [--work DIR] [--skip-hotpot-eval]

Builds, in a temporary folder (or --work DIR, kept):

* ``hp-full``: HotpotQA dev500 as a KB (benchmarks/bench_hotpotqa.py's builder);
* ``hp-del``: the same without the gold pages of questions 351-500;
* ``realdocs``: ../shared/eval-data/realdocs-dev (uvicorn + flask docs) compiled offline.

Question sets (dev: used to pick the thresholds of ``offline.coverage``; held-out: not looked at
while tuning), all asked offline:

* answerable HotpotQA questions 1-250 (dev) and 251-350 (held-out) on ``hp-del``, leaving out
  the few whose gold pages were deleted with another question's;
* deleted-gold HotpotQA questions 401-500 (dev) and 351-400 (held-out) on ``hp-del``;
* nonsense: benchmarks/nonsense_questions.jsonl (dev) and nonsense_questions_heldout.jsonl,
  each asked on ``hp-del`` and on ``realdocs``;
* real docs: benchmarks/realdocs_questions.jsonl (dev) and realdocs_questions_heldout.jsonl on
  ``realdocs``, each with the facts a correct answer holds.

Prints the abstention rate of each set for a grid of thresholds (the curve), the rates at the
shipped thresholds, facts held on the real-docs questions, and (unless --skip-hotpot-eval)
`kaas eval` on all 500 HotpotQA questions on ``hp-full`` and with ``--delete-gold`` on the last 50.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

from bench_hotpotqa import DATA as HOTPOT, build_kb, write_questions

from kb_ai.compile.pipeline import run_compile
from kb_ai.config import load_settings
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.navigator import LexicalIndexCache
from kb_ai.navigate.offline_navigator import question_coverage
from kb_ai.navigate.records import AskRequest
from kb_ai.offline import coverage as cov
from kb_ai.quality.eval import GoldResolver, run_eval_file
from kb_ai.quality.eval_questions import load_questions
from kb_ai.quality.scoring import contains_answer, scoring_text
from kb_ai.store.kb import KnowledgeBase

BENCH = Path(__file__).resolve().parent
REALDOCS = HOTPOT.parent / "realdocs-dev"
SHARES = (0.45, 0.50, 0.55, 0.60, 0.65, 0.70, 0.75, 0.80)
RARE_TERMS = (1.6, 1.9, 2.2, 2.5, 2.8, 3.2, 99.0)


def _build(work: Path) -> None:
    for name in ("hp-full", "hp-del"):
        root = work / name
        if not (root / "wiki" / "master-index.md").exists():
            root.mkdir(parents=True, exist_ok=True)
            build_kb(root, HOTPOT / "corpus.jsonl")
            KnowledgeBase(root).reindex()
    kb = KnowledgeBase(work / "hp-del")
    marker = work / "hp-del" / "deleted.json"
    if not marker.exists():
        resolver = GoldResolver(kb.require_catalog())
        deleted = []
        for row in _hotpot_rows()[350:]:
            for path in resolver.resolve(row["gold_titles"])[0]:
                (kb.wiki_dir / path).unlink(missing_ok=True)
                deleted.append(path)
        kb.reindex()
        marker.write_text(json.dumps(sorted(set(deleted))))
    build_realdocs(work / "realdocs")


def build_realdocs(docs: Path) -> None:
    """../shared/eval-data/realdocs-dev (uvicorn + flask docs) compiled offline into ``docs``
    (kept: nothing is done when its catalog is there already)."""
    if not (docs / "wiki" / "master-index.md").exists():
        (docs / "raw").mkdir(parents=True, exist_ok=True)
        for project in ("uvicorn", "flask"):
            shutil.copytree(REALDOCS / project, docs / "raw" / project, dirs_exist_ok=True)
        run_compile(load_settings(docs, env={}), progress=False)


def _hotpot_rows() -> list[dict]:
    return [json.loads(line) for line in (HOTPOT / "questions.jsonl").read_text(encoding="utf-8").splitlines()]


class _Wiki:
    def __init__(self, root: Path):
        kb = KnowledgeBase(root)
        self.wiki_dir = kb.wiki_dir
        self.catalog = kb.require_catalog()
        self.index = LexicalIndexCache(kb.wiki_dir, kb.state_dir / "lexical-index").get(self.catalog)

    def coverage(self, question: str) -> cov.Coverage:
        return question_coverage(self.index, self.catalog, question, self.wiki_dir)


def _sets(work: Path) -> dict[str, list[tuple[_Wiki, str]]]:
    rows = _hotpot_rows()
    deleted = set(json.loads((work / "hp-del" / "deleted.json").read_text()))
    full = GoldResolver(KnowledgeBase(work / "hp-full").require_catalog())
    hdel, docs = _Wiki(work / "hp-del"), _Wiki(work / "realdocs")

    def answerable(part):
        return [(hdel, r["question"]) for r in part if not set(full.resolve(r["gold_titles"])[0]) & deleted]

    sets = {
        "answerable HotpotQA": answerable(rows[:250]), "answerable HotpotQA (held-out)": answerable(rows[250:350]),
        "deleted-gold HotpotQA": [(hdel, r["question"]) for r in rows[400:]],
        "deleted-gold HotpotQA (held-out)": [(hdel, r["question"]) for r in rows[350:400]],
    }
    for suffix, label in (("", ""), ("_heldout", " (held-out)")):
        nonsense = [q.question for q in load_questions(BENCH / f"nonsense_questions{suffix}.jsonl")]
        sets["nonsense" + label] = [(hdel, q) for q in nonsense] + [(docs, q) for q in nonsense]
        sets["real docs" + label] = [(docs, q.question) for q in load_questions(BENCH / f"realdocs_questions{suffix}.jsonl")]
    return sets


def _curve(sets) -> None:
    measured = {name: [w.coverage(q) for w, q in items] for name, items in sets.items()}
    names = list(measured)
    print("| share ≥ | or rare terms ≥ | " + " | ".join(names) + " |")
    print("| ---: | ---: | " + " | ".join("---:" for _ in names) + " |")
    for share in SHARES:
        for rare in RARE_TERMS:
            cells = []
            for name in names:
                abstained = sum(not cov.is_covered(c.share, c.rare_terms, share, rare) for c in measured[name])
                cells.append(f"{abstained / len(measured[name]) * 100:.0f}%")
            shipped = " **(shipped)**" if (share, rare) == (cov.COVERED_SHARE, cov.COVERED_RARE_TERMS) else ""
            print(f"| {share:.2f} | {'—' if rare > 50 else rare} | " + " | ".join(cells) + f" |{shipped}")
    print("\n(Since issue 26 these thresholds mark a match strong or weak; abstained, as shipped:)\n")
    for name in names:
        n = sum(c.abstain for c in measured[name])
        weak = sum(c.match == "weak" for c in measured[name])
        print(f"- {name}: abstained {n} / {len(measured[name])} ({n / len(measured[name]) * 100:.1f}%), weak {weak}")


def _facts(work: Path) -> None:
    service = build_service(load_settings(work / "realdocs", env={}))
    for suffix, label in (("", "dev"), ("_heldout", "held-out")):
        questions = load_questions(BENCH / f"realdocs_questions{suffix}.jsonl")
        held = abstained = 0
        for q in questions:
            result = asyncio.run(ask(service, AskRequest(question=q.question)))
            text = scoring_text(result.answer)
            held += all(contains_answer(text, fact) for fact in q.facts)
            abstained += result.abstained
        print(f"- real docs ({label}): facts held in {held} of {len(questions)} answers "
              f"({held / len(questions) * 100:.0f}%); abstained on {abstained}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="build the KBs here and keep them")
    parser.add_argument("--skip-hotpot-eval", action="store_true", help="skip the 500-question `kaas eval` runs")
    args = parser.parse_args()
    print(f"# Offline answers and abstention — {platform.node()} {platform.machine()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        _build(work)
        print("\n## Abstention trade-off (offline.coverage thresholds)\n")
        _curve(_sets(work))
        print("\n## Facts held (real docs)\n")
        _facts(work)
        if not args.skip_hotpot_eval:
            questions = work / "hotpot-questions.jsonl"
            write_questions(HOTPOT / "questions.jsonl", questions)
            settings = load_settings(work / "hp-full", env={})
            report = run_eval_file(settings, questions)
            print("\n## kaas eval, HotpotQA (500 questions)\n")
            print(report.render_table())
            last = work / "hotpot-last50.jsonl"
            last.write_text("".join(questions.read_text().splitlines(keepends=True)[-50:]))
            held = run_eval_file(settings, last, delete_gold=True).summary()
            print(f"\n- `kaas eval --delete-gold`, last 50 questions: abstained on {held['abstention_rate'] * 100:.0f}%")


if __name__ == "__main__":
    main()
