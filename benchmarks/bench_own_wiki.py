"""Issue 15's answers and abstention on a wiki nobody tuned on: Node.js API docs (from the
machine's ``/usr/share/doc/nodejs/api``: path, os, events, timers, url, dns, readline) plus five
short pages about programming languages written for this check, compiled offline; questions in
benchmarks/ownwiki_questions.jsonl (written before the last compare.py/coverage.py changes, which
were made after looking at them) and ownwiki_questions_fresh.jsonl (written after the code was
final, run once):

    .venv/bin/python benchmarks/bench_own_wiki.py [--work DIR] [--verbose]

Kinds: ``answerable`` (every fact in the answer, not abstained), ``comparison`` (``winner``: the
page title the verdict must name, "yes", or null for no verdict), ``uncovered`` (must abstain).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import shutil
import tempfile
from pathlib import Path

from kb_ai.compile.pipeline import run_compile
from kb_ai.config import load_settings
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest
from kb_ai.quality.scoring import contains_answer, scoring_text

BENCH = Path(__file__).resolve().parent
NODE_API = Path("/usr/share/doc/nodejs/api")
NODE_PAGES = ("path", "os", "events", "timers", "url", "dns", "readline")
LANGUAGES = {
    "python.md": "# Python (programming language)\n\nPython is a high-level, general-purpose programming language "
                 "created by Guido van Rossum. It was first released in 1991. Its design philosophy emphasizes code "
                 "readability with the use of significant indentation. Python is dynamically typed and "
                 "garbage-collected.\n",
    "ruby.md": "# Ruby (programming language)\n\nRuby is an interpreted, high-level, general-purpose programming "
               "language designed by Yukihiro Matsumoto in Japan. Ruby was released in 1995. It is dynamically typed "
               "and uses garbage collection.\n",
    "lua.md": "# Lua\n\nLua is a lightweight, embeddable scripting language designed at the Pontifical Catholic "
              "University of Rio de Janeiro in Brazil. Lua was created in 1993 by Roberto Ierusalimschy, Luiz "
              "Henrique de Figueiredo and Waldemar Celes. It is dynamically typed.\n",
    "rust.md": "# Rust (programming language)\n\nRust is a general-purpose programming language emphasizing "
               "performance, type safety and concurrency. Graydon Hoare started Rust as a personal project at Mozilla "
               "Research. The first stable release, Rust 1.0, was published in 2015. Rust is statically typed and has "
               "no garbage collector.\n",
    "go.md": "# Go (programming language)\n\nGo is a statically typed, compiled programming language designed at "
             "Google by Robert Griesemer, Rob Pike and Ken Thompson. It was publicly announced in 2009. Go is "
             "garbage-collected.\n",
}


def build(root: Path) -> None:
    if (root / "wiki" / "master-index.md").exists():
        return
    (root / "raw" / "node").mkdir(parents=True, exist_ok=True)
    (root / "raw" / "langs").mkdir(parents=True, exist_ok=True)
    for name in NODE_PAGES:
        plain, packed = NODE_API / f"{name}.md", NODE_API / f"{name}.md.gz"
        if plain.exists():
            shutil.copy(plain, root / "raw" / "node" / plain.name)
        elif packed.exists():
            (root / "raw" / "node" / plain.name).write_bytes(gzip.decompress(packed.read_bytes()))
    for name, text in LANGUAGES.items():
        (root / "raw" / "langs" / name).write_text(text, encoding="utf-8")
    run_compile(load_settings(root, env={}), progress=False)


def run(root: Path, questions: Path, verbose: bool) -> None:
    service = build_service(load_settings(root, env={}))
    results: dict[str, dict[str, int]] = {}
    for line in questions.read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        answer = asyncio.run(ask(service, AskRequest(question=q["question"])))
        lines = answer.answer.splitlines()
        kind = q["kind"]
        row = results.setdefault(kind, {"questions": 0, "right": 0, "abstained": 0, "verdicts right": 0,
                                        "verdicts wrong": 0})
        row["questions"] += 1
        row["abstained"] += bool(answer.abstained)
        if kind == "answerable":
            text = scoring_text(answer.answer)
            right = not answer.abstained and all(contains_answer(text, fact) for fact in q["facts"])
        elif kind == "comparison":
            verdict = lines[2] if len(lines) > 2 and "Derived from the quoted passages" in lines[2] else ""
            correct = bool(verdict) and ((q["winner"] == "yes" and verdict.startswith("Yes"))
                                         or (q["winner"] not in (None, "yes") and verdict.startswith(q["winner"] + ",")))
            if verdict:
                row["verdicts right" if correct else "verdicts wrong"] += 1
            right = correct if q["winner"] is not None else not verdict
        else:
            right = bool(answer.abstained)
        row["right"] += right
        if verbose:
            print(f"  {'ok ' if right else 'BAD'} [{kind}] {q['question']} | {(lines[2] if len(lines) > 2 else '')[:120]}")
    for kind, row in results.items():
        print(f"- {questions.name} {kind}: " + ", ".join(f"{k} {v}" for k, v in row.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    if not NODE_API.is_dir():
        raise SystemExit(f"{NODE_API} not found (the Node.js API docs): nothing to build the wiki from")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.work or Path(tmp) / "ownwiki"
        build(root)
        for name in ("ownwiki_questions.jsonl", "ownwiki_questions_fresh.jsonl"):
            run(root, BENCH / name, args.verbose)


if __name__ == "__main__":
    main()
