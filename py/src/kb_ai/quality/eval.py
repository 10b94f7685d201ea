"""``kaas eval QUESTIONS.jsonl``: run questions through the real ask service and score them.

The questions file (its keys, the warning for any other) is read in ``quality/eval_questions.py``.
Gold pages given as titles are resolved through the catalog (HTML-unescaped, case-insensitive).

Metrics (per question, then averaged; each over the questions it applies to):

* selection **recall** = gold pages read / gold pages; **precision** = gold pages read / pages read
  (over questions that read at least one page); **all gold read** = every gold page was read,
  **some gold read** = at least one was; **first page is gold** = the page ranked first is gold.
* **exact match** and token **F1** against ``answer`` (and aliases), HotpotQA normalization, on the
  answer with its citation links and kaas's notes removed; **contains gold** = the normalized gold
  answer occurs in the answer (extractive offline answers are sentences, so EM is near 0 there).
* **citation validity** = valid citations / all citations (summed over questions).
* **abstention** on ``answerable: false`` questions: the answer read no page or says the wiki does
  not cover the question; the same test on answerable questions gives the false-abstention rate.
* LLM calls, tokens, cost and seconds per question.
* **rounds** (multi-hop reading, ``navigate/rounds.py``): per question, for each round of reading,
  the pages it added, how many of them are gold, and the model calls and tokens it cost; summed up
  as gold pages read per round, questions that needed a later round, and calls/tokens per round.

Questions run one after another through one service, so the lexical index is built once.
"""

from __future__ import annotations

import json
import platform
import re
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from kb_ai.config import Settings
from kb_ai.errors import KaasError, UnsafePathError
from kb_ai.navigate.ask import AskService, ask, build_service
from kb_ai.navigate.records import AskRequest, AskResult
from kb_ai.quality.eval_questions import EvalQuestion, load_questions
from kb_ai.quality.scoring import contains_answer, normalize_answer, score_answer, scoring_text
from kb_ai.store.catalog import Catalog
from kb_ai.files import atomic_write_text
from kb_ai.store.paths import normalize_wiki_path
from kb_ai.store.words import title_identity

# How answers say "the wiki does not know", besides reading no page at all (answer prompt wording).
_ABSTAIN = re.compile(
    r"\b(wiki|pages?|catalog)\b[^.\n]{0,60}\b(does not|doesn't|do not|don't|did not)\s+(cover|contain|mention|say|answer)"
    r"|\bnot covered\b|\bnothing in the wiki\b|\bno page (of|in) the wiki\b",
    re.IGNORECASE,
)


class GoldResolver:
    """Gold pages as catalog paths: a path that is in the catalog, else a title (unescaped, any case)."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        self.by_title = catalog.by_title  # title_identity -> first page of that title

    def resolve(self, gold: list[str]) -> tuple[list[str], list[str]]:
        """(catalog paths, entries that match no page)."""
        paths: list[str] = []
        unresolved: list[str] = []
        for item in gold:
            path = None
            if item.strip().lower().endswith(".md"):
                try:
                    candidate = normalize_wiki_path(item)
                    path = candidate if candidate in self.catalog else None
                except UnsafePathError:
                    path = None
            if path is None:
                path = self.by_title.get(title_identity(item))
            if path is None:
                unresolved.append(item)
            elif path not in paths:
                paths.append(path)
        return paths, unresolved


def is_abstention(result: AskResult, not_covered: str) -> bool:
    """The answer says the wiki does not know: an ``abstained`` event (no page was read), or (a
    model's answer) it says so in words. An offline answer only quotes pages, so for it the
    event is the only signal."""
    if result.abstained or not result.pages:
        return True
    if result.mode != "llm":
        return False
    answer = scoring_text(result.answer)
    if normalize_answer(not_covered) and normalize_answer(not_covered) in normalize_answer(answer):
        return True
    return bool(_ABSTAIN.search(answer))


@dataclass
class QuestionResult:
    id: str
    question: str
    answerable: bool
    gold_pages: list[str]
    unresolved_gold: list[str]
    pages_read: list[str]
    selection_method: str | None
    recall: float | None
    precision: float | None
    all_gold_read: bool | None
    any_gold_read: bool | None
    first_page_gold: bool | None
    answer: str
    gold_answer: str | None
    exact_match: float | None
    f1: float | None
    contains_gold: float | None
    facts_held: bool | None  # every fact of the question is in the answer (None: no facts given)
    citations_valid: int
    citations_invalid: int
    abstained: bool
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    cache_hits: int
    seconds: float
    notices: list[str]
    error: dict[str, str] | None = None
    # Per round of reading: {"round", "pages", "gold_read", "llm_calls", "prompt_tokens", "completion_tokens"}.
    rounds: list[dict[str, Any]] = field(default_factory=list)


def score_question(q: EvalQuestion, gold: list[str], unresolved: list[str], result: AskResult,
                   method: str | None, not_covered: str, seconds: float) -> QuestionResult:
    read = [p["path"] for p in result.pages]
    hits = len(set(gold) & set(read))
    has_gold = q.answerable and bool(gold or unresolved)
    gold_total = len(gold) + len(unresolved)  # an unresolvable gold page is a miss, not a skip
    recall = hits / gold_total if has_gold else None
    precision = (hits / len(read) if read else None) if has_gold else None
    scored = score_answer(result.answer, [q.answer, *q.aliases]) if (q.answer and q.answerable) else None
    usage = result.usage or {}
    return QuestionResult(
        id=q.id, question=q.question, answerable=q.answerable, gold_pages=gold, unresolved_gold=unresolved,
        pages_read=read, selection_method=method, recall=recall, precision=precision,
        all_gold_read=(hits == gold_total) if has_gold else None,
        any_gold_read=(hits > 0) if has_gold else None,
        first_page_gold=(bool(read) and read[0] in gold) if has_gold else None,
        answer=result.answer, gold_answer=q.answer,
        exact_match=scored.exact_match if scored else None, f1=scored.f1 if scored else None,
        contains_gold=scored.contains_gold if scored else None,
        facts_held=(all(contains_answer(scoring_text(result.answer), f) for f in q.facts)
                    if q.facts and q.answerable else None),
        citations_valid=len(result.citations), citations_invalid=len(result.invalid_citations),
        abstained=result.error is None and is_abstention(result, not_covered),
        llm_calls=int(usage.get("llm_calls", 0)), prompt_tokens=int(usage.get("prompt_tokens", 0)),
        completion_tokens=int(usage.get("completion_tokens", 0)), cost_usd=float(usage.get("cost_usd", 0.0)),
        cache_hits=int(usage.get("cache_hits", 0)), seconds=round(seconds, 4),
        notices=result.notices, error=result.error, rounds=_rounds(result, set(gold)),
    )


def _rounds(result: AskResult, gold: set[str]) -> list[dict[str, Any]]:
    """What each round of reading added, how much of it is gold, and what it cost."""
    out = []
    for r in result.rounds:
        usage = r.get("usage") or {}
        out.append({"round": r.get("round"), "pages": len(r.get("added", [])),
                    "gold_read": sum(1 for p in r.get("added", []) if p in gold),
                    "llm_calls": int(usage.get("llm_calls", 0)), "prompt_tokens": int(usage.get("prompt_tokens", 0)),
                    "completion_tokens": int(usage.get("completion_tokens", 0))})
    return out


def _round_summary(rs: list[QuestionResult]) -> dict[str, Any]:
    """Per round number: gold pages and pages it read, calls and tokens, per question (each mean
    over all questions, a question without that round counting 0), and how many questions had it."""
    numbers = sorted({r["round"] for q in rs for r in q.rounds if isinstance(r.get("round"), int)})
    n = len(rs) or 1
    by_round = {}
    for number in numbers:
        rounds = [r for q in rs for r in q.rounds if r.get("round") == number]
        by_round[str(number)] = {
            "questions": len({id(q) for q in rs for r in q.rounds if r.get("round") == number}),
            **{f"{key}_per_question": sum(r[key] for r in rounds) / n
               for key in ("pages", "gold_read", "llm_calls", "prompt_tokens", "completion_tokens")},
        }
    return {"rounds": by_round}


def _mean(values: list[float | bool | None]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _selection_summary(ok: list[QuestionResult]) -> dict[str, Any]:
    """How well the pages read matched the gold pages (``EvalReport.summary``)."""
    return {
        "selection_recall": _mean([r.recall for r in ok]),
        "selection_precision": _mean([r.precision for r in ok]),
        "all_gold_read": _mean([r.all_gold_read for r in ok]),
        "any_gold_read": _mean([r.any_gold_read for r in ok]),
        "first_page_gold": _mean([r.first_page_gold for r in ok]),
        "pages_read_mean": _mean([len(r.pages_read) for r in ok]),
    }


def _answer_summary(ok: list[QuestionResult], answerable: list[QuestionResult],
                    unanswerable: list[QuestionResult]) -> dict[str, Any]:
    """Answer scores, citations and abstentions (``EvalReport.summary``)."""
    valid = sum(r.citations_valid for r in ok)
    invalid = sum(r.citations_invalid for r in ok)
    return {
        "scored_answers": sum(1 for r in ok if r.f1 is not None),
        "exact_match": _mean([r.exact_match for r in ok]),
        "f1": _mean([r.f1 for r in ok]),
        "answer_contains_gold": _mean([r.contains_gold for r in ok]),
        "facts_held": _mean([r.facts_held for r in ok]),
        "questions_with_facts": sum(1 for r in ok if r.facts_held is not None),
        "citations_valid": valid,
        "citations_invalid": invalid,
        "citation_validity": valid / (valid + invalid) if valid + invalid else None,
        "answers_citing": _mean([r.citations_valid > 0 for r in answerable if r.pages_read]),
        "abstention_rate": _mean([r.abstained for r in unanswerable]),
        "false_abstention_rate": _mean([r.abstained for r in answerable]),
    }


def _cost_summary(rs: list[QuestionResult]) -> dict[str, Any]:
    """Model calls, tokens, money and time per question, errors included (``EvalReport.summary``)."""
    n = len(rs) or 1
    return {
        "llm_calls_per_question": sum(r.llm_calls for r in rs) / n,
        "prompt_tokens_per_question": sum(r.prompt_tokens for r in rs) / n,
        "completion_tokens_per_question": sum(r.completion_tokens for r in rs) / n,
        "cost_usd_per_question": sum(r.cost_usd for r in rs) / n,
        "cost_usd_total": round(sum(r.cost_usd for r in rs), 6),
        "cache_hits": sum(r.cache_hits for r in rs),
        "seconds_per_question": sum(r.seconds for r in rs) / n,
    }


@dataclass
class EvalReport:
    results: list[QuestionResult]
    settings: dict[str, Any]
    warnings: list[str] = field(default_factory=list)  # about the questions file (unknown keys)

    def summary(self) -> dict[str, Any]:
        """The run's figures, in a fixed key order: counts, page selection, answers, costs.
        Questions that ended with an error count in the counts and costs only."""
        rs = self.results
        ok = [r for r in rs if r.error is None]
        answerable = [r for r in ok if r.answerable]
        unanswerable = [r for r in ok if not r.answerable]
        return {
            "questions": len(rs),
            "errors": len(rs) - len(ok),
            "answerable": len(answerable),
            "unanswerable": len(unanswerable),
            "gold_unresolved": sum(len(r.unresolved_gold) for r in rs),
            **_selection_summary(ok),
            **_answer_summary(ok, answerable, unanswerable),
            "selection_fallbacks": sum(1 for r in ok if r.selection_method == "lexical-fallback"),
            **_cost_summary(rs),
            **_round_summary(ok),
        }

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.summary(), "settings": self.settings, "warnings": self.warnings,
                "questions": [asdict(r) for r in self.results]}

    def write_json(self, path: Path) -> None:
        try:
            atomic_write_text(Path(path), json.dumps(self.to_json(), ensure_ascii=False, indent=1) + "\n")
        except OSError as exc:
            raise KaasError(f"cannot write {path}: {exc.strerror or exc}") from None

    @property
    def exit_code(self) -> int:
        """1 when some question ended with an error (its metrics are missing), else 0."""
        return 1 if any(r.error is not None for r in self.results) else 0

    def error_lines(self, limit: int = 10) -> list[str]:
        """One line per question that ended with an error (the first ``limit``), naming it."""
        failed = [r for r in self.results if r.error is not None]
        lines = [f"question {r.id}: {(r.error or {}).get('message', 'failed')}"[:300] for r in failed[:limit]]
        if len(failed) > limit:
            lines.append(f"and {len(failed) - limit} more questions failed (see --json-out)")
        return lines

    def render_table(self) -> str:
        s = self.summary()

        def pct(value: float | None) -> str:
            return "—" if value is None else f"{value * 100:.1f}%"

        def num(value: float | None, digits: int = 2) -> str:
            return "—" if value is None else f"{value:,.{digits}f}"

        answerable_with_gold = sum(1 for r in self.results if r.recall is not None)
        rows = [
            ("questions", f"{s['questions']}", f"{s['answerable']} answerable, {s['unanswerable']} not; {s['errors']} errors"),
            ("selection recall", pct(s["selection_recall"]), f"gold pages read / gold pages, {answerable_with_gold} questions"),
            ("selection precision", pct(s["selection_precision"]), "gold pages read / pages read"),
            ("all gold pages read", pct(s["all_gold_read"]), "questions"),
            ("some gold page read", pct(s["any_gold_read"]), "questions"),
            ("first page is gold", pct(s["first_page_gold"]), "the page ranked first is a gold page"),
            ("pages read per question", num(s["pages_read_mean"]), ""),
            ("exact match", pct(s["exact_match"]), f"{s['scored_answers']} answers scored (HotpotQA normalization)"),
            ("token F1", pct(s["f1"]), ""),
            ("answer contains gold", pct(s["answer_contains_gold"]), ""),
            ("facts held", pct(s["facts_held"]), f"answers holding every fact given, {s['questions_with_facts']} questions"),
            ("citation validity", pct(s["citation_validity"]), f"{s['citations_valid']} valid, {s['citations_invalid']} invalid"),
            ("answers citing a page", pct(s["answers_citing"]), "answerable questions that read a page"),
            ("abstention (unanswerable)", pct(s["abstention_rate"]), f"{s['unanswerable']} questions"),
            ("false abstention", pct(s["false_abstention_rate"]), "answerable questions answered 'not covered'"),
            ("LLM calls per question", num(s["llm_calls_per_question"]), f"{s['cache_hits']} cache hits; {s['selection_fallbacks']} keyword fallbacks"),
            ("tokens per question", f"{s['prompt_tokens_per_question']:,.0f} + {s['completion_tokens_per_question']:,.0f}", "prompt + completion"),
            ("cost per question", f"${s['cost_usd_per_question']:.5f}", f"${s['cost_usd_total']:.4f} in all"),
            ("seconds per question", num(s["seconds_per_question"], 3), ""),
        ]
        for number, r in s["rounds"].items():
            rows.append((f"round {number}", f"{r['gold_read_per_question']:.2f}",
                         f"gold pages read per question; {r['questions']} questions, {r['pages_per_question']:.2f} pages, "
                         f"{r['llm_calls_per_question']:.2f} LLM calls, {r['prompt_tokens_per_question']:,.0f} + "
                         f"{r['completion_tokens_per_question']:,.0f} tokens per question"))
        if s["gold_unresolved"]:
            rows.insert(1, ("gold pages not found", f"{s['gold_unresolved']}", "counted as misses"))
        width = max(len(r[0]) for r in rows)
        value_width = max(len(r[1]) for r in rows)
        mode = self.settings.get("mode", "?")
        model = f", model {self.settings['model']}" if self.settings.get("model") else ""
        lines = [f"kaas eval — {mode} mode{model}, at most {self.settings.get('max_pages')} pages per question"]
        lines += [f"  warning: {warning}" for warning in self.warnings]
        lines += [f"  {name:<{width}}  {value:>{value_width}}  {note}".rstrip() for name, value, note in rows]
        return "\n".join(lines)


async def run_eval(service: AskService, questions: list[EvalQuestion], *,
                   progress: Callable[[int, int], None] | None = None) -> EvalReport:
    """Ask every question, one after another, through ``service`` and score the results."""
    catalog = service.kb.require_catalog()
    resolver = GoldResolver(catalog)
    not_covered = service.navigator.not_covered()
    results: list[QuestionResult] = []
    for number, q in enumerate(questions, start=1):
        gold, unresolved = resolver.resolve(q.gold_pages)
        start = time.perf_counter()
        result = await ask(service, AskRequest(question=q.question))
        results.append(score_question(q, gold, unresolved, result, result.method, not_covered,
                                      time.perf_counter() - start))
        if progress is not None:
            progress(number, len(questions))
    settings = service.settings
    return EvalReport(results, {
        "kb": str(service.kb.root),
        "mode": service.navigator.mode,
        "model": settings.model,
        "max_pages": settings.max_pages,
        "read_budget": settings.read_budget,
        "select_budget": settings.select_budget,
        "catalog_pages": len(catalog),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()}, Python {platform.python_version()}",
    })


def run_eval_file(settings: Settings, questions_file: Path, *, limit: int | None = None,
                  progress: Callable[[int, int], None] | None = None, delete_gold: bool = False) -> EvalReport:
    """What ``kaas eval`` does: load the questions, build one service, run them all.

    ``delete_gold``: measure abstention. The wiki is copied to a temporary folder (the KB itself
    is not touched), every gold page of the questions is deleted from the copy, and the questions
    are asked there as unanswerable: a question whose pages are gone should be answered "the
    wiki does not cover this"."""
    import asyncio

    warnings: list[str] = []
    questions = load_questions(Path(questions_file), warnings)
    if limit is not None:
        questions = questions[:limit]
    if delete_gold:
        return _eval_without_gold(settings, questions, warnings, progress)
    service = build_service(settings)
    report = asyncio.run(run_eval(service, questions, progress=progress))
    report.warnings = warnings
    return report


def _eval_without_gold(settings: Settings, questions: list[EvalQuestion], warnings: list[str],
                       progress: Callable[[int, int], None] | None) -> EvalReport:
    import asyncio
    import dataclasses
    import shutil
    import tempfile

    from kb_ai.store.kb import KnowledgeBase

    source = KnowledgeBase(settings.kb)
    resolver = GoldResolver(source.require_catalog())
    if not any(q.gold_pages for q in questions):
        raise KaasError("--delete-gold needs questions with gold pages (gold_pages or gold_titles)")
    with tempfile.TemporaryDirectory(prefix="kaas-eval-") as tmp:
        copy = Path(tmp) / "kb"
        shutil.copytree(source.wiki_dir, copy / "wiki", symlinks=True)
        for name in ("kaas.toml",):
            if (source.root / name).is_file():
                shutil.copy2(source.root / name, copy / name)
        deleted = 0
        for q in questions:
            for path in resolver.resolve(q.gold_pages)[0]:
                target = copy / "wiki" / path
                if target.is_file():
                    target.unlink()
                    deleted += 1
        KnowledgeBase(copy).reindex()
        unanswerable = [dataclasses.replace(q, answerable=False) for q in questions]
        service = build_service(dataclasses.replace(settings, kb=copy))
        report = asyncio.run(run_eval(service, unanswerable, progress=progress))
    report.settings.update({"kb": str(settings.kb), "gold_pages_deleted": deleted})
    report.warnings = warnings
    return report
