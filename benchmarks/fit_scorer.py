"""Fit the offline answer's unit scorer (issue 26) and measure it on a split it never saw.

    .venv/bin/python benchmarks/fit_scorer.py collect --work DIR   # build the wikis, record the pages read
    .venv/bin/python benchmarks/fit_scorer.py fit --work DIR       # fit on the dev split, write scorer_weights.json
    .venv/bin/python benchmarks/fit_scorer.py eval --work DIR [--split test]   # facts held, per set

**Data.** Wikis built offline by the other benchmarks' builders in ``--work`` (kept between runs):
HotpotQA dev500 (``bench_hotpotqa.build_kb``, from ../shared/eval-data found relative to the
repository), the real docs (``bench_answers.build_realdocs``), the own wiki (``bench_own_wiki``)
and the outside corpora of ``bench_outside.CORPORA`` whose sources are on the machine. ``collect``
asks every answerable question through the real service (offline, ``navigate.ask``) and records
the question and the pages its answer was made from (``captures.jsonl``): which pages are read
does not depend on the scorer, so fitting and evaluating replay those pages only.

**Split (declared, fixed):** HotpotQA questions with an even index are dev, odd test; in each
project set (realdocs, own wiki, each outside corpus and its fresh sets) questions at an even
position are dev, odd test, except benchmarks/realdocs_questions.jsonl (all dev),
realdocs_questions_heldout.jsonl and outside_demo_questions_paraphrased.jsonl (all test).
``fit`` reads the dev split only.

**Labels.** A candidate unit (``offline.extractive.candidates``) is positive when the text the
answer would show for it holds a gold answer string (HotpotQA's answer or an alias; a project
question's facts). **Fit:** a logistic regression by Newton's method (IRLS, L2 penalty
``L2``), each question's units weighing 1 in all (a page-heavy question counts as one), questions
with no positive unit left out; then the four selection parameters (``offline.scorer.selection``)
by a grid (``MIN_SHARES`` x ``PER_PAGE`` x ``FLOORS`` x ``BRIDGES``), keeping the setting with the most dev
questions whose answer holds all its facts (ties:
the first in grid order). Deterministic: no sampling, fixed order. **Eval** prints, per set and
split, the share of questions whose whole answer (as ``OfflineNavigator`` writes it) holds every
fact; ``--shipped`` uses the weights file as it is.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from bench_hotpotqa import DATA as HOTPOT  # noqa: E402

from kb_ai.quality.scoring import contains_answer, scoring_text  # noqa: E402

L2 = 1.0
FLOORS = (0.3, 0.45, 0.6, 0.8)
BRIDGES = (1.0, 2.0, 3.0, 4.0)
PER_PAGE = (2, 3, 4)
MIN_SHARES = (0.5, 0.35, 0.2, 0.0)  # largest first: of equal scores, the shorter answers win
OUTSIDE = ("outside", "second", "demo", "tiny", "third", "small", "fourth", "team", "fifth", "crew")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]


def question_sets() -> list[dict]:
    """Every labelled set: its name, wiki (a folder of ``--work``), questions, and split rule."""
    sets = [{"name": "hotpotqa", "wiki": "hp-full", "file": HOTPOT / "questions.jsonl", "split": "parity"},
            {"name": "realdocs", "wiki": "realdocs", "file": BENCH / "realdocs_questions.jsonl", "split": "dev"},
            {"name": "realdocs-heldout", "wiki": "realdocs", "file": BENCH / "realdocs_questions_heldout.jsonl",
             "split": "test"},
            {"name": "own", "wiki": "own", "file": BENCH / "ownwiki_questions.jsonl", "split": "parity"},
            {"name": "own-fresh", "wiki": "own", "file": BENCH / "ownwiki_questions_fresh.jsonl", "split": "parity"},
            {"name": "demo-paraphrased", "wiki": "out-demo", "file": BENCH / "outside_demo_questions_paraphrased.jsonl",
             "split": "test"}]
    for corpus in OUTSIDE:
        prefix = "outside" if corpus == "outside" else f"outside_{corpus}"
        for suffix in ("", "_fresh", "_fresh2"):
            path = BENCH / f"{prefix}_questions{suffix}.jsonl"
            if path.is_file():
                sets.append({"name": f"{corpus}{suffix}", "wiki": f"out-{corpus}", "file": path, "split": "parity"})
    return sets


def _facts(row: dict) -> list[list[str]]:
    """Each fact a correct answer holds, with the strings that count for it."""
    if "facts" in row:
        return [[fact] for fact in row["facts"]]
    return [[row["answer"], *row.get("answer_aliases", [])]]


def _build(work: Path, wiki: str) -> Path | None:
    """The wiki ``wiki`` under ``work``, built when absent; None when its sources are not here."""
    root = work / wiki
    if (root / "wiki" / "master-index.md").exists():
        return root
    if wiki == "hp-full":
        from bench_hotpotqa import build_kb
        from kb_ai.store.kb import KnowledgeBase
        root.mkdir(parents=True, exist_ok=True)
        build_kb(root, HOTPOT / "corpus.jsonl")
        KnowledgeBase(root).reindex()
    elif wiki == "realdocs":
        from bench_answers import build_realdocs
        build_realdocs(root)
    elif wiki == "own":
        from bench_own_wiki import build
        build(root)
    else:
        from bench_outside import CORPORA, build
        sources = CORPORA[wiki.removeprefix("out-")]
        if all(not path.is_dir() for path, _ in sources.values()):
            return None
        build(root, sources)
    return root


def collect(work: Path) -> None:
    """Ask every answerable question and record the pages its answer is made from."""
    from kb_ai.config import load_settings
    from kb_ai.navigate import offline_navigator
    from kb_ai.navigate.ask import ask, build_service
    from kb_ai.navigate.records import AskRequest

    seen: list[tuple[str, list]] = []
    original = offline_navigator.OfflineNavigator._answer_lines

    def spy(self, question, pages, catalog):
        seen.append((question, [p for p in pages if p.is_evidence]))
        return original(self, question, pages, catalog)

    offline_navigator.OfflineNavigator._answer_lines = spy
    records = []
    for qset in question_sets():
        root = _build(work, qset["wiki"])
        if root is None:
            print(f"- {qset['name']}: sources absent, skipped")
            continue
        service = build_service(load_settings(root, env={}))
        rows = [r for r in _rows(qset["file"]) if r.get("kind", "answerable") == "answerable"]
        for position, row in enumerate(rows):
            seen.clear()
            result = asyncio.run(ask(service, AskRequest(question=row["question"])))
            split = qset["split"] if qset["split"] != "parity" else ("dev" if position % 2 == 0 else "test")
            question, pages = seen[-1] if seen else (row["question"], [])
            records.append({"set": qset["name"], "split": split, "question": question, "facts": _facts(row),
                            "abstained": bool(result.abstained),
                            "pages": [{"path": p.path, "title": p.title, "body": p.text} for p in pages]})
        print(f"- {qset['name']}: {len(rows)} questions", flush=True)
    (work / "captures.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _load(work: Path, split: str | None) -> list[dict]:
    rows = _rows(work / "captures.jsonl")
    return [r for r in rows if split is None or r["split"] == split]


def _holds(text: str, facts: list[list[str]]) -> bool:
    return all(any(contains_answer(text, alt) for alt in fact) for fact in facts)


def _share_held(text: str, facts: list[list[str]]) -> float:
    """The share of the facts ``text`` holds (the label of a unit: 1 when it holds them all)."""
    return sum(any(contains_answer(text, alt) for alt in fact) for fact in facts) / len(facts)


def answer_text(verdict, evidence) -> str:
    """The answer ``OfflineNavigator`` writes from ``evidence`` (after ``verdict``, the comparison
    ``offline.compare.derive`` settles, or None), as scored (``scoring_text``)."""
    from kb_ai.navigate.offline_navigator import answer_lines

    lines: list[str] = []
    if verdict is not None:
        lines.append(verdict.text)
        for unit in verdict.units:
            lines += answer_lines(unit)
        quoted = {(u.path, u.start) for u in verdict.units}
        evidence = [e for e in evidence if (e.unit.path, e.unit.start) not in quoted]
    for e in evidence:
        lines += answer_lines(e.unit, e.sentence)
    return scoring_text("\n".join(lines))


class Prepared:
    """A record's pages, candidates, their feature matrix and labels (computed once)."""

    def __init__(self, record: dict):
        from kb_ai.offline import extractive, scorer

        from kb_ai.offline.compare import ComparedPage, derive

        self.record = record
        self.pages = [extractive.PageText(p["path"], p["title"], p["body"]) for p in record["pages"]]
        self.verdict = derive(record["question"], [ComparedPage(p.path, p.title, p.body) for p in self.pages])
        self.found = extractive.candidates(record["question"], self.pages) if self.pages else []
        self.x = np.array([[c.features.get(name, 0.0) for name in scorer.FEATURES] for c in self.found],
                          dtype=np.float64).reshape(len(self.found), len(scorer.FEATURES))
        self.y = np.array([_share_held(_shown(c.unit, record["question"]), record["facts"]) for c in self.found],
                          dtype=np.float64)

    def held(self, weights: np.ndarray, params: dict[str, float]) -> bool:
        from kb_ai.offline import extractive

        if not self.found:
            return False
        scores = list(1.0 / (1.0 + np.exp(-np.clip(self.x @ weights, -30, 30))))
        evidence = extractive.choose(self.record["question"], self.pages, self.found, scores, params=params)
        return _holds(answer_text(self.verdict, evidence), self.record["facts"])


def _shown(unit, question: str) -> str:
    from kb_ai.offline.extractive import Evidence, _context

    return Evidence(unit, 0.0, _context(unit, question)).sentence


def fit_logistic(prepared: list[Prepared]) -> np.ndarray:
    """Weighted L2 logistic regression by Newton's method (IRLS); each question weighs 1."""
    used = [p for p in prepared if len(p.found) and p.y.any()]
    x = np.vstack([p.x for p in used])
    y = np.concatenate([p.y for p in used])
    groups = {}
    for p in used:
        groups[p.record["set"] == "hotpotqa"] = groups.get(p.record["set"] == "hotpotqa", 0) + 1
    # each question weighs 1, and the HotpotQA questions together as much as the project's
    share = {group: len(used) / (len(groups) * n) for group, n in groups.items()}
    sw = np.concatenate([np.full(len(p.found), share[p.record["set"] == "hotpotqa"] / len(p.found)) for p in used])
    w = np.zeros(x.shape[1])
    penalty = L2 * np.eye(x.shape[1])
    penalty[0, 0] = 0.0  # the bias is not shrunk
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -30, 30)))
        gradient = x.T @ (sw * (y - p)) - penalty @ w
        hessian = (x * (sw * p * (1 - p))[:, None]).T @ x + penalty
        step = np.linalg.solve(hessian, gradient)
        w += step
        if np.abs(step).max() < 1e-9:
            break
    return w


def fit_conditional(prepared: list[Prepared]) -> np.ndarray:
    """A conditional logit: within each question, softmax(X w) fitted to the units' labels
    (normalised to sum 1) by Newton's method, L2 penalty ``L2``; each question weighs 1."""
    used = [p for p in prepared if len(p.found) and p.y.any()]
    n_features = used[0].x.shape[1]
    w = np.zeros(n_features)
    penalty = L2 * np.eye(n_features)
    for _ in range(50):
        gradient = -penalty @ w
        hessian = penalty.copy()
        for p in used:
            logits = p.x @ w
            prob = np.exp(logits - logits.max())
            prob /= prob.sum()
            target = p.y / p.y.sum()
            gradient += p.x.T @ (target - prob)
            mean = p.x.T @ prob
            hessian += (p.x * prob[:, None]).T @ p.x - np.outer(mean, mean)
        step = np.linalg.solve(hessian, gradient)
        w += step
        if np.abs(step).max() < 1e-9:
            break
    return w


def _held_count(prepared: list[Prepared], weights: np.ndarray, params: dict[str, float]) -> int:
    return sum(p.held(weights, params) for p in prepared)


def fit(work: Path, out: Path) -> None:
    from kb_ai.offline import scorer

    prepared = [Prepared(r) for r in _load(work, "dev")]
    weights = fit_logistic(prepared)
    best = None
    grid = [{"new_floor": floor, "bridge": bridge, "per_page": per_page, "min_share": share}
            for share in MIN_SHARES for per_page in PER_PAGE for floor in FLOORS for bridge in BRIDGES]
    for params in grid:
        held = _held_count(prepared, weights, params)
        if best is None or held > best[0]:
            best = (held, params)
    held, params = best
    print(f"dev: {held}/{len(prepared)} questions hold every fact with {params}")
    hotpot = [p for p in prepared if p.record["set"] == "hotpotqa"]
    project = [p for p in prepared if p.record["set"] != "hotpotqa"]
    print(f"  hotpotqa {_held_count(hotpot, weights, params)}/{len(hotpot)}, "
          f"project {_held_count(project, weights, params)}/{len(project)}")
    data = {"fitted_by": "benchmarks/fit_scorer.py fit (dev split: see its docstring)",
            "dev_questions": len(prepared), "dev_held": held,
            "weights": {name: round(float(w), 4) for name, w in zip(scorer.FEATURES, weights, strict=True)},
            "selection": params}
    out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    for name, w in sorted(zip(scorer.FEATURES, weights, strict=True), key=lambda t: -abs(t[1])):
        print(f"  {name:>18} {w:+.3f}")


def evaluate(work: Path, split: str | None, shipped: bool) -> None:
    """Facts held per set through the real answer path (``OfflineNavigator._answer_lines``)."""
    from kb_ai.navigate.offline_navigator import OfflineNavigator
    from kb_ai.navigate.records import ReadPage

    navigator = OfflineNavigator(None)
    totals: dict[tuple[str, str], list[int]] = {}
    for record in _load(work, split):
        pages = [ReadPage(p["path"], p["title"], p["body"]) for p in record["pages"]]
        held = False
        if pages and not record["abstained"]:
            text = scoring_text("\n".join(navigator._answer_lines(record["question"], pages, None)))
            held = _holds(text, record["facts"])
        row = totals.setdefault((record["set"], record["split"]), [0, 0])
        row[0] += held
        row[1] += 1
    _report(totals)


def _report(totals: dict[tuple[str, str], list[int]]) -> None:
    groups: dict[str, list[int]] = {}
    for (name, split), (held, n) in sorted(totals.items()):
        print(f"- {name} ({split}): {held}/{n}")
        group = "hotpotqa" if name == "hotpotqa" else "paraphrased" if name.endswith("paraphrased") else "project"
        row = groups.setdefault(f"{group} ({split})", [0, 0])
        row[0] += held
        row[1] += n
    for name, (held, n) in sorted(groups.items()):
        print(f"**{name}: {held}/{n} ({held / n:.1%})**")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("collect", "fit", "eval"))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--split", choices=("dev", "test"), default=None)
    parser.add_argument("--out", type=Path, default=None, help="weights file to write (default: the shipped one)")
    parser.add_argument("--shipped", action="store_true")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.command == "collect":
        collect(args.work)
    elif args.command == "fit":
        from kb_ai.offline import scorer
        fit(args.work, args.out or scorer.WEIGHTS_FILE)
    else:
        evaluate(args.work, args.split, args.shipped)


if __name__ == "__main__":
    main()
