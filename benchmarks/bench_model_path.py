"""Model-path answers (issue 27): facts held, valid citations, selection recall, abstention on
unanswerable questions, tokens per question, against a real model or offline.

    PYTHONPATH=py/src python benchmarks/bench_model_path.py --wiki demo=/tmp/demo --wiki realdocs=/tmp/rd \
        [--offline] [--out result.json]

The wikis are compiled offline first (``kaas compile --offline``), so compile is not the variable.
With a model: KAAS_MODEL=openai/qwen KAAS_API_BASE=http://127.0.0.1:8767/v1 KAAS_API_KEY=none
(``../shared/tools/real-llm-server --model qwen 8767``). Questions:
``benchmarks/questions/model_path.jsonl`` (expected facts written first; ``answerable: false``
marks a question no page answers). Same settings for every run: one round of reading, 3,000
tokens of pages, no response cache. Only APIs older than issue 27 are used (runs on the code
before it too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from dataclasses import replace
from pathlib import Path

from kb_ai.config import load_settings
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest

QUESTIONS = Path(__file__).parent / "questions" / "model_path.jsonl"
SAYS_NOT_COVERED = re.compile(r"(do(es)?\s*(not|n['’]t)|cannot|is\s*not|are\s*not)\s+(\w+\s+){0,3}?"
                              r"(cover|contain|mention|answer|provide|include)|not\s+(covered|mentioned)|"
                              r"no\s+information", re.IGNORECASE)


def score(q: dict, result) -> dict:
    answer = result.answer
    read = [p["path"] for p in result.pages]
    citations = result.citations
    out = {
        "id": q["id"], "answerable": q.get("answerable", True),
        "facts_held": all(f.lower() in answer.lower() for f in q["facts"]) if q["facts"] else None,
        "cited": bool(citations),
        "passage_cited": any(c.get("quote") for c in citations),
        "recall": any(g in read for g in q["gold_pages"]) if q["gold_pages"] else None,
        "abstained": bool(result.abstained or not result.pages or SAYS_NOT_COVERED.search(answer)),
        "pages": read,
        "prompt_tokens": result.usage.get("prompt_tokens", 0),
        "completion_tokens": result.usage.get("completion_tokens", 0),
        "select_prompt_tokens": sum(c["prompt_tokens"] for c in result.usage.get("calls", []) if c["purpose"] == "select"),
        "select_seconds": round(sum(c["seconds"] for c in result.usage.get("calls", []) if c["purpose"] == "select"), 2),
        "notices": result.notices,
        "answer": answer[:600],
    }
    return out


async def run(wikis: dict[str, str], offline: bool) -> list[dict]:
    questions = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    rows = []
    for name, folder in wikis.items():
        settings = load_settings(folder).with_overrides(max_rounds=1, read_budget=3_000, cache=False)
        if offline:
            settings = replace(settings, model=None)
        service = build_service(settings)
        for q in (q for q in questions if q["wiki"] == name):
            started = time.perf_counter()
            result = await ask(service, AskRequest(question=q["question"]))
            row = score(q, result)
            row["seconds"] = round(time.perf_counter() - started, 1)
            row["error"] = result.error
            rows.append(row)
            print(json.dumps({k: row[k] for k in ("id", "facts_held", "cited", "passage_cited", "recall", "abstained",
                                                  "prompt_tokens", "select_seconds", "seconds")}), flush=True)
    return rows


def summary(rows: list[dict]) -> dict:
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]
    answered = [r for r in answerable if not r["abstained"]] or answerable
    return {
        "facts_held": f"{sum(bool(r['facts_held']) for r in answerable)}/{len(answerable)}",
        "answers_cited": f"{sum(r['cited'] for r in answerable)}/{len(answerable)}",
        "answers_passage_cited": f"{sum(r['passage_cited'] for r in answerable)}/{len(answerable)}",
        "selection_recall": f"{sum(bool(r['recall']) for r in answerable)}/{len(answerable)}",
        "unanswerable_abstained": f"{sum(r['abstained'] for r in unanswerable)}/{len(unanswerable)}",
        "prompt_tokens_per_question": round(sum(r["prompt_tokens"] for r in rows) / max(len(rows), 1)),
        "select_prompt_tokens_per_question": round(sum(r["select_prompt_tokens"] for r in rows) / max(len(rows), 1)),
        "select_seconds_per_question": round(sum(r["select_seconds"] for r in rows) / max(len(rows), 1), 2),
        "answered_of_answerable": len(answered),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wiki", action="append", required=True, help="name=folder (name as in the questions)")
    parser.add_argument("--offline", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    wikis = dict(w.split("=", 1) for w in args.wiki)
    rows = asyncio.run(run(wikis, args.offline))
    by_wiki = {name: summary([r for r in rows if r["id"].startswith(name[0])]) for name in wikis}
    print(json.dumps(by_wiki, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": by_wiki, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
