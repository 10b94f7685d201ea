"""Hierarchical page selection: the model picks topics from the topic index, then pages among
the chosen topics' catalog lines. One more model call than the shortlist; it lets the model,
not keyword overlap, decide which part of a very large wiki to look at.

Used when ``navigation = "topics"`` and the catalog is over the selection budget (under it, the
whole catalog goes in, as always). Every cut is reported: topic lines left out for the budget,
pages of the chosen topics left out of the second prompt.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import anyio

from kb_ai.llm.gateway import LLMGateway
from kb_ai.llm.prompts import PromptLibrary
from kb_ai.llm.tokens import estimate_tokens
from kb_ai.llm.usage import UsageMeter
from kb_ai.navigate.records import Selection
from kb_ai.navigate.select import select_pages_llm
from kb_ai.offline.lexical import LexicalIndex
from kb_ai.store.catalog import Catalog
from kb_ai.store.topics import Topic, TopicIndex, build_topic_index, load_model_summaries

MAX_TOPICS = 3
TOPIC_RANKING_HITS = 200  # keyword hits counted per topic to order topic lines when they must be cut
TOPIC_MAX_TOKENS = 300  # a few topic names
TOPIC_SCHEMA = {
    "type": "object",
    "properties": {"topics": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_TOPICS * 2}},
    "required": ["topics"],
    "additionalProperties": True,
}


class TopicIndexCache:
    """The topic index of a catalog version (and of each reader's view of it): building one reads
    every catalog line (~0.1 s per 1,000 pages), so it is built once and kept on the catalog
    object (``Catalog.derived``)."""

    def __init__(self, state_dir: Path | None):
        self.state_dir = state_dir

    def get(self, catalog: Catalog) -> TopicIndex:
        def build() -> TopicIndex:
            summaries = load_model_summaries(self.state_dir) if self.state_dir else {}
            return build_topic_index(catalog, summaries)

        return catalog.derived.get(("topic-index", self), build)


def topic_lines_within(index: TopicIndex, question: str, lexical: LexicalIndex | None, catalog: Catalog,
                       budget_tokens: int) -> tuple[list[str], int]:
    """Topic lines that fit the budget, topics with the most keyword hits first (alphabetical when
    nothing matches). A topic's subtopics are dropped before the topic itself. Returns
    (lines, number of lines left out)."""
    hits: Counter[str] = Counter()
    if lexical is not None:
        for page in lexical.search(question, TOPIC_RANKING_HITS):
            entry = catalog.get(page.path)
            if entry is not None:
                hits[entry.topic] += 1
    ordered = sorted(index.topics, key=lambda t: (-hits[t.name], t.name.casefold()))
    all_lines = sum(1 + len(t.subtopics) for t in ordered)
    chosen: dict[str, list[str]] = {}
    used = 0
    for with_subtopics in (True, False):  # first whole topics, then bare topic lines for the rest
        for topic in ordered:
            if topic.name in chosen:
                continue
            lines = [topic.line()]
            if with_subtopics:
                lines += ["  " + s.line() for s in topic.subtopics]
            cost = sum(estimate_tokens(line) for line in lines)
            if used + cost <= budget_tokens:
                chosen[topic.name] = lines
                used += cost
    shown = [line for topic in ordered if topic.name in chosen for line in chosen[topic.name]]
    return shown, all_lines - len(shown)


def _pages_of(catalog: Catalog, chosen: list[Topic]) -> Catalog:
    """The chosen topics' pages as a catalog, kept on ``catalog`` (``Catalog.derived``): a later
    question about the same topics reuses it, its sizes, lookups and keyword mask."""
    def build() -> Catalog:
        members = set().union(*(t.paths for t in chosen))
        return catalog.subset([e for e in catalog.entries if e.path in members])

    return catalog.derived.get(("topic-subset", frozenset(t.name for t in chosen)), build)


async def select_pages_by_topic(
    question: str,
    catalog: Catalog,
    *,
    gateway: LLMGateway,
    prompts: PromptLibrary,
    topics: TopicIndex,
    lexical_for,
    max_pages: int,
    budget_tokens: int,
    meter: UsageMeter,
) -> Selection | None:
    """Two calls: topics, then pages. Returns None when the model named no real topic (the
    caller falls back to the flat shortlist). Raises the gateway's LLMError on failure."""
    lines, cut = await anyio.to_thread.run_sync(
        lambda: topic_lines_within(topics, question, lexical_for(catalog), catalog, budget_tokens))
    messages = prompts.render("select_topics", question=question, topic_lines=lines, total_pages=len(catalog),
                              max_topics=MAX_TOPICS, cut=cut)
    reply = await gateway.complete_json(messages, schema=TOPIC_SCHEMA, schema_name="topic_selection",
                                        purpose="select-topics", meter=meter, max_tokens=TOPIC_MAX_TOKENS)
    names = [n for n in (reply.get("topics", []) if isinstance(reply, dict) else []) if isinstance(n, str)]
    if not names:
        selection = Selection(paths=[], method="llm")
        selection.notices.append("The model found no topic of the wiki that fits the question.")
        return selection
    chosen: list[Topic] = []
    unknown: list[str] = []
    for name in names:
        topic = topics.find(name)
        if topic is None:
            unknown.append(name)
        elif topic not in chosen:
            chosen.append(topic)
    chosen = chosen[:MAX_TOPICS]
    if not chosen:
        return None
    within = _pages_of(catalog, chosen)
    selection = await select_pages_llm(
        question, within, gateway=gateway, prompts=prompts, max_pages=max_pages,
        budget_tokens=budget_tokens, lexical=await anyio.to_thread.run_sync(lexical_for, within), meter=meter,
    )
    head = [f"Navigated by topic: {', '.join(t.name for t in chosen)} ({len(within)} of {len(catalog)} pages)."]
    if cut:
        head.append(f"{cut} topic lines did not fit the selection budget of {budget_tokens} tokens; "
                    "the topics with the most keyword matches were shown.")
    if unknown:
        head.append("Ignored topic names the model returned that are not topics of the wiki: "
                    + ", ".join(repr(n[:80]) for n in unknown[:5]))
    selection.notices[:0] = head
    return selection
