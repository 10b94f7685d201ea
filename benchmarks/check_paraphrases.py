"""Check benchmarks/questions/paraphrased.jsonl: a paraphrase or a claim must not be answerable by
word overlap alone, and its facts must be in its gold page.

    .venv/bin/python benchmarks/check_paraphrases.py [--work DIR]

For every ``paraphrase`` and ``claim`` line: its content terms (the project's own tokenizer,
``kb_ai.offline.text.tokenize``: stop words dropped, stemmed) and the share of them its gold
page holds. A line fails when more than ``MAX_SHARE`` of its terms are on the gold page, or when
a fact is not in the gold page's text. The gold page is the wiki page whose ``sources`` name the
gold file (``demo``, ``uvicorn``, ``flask``: built by benchmarks/abstention_kbs.py in --work DIR),
or, for ``ownwiki``, the page of the repository's ``wiki/`` of that path. Exits 1 when a line fails.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

from kb_ai.offline.text import tokenize

BENCH = Path(__file__).resolve().parent
QUESTIONS = BENCH / "questions" / "paraphrased.jsonl"
MAX_SHARE = 1 / 3
CORPUS_ROOT = {"demo": "demo", "ownwiki": "ownwiki", "uvicorn": "realdocs", "flask": "realdocs"}


def load(path: Path = QUESTIONS) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def gold_text(root: Path, corpus: str, gold: str) -> str:
    """The text of the wiki page(s) of ``gold`` in the wiki at ``root``."""
    wiki = root / "wiki"
    if corpus == "ownwiki":
        return (wiki / gold).read_text(encoding="utf-8")
    texts = [p.read_text(encoding="utf-8") for p in sorted(wiki.rglob("*.md"))
             if re.search(rf"^sources:.*\braw/{re.escape(gold)}\b", p.read_text(encoding="utf-8")[:2000], re.M)]
    return "\n".join(texts)


def check(rows: list[dict], roots: dict[str, Path]) -> int:
    failed = 0
    for row in rows:
        if row["kind"] == "nonsense":
            continue
        text = gold_text(roots[CORPUS_ROOT[row["corpus"]]], row["corpus"], row["gold"])
        page = set(tokenize(text))
        terms = list(dict.fromkeys(tokenize(row["question"])))
        found = [t for t in terms if t in page]
        share = len(found) / max(len(terms), 1)
        missing_facts = [f for f in row["facts"] if f.lower() not in text.lower()]
        bad = not text or share > MAX_SHARE or missing_facts
        failed += bool(bad)
        mark = "FAIL" if bad else "ok  "
        note = "no gold page" if not text else f"facts not on the page: {missing_facts}" if missing_facts else ""
        print(f"{mark} {share:4.0%} {row['corpus']:8} {row['kind']:10} {row['question']}  found={found} {note}")
    print(f"\n{failed} of {sum(r['kind'] != 'nonsense' for r in rows)} lines fail")
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="the wikis of abstention_kbs.py (built when absent)")
    args = parser.parse_args()
    from abstention_kbs import build_all
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        roots = build_all(work, log=lambda _m: None)
        sys.exit(1 if check(load(), roots) else 0)


if __name__ == "__main__":
    main()
