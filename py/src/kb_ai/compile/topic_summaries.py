"""Compile, stage 6: topic summaries written by the model.

For every topic and subtopic whose membership changed since its summary was written (or that
has none), one call with the topic's catalog lines (an even sample when they exceed the budget)
returns a one-line summary. Summaries are kept in ``.kaas/topic-summaries.json`` with the
membership they describe, then ``wiki/topics.md`` is rewritten. An unchanged wiki costs no call;
a failed call leaves the deterministic summary in place and is reported.
"""

from __future__ import annotations

import asyncio

from kb_ai.errors import LLMError
from kb_ai.llm.tokens import estimate_tokens
from kb_ai.llm.usage import UsageMeter
from kb_ai.store.catalog import Catalog
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.articles import clean_summary
from kb_ai.store.topics import Topic, build_topic_index, load_model_summaries, save_model_summaries, stored_summary, write_topics

SUMMARY_CHARS = 200
LINES_BUDGET = 3_000  # tokens of catalog lines per topic
SUMMARY_MAX_TOKENS = 200  # one sentence of at most 160 characters
SCHEMA = {"type": "object", "properties": {"summary": {"type": "string", "minLength": 3}}, "required": ["summary"]}


def _sample_lines(topic: Topic, catalog: Catalog) -> list[str]:
    """The topic's catalog lines; an even sample of them when they exceed the budget."""
    lines = [catalog.by_path[p].line() for p in topic.paths if p in catalog]
    total = sum(estimate_tokens(line) for line in lines)
    if total <= LINES_BUDGET:
        return lines
    keep = max(1, int(len(lines) * LINES_BUDGET / total))
    step = len(lines) / keep
    return [lines[int(i * step)] for i in range(keep)]


async def refresh_topic_summaries(kb: KnowledgeBase, gateway, prompts, meter: UsageMeter) -> tuple[int, list[str]]:
    """Summarize changed topics with the model. Returns (summaries written, warnings)."""
    catalog = kb.catalog()
    stored = load_model_summaries(kb.state_dir)
    index = build_topic_index(catalog, stored)
    todo = [t for topic in index.topics for t in (topic, *topic.subtopics) if not t.by_model]
    warnings: list[str] = []
    fresh: dict[str, dict] = {}

    async def summarize(topic: Topic) -> None:
        lines = _sample_lines(topic, catalog)
        messages = prompts.render("topic_summary", topic=topic.name, count=topic.count, catalog_lines=lines, shown=len(lines))
        try:
            reply = await gateway.complete_json(messages, schema=SCHEMA, schema_name="topic_summary",
                                                purpose="topic-summary", meter=meter, max_tokens=SUMMARY_MAX_TOKENS)
        except LLMError as exc:
            warnings.append(f"topic {topic.name}: summary not written by the model ({exc.message}); the generated one stays")
            return
        summary = clean_summary(reply.get("summary", ""), SUMMARY_CHARS) if isinstance(reply, dict) else None
        if summary is None:
            warnings.append(f"topic {topic.name}: the model returned no usable summary; the generated one stays")
            return
        fresh[topic.name] = stored_summary(topic.name, topic.paths, summary)

    await asyncio.gather(*(summarize(t) for t in todo))
    if todo:
        names = {t.name for topic in index.topics for t in (topic, *topic.subtopics)}
        kept = {k: v for k, v in stored.items() if k in names}  # topics that no longer exist go
        save_model_summaries(kb.state_dir, {**kept, **fresh})
        write_topics(kb.wiki_dir, build_topic_index(catalog, {**kept, **fresh}))
    return len(fresh), warnings
