"""HotpotQA answer contains gold per question type (bridge, comparison, yes/no) and the precision
of the offline comparison verdicts (offline/compare.py), on the ``hp-full`` KB that
``bench_answers.py --work DIR`` builds:

    .venv/bin/python benchmarks/bench_answer_types.py DIR [--limit N]

Types: yes/no = gold answer yes or no; comparison = "..., A or B?"; bridge = the rest. A verdict is
right when the subject it names is the gold answer (every word of it in the gold: "Virginia
Woolf" for "Adeline Virginia Woolf") or, for yes/no, when it says "Yes" and the gold is yes.
The questions are ``hotpotqa-dev500/questions.jsonl`` of the shared eval data (bench_paths.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from pathlib import Path

from bench_paths import EVAL_DATA_HOW, eval_data, require

from kb_ai.config import load_settings
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest
from kb_ai.quality.scoring import normalize_answer, score_answer

VERDICT = re.compile(r"^(Yes: .*|.*\(Derived from the quoted passages\.\)|Both dates quoted.*)$", re.M)


def qtype(row: dict) -> str:
    if row["answer"].lower() in ("yes", "no"):
        return "yes/no"
    if re.search(r"\bor\b", row["question"]) and re.search(r",|:", row["question"]):
        return "comparison"
    return "bridge"


def verdict_right(line: str, gold: str) -> bool | None:
    """Whether a verdict line names the gold answer; None for a tie of dates (undecided)."""
    if line.startswith("Both dates"):
        return None
    if gold.lower() in ("yes", "no"):
        return gold.lower() == "yes" and line.startswith("Yes")
    head = normalize_answer(line.split(",")[0].split(":")[0])
    want = normalize_answer(gold)
    return bool(head and (set(head.split()) <= set(want.split()) or want in head))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("work", type=Path, help="the --work folder of bench_answers.py (holds hp-full/)")
    parser.add_argument("--limit", type=int, default=None, help="ask only the first N questions")
    args = parser.parse_args()
    questions = require(eval_data("hotpotqa-dev500", "questions.jsonl"), EVAL_DATA_HOW)
    kb = require(args.work / "hp-full", "build it first: benchmarks/bench_answers.py --work DIR")
    rows = [json.loads(line) for line in questions.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = rows[:args.limit] if args.limit else rows
    service = build_service(load_settings(kb, env={}))
    stats: dict[str, list[int]] = {}
    verdicts = []
    for row in rows:
        result = asyncio.run(ask(service, AskRequest(question=row["question"])))
        score = score_answer(result.answer, [row["answer"], *row["answer_aliases"]])
        kind = qtype(row)
        counts = stats.setdefault(kind, [0, 0])
        counts[0] += 1
        counts[1] += score.contains_gold
        match = VERDICT.search(result.answer)
        if match:
            line = match.group(1)
            verdicts.append((kind, verdict_right(line, row["answer"]), row["answer"], line[:150], row["question"]))
    for kind, (n, right) in stats.items():
        print(f"{kind}: {right:.0f}/{n} = {right / n * 100:.1f}%")
    total = sum(right for _, right in stats.values())
    print(f"all: {total:.0f}/{len(rows)} = {total / max(1, len(rows)) * 100:.1f}%")
    for kind in ("comparison", "yes/no"):
        print(kind, "verdicts right", sum(v[1] is True for v in verdicts if v[0] == kind),
              "wrong", sum(v[1] is False for v in verdicts if v[0] == kind))
    print(f"verdicts: {sum(v[1] is True for v in verdicts)} right, {sum(v[1] is False for v in verdicts)} wrong, "
          f"{sum(v[1] is None for v in verdicts)} undecided (same year)")
    for v in verdicts:
        print("  ", v)


if __name__ == "__main__":
    main()
