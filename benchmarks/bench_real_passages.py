"""Passage-level citations with a real model (issue 15, item 3): how often a citation in a model
answer carries a passage that really is in the cited page.

    ../shared/tools/real-llm-server 8765 &       # OpenAI-compatible, SmolLM2 (llama.cpp)
    .venv/bin/python benchmarks/bench_real_passages.py [--work DIR] [--count 10] [--base URL]

Builds ``realdocs`` (../shared/eval-data/realdocs-dev, compiled offline: bench_answers.py's
builder) and asks every second question of benchmarks/realdocs_questions.jsonl (up to --count)
with the model, model-only: a failed model call is an error here, never the offline extract
(whose citations would be the offline answerer's, not the model's). The question's gold pages
are given to read (``AskRequest.paths``: one model call, the answer), so that what is measured is
the answer's citations, not the tiny model's page choice; ``--model-selects`` lets the model
choose the pages (a second, slow call).

For every citation of pages read, a passage is *verified* when all of this holds for the page
file as stored: ``plain_text(body[start:end])`` starts with the quote, the quote (whitespace
folded) is in the page's rendered text, and the anchor is an id of the rendered page that is the
last heading before the passage (or no anchor and no heading before it). Prints one line per
question and the totals: citations, with a passage, verified.

The tiny model seldom writes the ``[Title](path)`` links the prompt asks for, so a second figure
is measured on the same answers: each sentence of the model's answer made to cite the page read,
as the prompt asks (``cited_as_asked``), then the real citation step (``validate_citations``):
how many of the model's sentences get a passage, and whether every passage found verifies.
``--out FILE`` keeps the answers and their citations as JSON; ``--rescore FILE`` scores such a
file again without the model (the citation step is deterministic).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import tempfile
import time
from pathlib import Path

from bench_answers import REALDOCS, build_realdocs

from kb_ai.config import Settings
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.citations import validate_citations
from kb_ai.navigate.read import read_pages
from kb_ai.navigate.records import AskRequest
from kb_ai.quality.eval import GoldResolver
from kb_ai.server.render import render_markdown
from kb_ai.store.anchors import heading_anchors
from kb_ai.store.articles import split_frontmatter
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.markdown_text import plain_text

BENCH = Path(__file__).resolve().parent
ATTEMPTS = 4
BASE = os.environ.get("KAAS_REAL_LLM_BASE", "http://127.0.0.1:8765/v1")


def passage_problem(wiki: Path, path: str, passage: dict) -> str | None:
    """Why ``passage`` is not the cited page's own text at its heading, or None when it is."""
    body = split_frontmatter((wiki / path).read_text(encoding="utf-8"), path)[1]
    start, end, quote = passage.get("start"), passage.get("end"), passage.get("quote")
    if not (isinstance(start, int) and isinstance(end, int) and isinstance(quote, str) and quote.strip()):
        return "incomplete"
    source = body[start:end] if 0 <= start < end <= len(body) else ""
    if not (plain_text(source).startswith(quote) or source.strip() == quote):  # a code line is quoted as it is
        return "offsets"
    html = render_markdown(body, from_path=path).html
    text = " ".join(re.sub(r"<[^>]+>", "", html).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").split())
    if " ".join(quote.split()) not in text:
        return "quote not in the rendered page"
    before = [a for a in heading_anchors(body) if a.start < start]
    if passage.get("anchor") is None:
        return None if not before else "no anchor under a heading"
    ids = re.findall(r'<h[1-6][^>]* id="([^"]+)"', html)
    if passage["anchor"] not in ids or not before or before[-1].id != passage["anchor"]:
        return "anchor"
    return None


def cited_as_asked(answer: str, title: str, path: str) -> str:
    """``answer`` with every sentence citing ``path`` as the answer prompt asks ("... [Title](path).")."""
    link = f" [{title}]({path})"
    lines = []
    for line in answer.splitlines():
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", line.strip()) if s]
        lines.append(" ".join(s[:-1] + link + s[-1] if s[-1] in ".!?" else s + link for s in sentences))
    return "\n".join(lines)


def as_asked(kb: KnowledgeBase, question: str, answer: str, path: str) -> tuple[int, int, int, list[str]]:
    """(sentences, sentences given a passage, passages found, problems) when every sentence of
    ``answer`` cites the page ``path`` (read again as the answer read it)."""
    catalog = kb.require_catalog()
    pages, _ = read_pages(kb, [path], 3000, question, catalog=catalog)
    text = cited_as_asked(answer, catalog.by_path[path].title, path)
    citations, _ = validate_citations(text, pages)
    sentences = text.count(f"]({path})")
    passages = [p for c in citations for p in c.passages]
    backed = {k for p in passages for k in p.get("links", ())}
    problems = [w for p in passages if (w := passage_problem(kb.wiki_dir, path, p))]
    return sentences, len(backed), len(passages), problems


def interrupted(error: dict | None) -> bool:
    """An answer stream the server ended with no text, or with no finish reason. The shared
    llama-cpp-python server interrupts a stream when another request arrives
    (``interrupt_requests``): such an answer is asked again, up to ``ATTEMPTS`` times."""
    message = (error or {}).get("message", "")
    return "returned an empty reply" in message or "ended early" in message


def questions(count: int) -> list[dict]:
    rows = [json.loads(line) for line in (BENCH / "realdocs_questions.jsonl").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    return rows[::2][:count]


def model_settings(root: Path, base: str, timeout: float) -> Settings:
    return Settings(kb=root, model="openai/smollm2", api_base=base, api_key="none", timeout=timeout,
                    call_deadline=timeout, max_retries=1, cache=False, max_pages=2, max_rounds=1,
                    read_budget=3000, answer_fallback=False)


async def run(root: Path, base: str, count: int, timeout: float, model_selects: bool) -> dict:
    service = build_service(model_settings(root, base, timeout))
    gold = GoldResolver(KnowledgeBase(root).require_catalog())
    kb = KnowledgeBase(root)
    totals = {"questions": 0, "answered": 0, "errors": 0, "interrupted": 0, "citations": 0, "with_passage": 0, "verified": 0,
              "as_asked_sentences": 0, "as_asked_with_passage": 0, "as_asked_passages": 0, "as_asked_verified": 0,
              "seconds": [], "answers": []}
    for row in questions(count):
        started = time.monotonic()
        paths = [] if model_selects else gold.resolve(row["gold_pages"])[0][:2]
        for _attempt in range(ATTEMPTS):
            result = await ask(service, AskRequest(question=row["question"], suggest=False, model_only=True, paths=paths))
            if not interrupted(result.error):
                break
            totals["interrupted"] += 1
        seconds = time.monotonic() - started
        totals["questions"] += 1
        totals["seconds"].append(seconds)
        if result.error:
            totals["errors"] += 1
            totals["answers"].append({"id": row["id"], "error": result.error})
            print(f"- {row['id']}: error {result.error['code']}: {result.error['message'][:100]} ({seconds:.0f} s)")
            continue
        totals["answered"] += 1
        problems = []
        with_passage = verified = 0
        for citation in result.citations:
            passages = citation.get("passages") or []
            if passages:
                with_passage += 1
                wrong = [passage_problem(root / "wiki", citation["path"], p) for p in passages]
                if not any(wrong):
                    verified += 1
                else:
                    problems.extend(w for w in wrong if w)
        asked = (0, 0, 0, [])
        if result.pages and result.answer.strip():
            asked = as_asked(kb, row["question"], result.answer, result.pages[0]["path"])
        totals["as_asked_sentences"] += asked[0]
        totals["as_asked_with_passage"] += asked[1]
        totals["as_asked_passages"] += asked[2]
        totals["as_asked_verified"] += asked[2] - len(asked[3])
        totals["answers"].append({"id": row["id"], "answer": result.answer, "citations": result.citations,
                                  "as_asked": asked[:3], "problems": asked[3]})
        totals["citations"] += len(result.citations)
        totals["with_passage"] += with_passage
        totals["verified"] += verified
        read = [p["path"] for p in result.pages]
        calls = ", ".join(f"{c['purpose']} {c['seconds']:.0f} s" for c in result.usage.get("calls", []))
        print(f"- {row['id']}: {len(read)} read, {len(result.citations)} cited, {with_passage} with a passage, "
              f"{verified} verified{' (' + '; '.join(problems) + ')' if problems else ''}; as asked: {asked[1]} of "
              f"{asked[0]} sentences with a passage, {asked[2] - len(asked[3])} of {asked[2]} verified ({seconds:.0f} s: {calls})"
              f" — {' '.join(result.answer.split())[:90]!r}")
    return totals


def rescore(root: Path, saved: Path) -> None:
    kb = KnowledgeBase(root)
    gold = GoldResolver(kb.require_catalog())
    rows = {row["id"]: row for row in questions(10_000)}
    sums = [0, 0, 0, 0]
    for item in json.loads(saved.read_text()):
        if item.get("error"):
            print(f"- {item['id']}: error {item['error']['code']}")
            continue
        row = rows[item["id"]]
        path = gold.resolve(row["gold_pages"])[0][0]
        asked = as_asked(kb, row["question"], item["answer"], path)
        for i, value in enumerate((*asked[:3], asked[2] - len(asked[3]))):
            sums[i] += value
        print(f"- {item['id']}: {len(item['citations'])} cited; as asked: {asked[1]} of {asked[0]} sentences with a "
              f"passage, {asked[2] - len(asked[3])} of {asked[2]} verified {asked[3] or ''}")
    print(f"\nas asked: {sums[1]} of {sums[0]} sentences with a passage; {sums[3]} of {sums[2]} passages verified")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="build the realdocs KB here and keep it")
    parser.add_argument("--count", type=int, default=10, help="questions asked (every second one of the file)")
    parser.add_argument("--base", default=BASE, help="the model server's OpenAI-compatible base URL")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds one model call may take")
    parser.add_argument("--rescore", type=Path, default=None, help="score the answers of an --out file again (no model)")
    parser.add_argument("--out", type=Path, default=None, help="write the answers and their citations here (JSON)")
    parser.add_argument("--model-selects", action="store_true", help="the model chooses the pages (else the gold pages are read)")
    args = parser.parse_args()
    if not REALDOCS.is_dir():
        raise SystemExit(f"no real docs at {REALDOCS}")
    print(f"# Passages with a real model — {platform.node()} {platform.machine()} {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d %H:%M')} UTC, load {os.getloadavg()[0]:.1f}, model server {args.base}, "
          f"pages {'chosen by the model' if args.model_selects else 'given (gold)'}")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        build_realdocs(work / "realdocs")
        if args.rescore:
            rescore(work / "realdocs", args.rescore)
            return
        totals = asyncio.run(run(work / "realdocs", args.base, args.count, args.timeout, args.model_selects))
    seconds = sorted(totals.pop("seconds"))
    answers = totals.pop("answers")
    if args.out:
        args.out.write_text(json.dumps(answers, indent=1, ensure_ascii=False))
    print(f"\n{json.dumps(totals)}; seconds per question: median {seconds[len(seconds) // 2]:.0f}, "
          f"max {seconds[-1]:.0f}; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
