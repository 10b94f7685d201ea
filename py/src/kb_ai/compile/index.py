"""Compile, stages 5 and 6: re-index the wiki (``kaas index``) when an article changed, then
(with a model) refresh the topic summaries whose membership changed (``topic_summaries.py``)."""

from __future__ import annotations

from kb_ai.compile.context import CompileRun, Engine, stage_timer
from kb_ai.llm.usage import UsageMeter


def index(run: CompileRun, written: bool) -> None:
    """Rebuild master-index.md and the topic indexes when anything changed (or they are missing,
    or an interrupted run may have written articles)."""
    with stage_timer(run.report, "index") as stage:
        if written or run.full or not run.kb.master_index.exists() or run.state.resumed_units:
            result = run.kb.reindex()
            from kb_ai.offline.lexical import save_keyword_index  # noqa: PLC0415 (numpy only when indexing)

            save_keyword_index(run.kb)  # the first question after a compile loads it, not builds it
            stage.counts = {"articles": result.articles, "topics": result.topics, "written": int(result.written)}
            run.report.warnings.extend(w for w in result.warnings if "no summary" not in w)
        else:
            stage.counts = {"skipped": 1}


async def topics(run: CompileRun, engine: Engine) -> None:
    """Topic summaries written by the model; offline, ``kaas index`` wrote the deterministic ones."""
    if engine.mode != "llm":
        return
    from kb_ai.compile.topic_summaries import refresh_topic_summaries  # noqa: PLC0415

    with stage_timer(run.report, "topics") as stage:
        meter = UsageMeter()
        written, warnings = await refresh_topic_summaries(run.kb, engine.gateway, engine.prompts, meter)
        run.report.warnings.extend(warnings)
        stage.counts = {"summaries": written}
        stage.add_usage(meter)
