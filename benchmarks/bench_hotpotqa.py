"""HotpotQA (500 dev questions, distractor paragraphs) as a KaaS knowledge base, evaluated with `kaas eval`.

    .venv/bin/python benchmarks/bench_hotpotqa.py [--limit N] [--json-out FILE] [--keep DIR]

Builds a KB in a temp folder from ../shared/eval-data/hotpotqa-dev500/corpus.jsonl: one article per
paragraph (title html-unescaped, summary = first sentence, topic = one of 64 hash buckets so no
topic passes ~100 pages, body = the paragraph), indexes it, lints it, then runs the eval offline
on the questions with their gold titles as gold pages. It also measures the lexical shortlist a
model would be shown (`navigate.select.shortlist`) at 6,000 and 32,000 tokens: does each gold page
make it into the catalog lines the model sees? With KAAS_MODEL set, the eval runs with the model
too (same questions; --limit caps both runs). Last, the gold pages of the final 50 questions are
deleted and those questions asked again as `answerable: false`, to measure abstention.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from bench_paths import eval_data
from kb_ai.config import load_settings
from kb_ai.navigate.navigator import LexicalIndexCache
from kb_ai.navigate.select import shortlist
from kb_ai.quality.eval import GoldResolver, run_eval_file
from kb_ai.quality.eval_questions import load_questions
from kb_ai.quality.lint import lint_kb
from kb_ai.store.articles import render_article
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.markdown_text import first_sentence
from kb_ai.store.sentences import clip
from kb_ai.store.paths import slugify

REPO = Path(__file__).resolve().parents[1]
DATA = eval_data("hotpotqa-dev500")
TOPIC_BUCKETS = 64
SHORTLIST_BUDGETS = (6_000, 32_000)


def build_kb(root: Path, corpus: Path) -> int:
    """One article per paragraph; returns the number written."""
    wiki = root / "wiki"
    used: set[str] = set()
    count = 0
    for line in corpus.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        title = " ".join(html.unescape(record["title"]).split())
        text = " ".join(record["text"].split())
        bucket = int(hashlib.sha1(title.encode("utf-8")).hexdigest(), 16) % TOPIC_BUCKETS
        topic = f"p{bucket:02d}"
        slug = slugify(title, fallback="page")
        path, n = f"{topic}/{slug}.md", 2
        while path in used:
            path, n = f"{topic}/{slug}-{n}.md", n + 1
        used.add(path)
        summary = first_sentence(text, 200) or clip(text, 200)
        file = wiki / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(render_article({"title": title, "summary": summary, "topic": topic}, f"# {title}\n\n{text}"),
                        encoding="utf-8")
        count += 1
    return count


def write_questions(source: Path, target: Path) -> None:
    """HotpotQA's questions in `kaas eval` form: gold titles become gold pages."""
    lines = []
    for line in source.read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        lines.append(json.dumps({"id": q["id"], "question": q["question"], "gold_pages": q["gold_titles"],
                                 "answer": q["answer"], "answer_aliases": q.get("answer_aliases", [])},
                                ensure_ascii=False))
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")


def shortlist_recall(root: Path, questions_file: Path, limit: int | None) -> list[dict]:
    """For each budget: share of gold pages (and of questions with both) in the model's shortlist."""
    kb = KnowledgeBase(root)
    catalog = kb.require_catalog()
    lexical = LexicalIndexCache(kb.wiki_dir, kb.state_dir / "lexical-index").get(catalog)
    resolver = GoldResolver(catalog)
    questions = load_questions(questions_file)[:limit]
    rows = []
    for budget in SHORTLIST_BUDGETS:
        found = total = both = shown = 0
        start = time.perf_counter()
        for q in questions:
            gold, unresolved = resolver.resolve(q.gold_pages)
            entries, _ = shortlist(catalog, q.question, budget, lexical)
            listed = {e.path for e in entries}
            hits = sum(1 for p in gold if p in listed)
            found += hits
            total += len(gold) + len(unresolved)
            both += hits == len(gold) + len(unresolved)
            shown += len(entries)
        rows.append({"budget": budget, "gold_recall": found / total, "all_gold": both / len(questions),
                     "lines_shown": shown / len(questions), "ms_per_question": (time.perf_counter() - start) * 1000 / len(questions)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="evaluate only the first N questions")
    parser.add_argument("--json-out", type=Path, default=None, help="write the offline eval JSON here")
    parser.add_argument("--keep", type=Path, default=None, help="build the KB in this folder and keep it")
    parser.add_argument("--held-out", type=int, default=50,
                        help="finally remove the gold pages of the last N questions and measure abstention on them (0: skip)")
    args = parser.parse_args()

    print(f"# HotpotQA (offline) — {platform.node()} {platform.machine()} {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        articles = build_kb(root, DATA / "corpus.jsonl")
        built_s = time.perf_counter() - start
        start = time.perf_counter()
        result = KnowledgeBase(root).reindex()
        index_s = time.perf_counter() - start
        questions_file = root / "questions.jsonl"
        write_questions(DATA / "questions.jsonl", questions_file)
        print(f"KB: {articles} articles in {result.topics} topics (written in {built_s:.1f} s, `kaas index` {index_s:.1f} s)")

        start = time.perf_counter()
        lint = lint_kb(KnowledgeBase(root))
        lint_s = time.perf_counter() - start
        by_check: dict[str, int] = {}
        for finding in lint.findings:
            by_check[f"{finding.check} ({finding.severity})"] = by_check.get(f"{finding.check} ({finding.severity})", 0) + 1
        print(f"lint: {lint_s:.1f} s; " + (", ".join(f"{k}: {v}" for k, v in sorted(by_check.items())) or "no findings"))

        settings = load_settings(root, env={})  # offline: no KAAS_MODEL
        start = time.perf_counter()
        report = run_eval_file(settings, questions_file, limit=args.limit)
        eval_s = time.perf_counter() - start
        print(f"\n## offline eval ({len(report.results)} questions, {eval_s:.1f} s including the lexical index build)\n")
        print(report.render_table())
        if args.json_out:
            report.write_json(args.json_out)

        print("\n## lexical shortlist (the catalog lines a model is shown when the catalog exceeds the budget)\n")
        print("| select budget | catalog lines shown | gold pages in shortlist | questions with both gold pages | ms per question |")
        print("| ---: | ---: | ---: | ---: | ---: |")
        for row in shortlist_recall(root, questions_file, args.limit):
            print(f"| {row['budget']:,} tokens | {row['lines_shown']:.0f} | {row['gold_recall'] * 100:.1f}% | "
                  f"{row['all_gold'] * 100:.1f}% | {row['ms_per_question']:.1f} |")

        if os.environ.get("KAAS_MODEL"):
            model_settings = load_settings(root)
            start = time.perf_counter()
            model_report = run_eval_file(model_settings, questions_file, limit=args.limit)
            print(f"\n## eval with {model_settings.model} ({len(model_report.results)} questions, "
                  f"{time.perf_counter() - start:.1f} s)\n")
            print(model_report.render_table())
            if args.json_out:
                model_report.write_json(args.json_out.with_suffix(".model.json"))

        if args.held_out:
            print(f"\n## abstention: the last {args.held_out} questions with their gold pages removed from the wiki\n")
            held = hold_out(root, DATA / "questions.jsonl", args.held_out)
            runs = [("offline", settings)] + ([(os.environ["KAAS_MODEL"], load_settings(root))] if os.environ.get("KAAS_MODEL") else [])
            for label, run_settings in runs:
                held_report = run_eval_file(run_settings, held)
                s = held_report.summary()
                print(f"- {label}: abstained on {s['abstention_rate'] * 100:.1f}% of {s['unanswerable']} questions "
                      f"whose gold pages are gone ({s['pages_read_mean']:.2f} pages read per question)")
    sys.stdout.flush()


def hold_out(root: Path, source: Path, count: int) -> Path:
    """Delete the gold pages of the last ``count`` questions, re-index, and write those questions
    as unanswerable: the wiki no longer holds what they need."""
    kb = KnowledgeBase(root)
    catalog = kb.require_catalog()
    resolver = GoldResolver(catalog)
    rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()][-count:]
    for row in rows:
        paths, _ = resolver.resolve(row["gold_titles"])
        for path in paths:
            (kb.wiki_dir / path).unlink(missing_ok=True)
    kb.reindex()
    target = root / "held-out.jsonl"
    target.write_text("".join(json.dumps({"id": r["id"], "question": r["question"], "answerable": False}) + "\n"
                              for r in rows), encoding="utf-8")
    return target


if __name__ == "__main__":
    main()
