"""Abstention on measured evidence (issue 26): false abstention, nonsense abstained and facts held
per corpus and kind, and the curve of the abstention rule's cut point, on paraphrased questions,
claims, the existing answerable sets, HotpotQA and nonsense, across domains.

    .venv/bin/python benchmarks/bench_abstention.py [--work DIR] [--split dev|test] [--no-answers]

Wikis: benchmarks/abstention_kbs.py (built in --work DIR, kept; or a temporary folder). Sets, each
with a split fixed before any run:

* benchmarks/questions/paraphrased.jsonl: ``paraphrase``, ``claim`` and ``nonsense`` lines of the
  ``demo``, ``ownwiki``, ``uvicorn`` and ``flask`` corpora (its own ``split``);
* bench_outside.py's sets of every corpus built here (``answerable``, ``uncovered``, ``nonsense``;
  dev; the ``_fresh`` and ``_fresh2`` sets of the default corpus: test);
* bench_own_wiki.py's Node.js questions (dev; ``_fresh``: test);
* real-docs questions and the nonsense of bench_answers.py (dev; ``_heldout``: test), the
  nonsense asked on ``hp-del`` and ``realdocs``;
* HotpotQA on ``hp-del``: answerable 1-250 (dev) and 251-350 (test), deleted-gold 401-500 (dev)
  and 351-400 (test) as ``uncovered``.

Prints, per corpus and kind: questions, abstained, weak answers, facts held (every fact in the
answer, ``contains_answer``; not with --no-answers), then the curve: for cut points of the
abstention rule (nothing matches, or a share of the question's weight under the cut), false abstention on the answerable kinds of
each corpus and the share of nonsense answered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import bench_answers
from abstention_kbs import build_all

from kb_ai.config import load_settings
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest
from kb_ai.offline import coverage as cov
from kb_ai.quality.eval import GoldResolver
from kb_ai.quality.scoring import contains_answer, scoring_text
from kb_ai.store.kb import KnowledgeBase

BENCH = Path(__file__).resolve().parent
ANSWERABLE = ("paraphrase", "claim", "answerable", "hotpot")
CUTS = (0.0, 0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40, 0.50, 0.60)
ROOT_OF = {"uvicorn": "realdocs", "flask": "realdocs"}


@dataclass
class Item:
    corpus: str
    split: str
    kind: str  # paraphrase | claim | answerable | hotpot | uncovered | nonsense
    question: str
    facts: list[str] = field(default_factory=list)


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]


def _outside_items(name: str) -> list[Item]:
    stem = "outside" if name == "outside" else f"outside_{name}"
    items = []
    suffixes = (("", "dev"), ("_fresh", "test"), ("_fresh2", "test"))
    for suffix, split in suffixes:
        for kind, file_kind in (("answerable", "questions"), ("uncovered", "uncovered"), ("nonsense", "nonsense")):
            for row in _rows(BENCH / f"{stem}_{file_kind}{suffix}.jsonl"):
                items.append(Item(name, split, kind, row["question"], row.get("facts") or []))
    return items


def _hotpot_items(work: Path) -> list[Item]:
    rows = bench_answers._hotpot_rows()
    deleted = set(json.loads((work / "hp-del" / "deleted.json").read_text()))
    full = GoldResolver(KnowledgeBase(work / "hp-full").require_catalog())
    items = []
    for number, row in enumerate(rows, 1):
        gone = bool(set(full.resolve(row["gold_titles"])[0]) & deleted)
        if number <= 350 and not gone:
            items.append(Item("hp-del", "dev" if number <= 250 else "test", "hotpot", row["question"], [row["answer"]]))
        elif number > 350:
            items.append(Item("hp-del", "dev" if number > 400 else "test", "uncovered", row["question"]))
    return items


def items(work: Path, roots: dict[str, Path]) -> list[Item]:
    found = [Item(r["corpus"], r["split"], r["kind"], r["question"], r["facts"])
             for r in _rows(BENCH / "questions" / "paraphrased.jsonl")]
    for name in roots:
        found += _outside_items(name)
    for suffix, split in (("", "dev"), ("_fresh", "test")):
        for row in _rows(BENCH / f"ownwiki_questions{suffix}.jsonl"):
            kind = "uncovered" if row["kind"] == "uncovered" else "answerable"
            found.append(Item("node", split, kind, row["question"], row.get("facts") or []))
    for suffix, split in (("", "dev"), ("_heldout", "test")):
        for row in _rows(BENCH / f"realdocs_questions{suffix}.jsonl"):
            found.append(Item("realdocs", split, "answerable", row["question"], row.get("facts") or []))
        for row in _rows(BENCH / f"nonsense_questions{suffix}.jsonl"):
            found += [Item("hp-del", split, "nonsense", row["question"]), Item("realdocs", split, "nonsense", row["question"])]
    return found + _hotpot_items(work)


def measure(items_: list[Item], roots: dict[str, Path]) -> list[cov.Coverage]:
    wikis = {}
    measured = []
    for item in items_:
        name = ROOT_OF.get(item.corpus, item.corpus)
        if name not in wikis:
            wikis[name] = bench_answers._Wiki(roots[name])
        measured.append(wikis[name].coverage(item.question))
    return measured


def answer(items_: list[Item], roots: dict[str, Path]) -> list[tuple[bool, str, bool]]:
    """(abstained, match, facts held) of each item, asked offline."""
    services = {}
    results = []
    for item in items_:
        name = ROOT_OF.get(item.corpus, item.corpus)
        if name not in services:
            services[name] = build_service(load_settings(roots[name], env={}))
        result = asyncio.run(ask(services[name], AskRequest(question=item.question, suggest=False)))
        text = scoring_text(result.answer)
        held = not result.abstained and bool(item.facts) and all(contains_answer(text, f) for f in item.facts)
        results.append((result.abstained, getattr(result, "match", None), held))
    return results


def _pct(part: int, whole: int) -> str:
    return f"{part / whole * 100:.0f}%" if whole else "—"


def table(items_, measured, answers) -> None:
    groups = defaultdict(list)
    for i, item in enumerate(items_):
        groups[(item.corpus, item.kind)].append(i)
    print("| corpus | kind | questions | abstained | weak answers | facts held |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for (corpus, kind), members in sorted(groups.items()):
        if answers:
            abstained = sum(answers[i][0] for i in members)
            weak = sum(answers[i][1] == "weak" for i in members)
            with_facts = [i for i in members if items_[i].facts]
            held = f"{sum(answers[i][2] for i in with_facts)}/{len(with_facts)}" if with_facts else "—"
        else:
            abstained = sum(measured[i].abstain for i in members)
            weak = sum(measured[i].match == "weak" for i in members)
            held = "—"
        print(f"| {corpus} | {kind} | {len(members)} | {abstained} ({_pct(abstained, len(members))}) | {weak} | {held} |")


def _abstains(m: cov.Coverage, cut: float) -> bool:
    """The shipped rule (``Coverage.abstain``: no informative term on any page), or also a share under ``cut``."""
    return m.abstain or m.share < cut


def curve(items_, measured) -> None:
    """False abstention per corpus (answerable kinds together) and nonsense answered, per cut."""
    corpora = sorted({it.corpus for it in items_ if it.kind in ANSWERABLE})
    print("| abstain when nothing matches, or share < | " + " | ".join(corpora) + " | worst | nonsense answered |")
    print("| ---: | " + " | ".join("---:" for _ in corpora) + " | ---: | ---: |")
    for cut in CUTS:
        cells, worst = [], 0.0
        for corpus in corpora:
            members = [m for it, m in zip(items_, measured, strict=True)
                       if it.corpus == corpus and it.kind in ANSWERABLE]
            rate = sum(_abstains(m, cut) for m in members) / len(members)
            worst = max(worst, rate)
            cells.append(f"{rate * 100:.0f}%")
        nonsense = [m for it, m in zip(items_, measured, strict=True) if it.kind == "nonsense"]
        answered = sum(not _abstains(m, cut) for m in nonsense)
        shipped = " **(shipped)**" if cut == 0 else ""
        print(f"| {cut:.2f}{shipped} | " + " | ".join(cells) + f" | {worst * 100:.0f}% | {_pct(answered, len(nonsense))} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="build the wikis here and keep them")
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--no-answers", action="store_true", help="the verdict only: do not ask (faster)")
    parser.add_argument("--dump", type=Path, default=None, help="write each question's features here (JSON lines)")
    args = parser.parse_args()
    print(f"# Abstention on measured evidence ({args.split}) — {platform.node()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}\n")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        roots = build_all(work, log=lambda _m: None)
        chosen = [it for it in items(work, roots) if it.split == args.split]
        measured = measure(chosen, roots)
        if args.dump:
            args.dump.write_text("".join(json.dumps({**it.__dict__, "share": m.share, "rare_terms": m.rare_terms,
                                                     "known": m.known, "pages": list(m.pages)}) + "\n"
                                         for it, m in zip(chosen, measured, strict=True)))
        answers = None if args.no_answers else answer(chosen, roots)
        table(chosen, measured, answers)
        if hasattr(cov.Coverage, "abstain"):  # (absent from the code before issue 26, which this also measures)
            print("\n## Curve: false abstention (answerable kinds) per corpus, and nonsense answered\n")
            curve(chosen, measured)


if __name__ == "__main__":
    main()
