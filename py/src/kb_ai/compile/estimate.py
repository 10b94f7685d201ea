"""``kaas compile --dry-run``: what a real run would do (``dry_run_plan``) and, with a model, what
it would cost (``estimate``), without writing anything."""

from __future__ import annotations

from kb_ai.compile.context import CompileRun, Engine, SourceWork
from kb_ai.compile.plan_catalog import PlanCatalog
from kb_ai.compile.writers import WRITE_PROMPT, WRITE_SOURCE_TOKENS
from kb_ai.errors import ArticleFormatError
from kb_ai.llm.tokens import estimate_tokens
from kb_ai.store.articles import read_article_text

TOPIC_SUMMARY_PROMPT_TOKENS = 1_500  # estimate: instructions + a topic's catalog lines (capped at 3,000)
ACTIONS = {"new": "create/update", "changed": "re-plan (changed)", "pending": "finish (interrupted)",
           "full": "re-plan (--full)"}


def dry_run_plan(run: CompileRun, engine: Engine, work: dict[str, SourceWork], deleted: list[str]) -> None:
    """The report's ``plan``: per source, what a real run would do and to which articles."""
    report = run.report
    for path, item in sorted(work.items()):
        action = ACTIONS.get(item.change, item.change)
        if item.revision_of:
            action = f"revision of {item.revision_of}"
        articles = [t.path + (" (new)" if t.new else "") for t in (item.plan or [])]
        if not articles and engine.mode == "llm":
            articles = ["(decided by the model)"]
        report.plan.append({"source": path, "action": action, "articles": articles})
    for path in deleted:
        record = run.state.sources[path]
        report.plan.append({"source": path, "action": "deleted: remove from sources:", "articles": list(record.articles)})
    if engine.mode == "offline":
        report.estimate = {"llm_calls": 0, "plan_calls": 0, "write_calls": 0, "prompt_tokens": 0,
                           "completion_tokens": 0, "cost_usd": 0.0}


def estimate(run: CompileRun, engine: Engine, need: list[SourceWork], revisions: list[SourceWork],
             catalog: PlanCatalog) -> dict:
    """Tokens and calls a real run would spend: plan prompts are rendered exactly; writes are
    estimated from source and article sizes (one write per article fed)."""
    prompt_tokens = completion_tokens = 0
    for work in need:
        messages, _ = engine.planner.messages(work.source, catalog, work.previous)
        prompt_tokens += sum(estimate_tokens(m["content"]) for m in messages)
        completion_tokens += 150
    write_calls, write_prompt, write_completion = _write_estimate(run, engine, need + revisions)
    prompt_tokens += write_prompt
    completion_tokens += write_completion
    # Topic summaries: one call per topic whose articles change; the topics a source will
    # feed are known only after planning, so its folder's topic stands in for them.
    topic_calls = len({work.source.topic_hint for work in need + revisions})
    prompt_tokens += topic_calls * TOPIC_SUMMARY_PROMPT_TOKENS
    completion_tokens += topic_calls * 60
    return {"llm_calls": len(need) + write_calls + topic_calls, "plan_calls": len(need),
            "write_calls": write_calls, "topic_calls": topic_calls, "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens, "cost_usd": _cost(run.report.model, prompt_tokens, completion_tokens)}


def _write_estimate(run: CompileRun, engine: Engine, works: list[SourceWork]) -> tuple[int, int, int]:
    """(write calls, prompt tokens, completion tokens) for writing what ``works`` feed."""
    state = run.state
    overhead = sum(estimate_tokens(m["content"]) for m in engine.prompts.render(
        WRITE_PROMPT, mode="create", article={"path": "", "title": "", "topic": "", "summary": "", "text": "",
                                              "outline": [], "partial": False, "hand_edited": False},
        contributions=[], today=run.today, summary_limit=200, rejected=None, related=[]))
    calls = prompt_tokens = completion_tokens = 0
    for work in works:
        source_tokens = min(estimate_tokens(work.source.text), WRITE_SOURCE_TOKENS)
        targets = work.previous or [None]
        if work.revision_of and work.revision_of in state.sources:
            targets = state.sources[work.revision_of].articles or [None]
        for target in targets:
            article_tokens = 0
            if target:
                try:
                    article_tokens = estimate_tokens(read_article_text(run.kb.wiki_dir / target, target))
                except (OSError, ArticleFormatError):  # missing, a FIFO, not UTF-8: estimated without it
                    article_tokens = 0
            calls += 1
            prompt_tokens += overhead + source_tokens + article_tokens
            completion_tokens += min(article_tokens + source_tokens // 2 + 200, 4000)
    return calls, prompt_tokens, completion_tokens


def _cost(model: str | None, prompt_tokens: int, completion_tokens: int) -> float | None:
    if not model:
        return None
    from kb_ai.llm.transports.litellm import map_cost, model_map_entry, token_cost  # noqa: PLC0415

    # The model map's per-token prices, read without importing litellm (seconds and ~150 MB);
    # litellm itself only for a model the map knows but prices otherwise.
    cost = map_cost(model, prompt_tokens, completion_tokens)
    if cost is None and model_map_entry(model) is not None:
        cost = token_cost(model, prompt_tokens, completion_tokens)
    return None if cost is None else round(cost, 6)
