"""The topic of a new article, decided in one place (issue 14, item 7).

* **From folders:** a source in a folder of ``raw/`` gets that folder as its topic
  (``raw/product/x.md`` -> ``product``); a source directly in ``raw/`` gets ``general``
  (``folder_topic``).
* **From the documents,** when a folder's topic (or ``general``) would hold more than
  ``MAX_TOPIC_SIZE`` articles: its articles and new sources are grouped by a distinctive word
  they share (``offline.text_ranking.term_groups`` over each one's title and summary, the text the
  catalog shows), into groups of ``MIN_TOPIC_SIZE`` to ``MAX_TOPIC_SIZE``; the word names the
  topic (``football``; in a folder ``docs-football``). What is in no group keeps the folder's topic.

The grouping is deterministic (same documents, same topics, whatever the order or the machine).
An article never changes topic once written (its path is its address); a new source joins the
topic that the articles of its group already have, so incremental compiles grow topics instead
of reshuffling them, and a new topic appears when new sources form a group of their own.

The offline planner uses the topic as it is; the model's planner is shown it as ``topic_hint``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from kb_ai.store.articles import SUMMARY_LIMIT
from kb_ai.store.markdown_text import first_sentence
from kb_ai.store.paths import slugify, topic_folder

if TYPE_CHECKING:  # (ingest imports folder_topic; the context imports ingest)
    from kb_ai.compile.context import CompileRun, SourceWork
    from kb_ai.compile.plan_catalog import PlanCatalog
    from kb_ai.store.catalog import CatalogEntry

DEFAULT_TOPIC = "general"
MIN_TOPIC_SIZE = 10
MAX_TOPIC_SIZE = 100


def folder_topic(path: str) -> str:
    """The topic a source's folder gives it: ``raw/product/x.md`` -> ``product``, else ``general``."""
    parts = PurePosixPath(path).parts
    if len(parts) >= 3:
        return topic_folder(slugify(parts[1], fallback=DEFAULT_TOPIC))
    return DEFAULT_TOPIC


def assign_topics(run: CompileRun, work: list[SourceWork], catalog: PlanCatalog) -> None:
    """Set ``topic_hint`` of the sources in ``work`` that need an article of their own: their
    folder's topic, or the topic of their group when that folder's topic would be too large."""
    new = [w for w in work if not any(a in catalog.items for a in w.previous)]
    by_folder: dict[str, list[SourceWork]] = {}
    for item in new:
        item.source.topic_hint = folder_topic(item.path)
        by_folder.setdefault(item.source.topic_hint, []).append(item)
    if not by_folder:
        return
    new_paths = {w.path for w in new}
    existing: dict[str, set[str]] = {}  # folder topic -> articles its sources feed
    for path, record in run.state.sources.items():
        if path in new_paths:
            continue
        for article in record.articles:
            if article in catalog.items:
                existing.setdefault(folder_topic(path), set()).add(article)
    for folder, items in sorted(by_folder.items()):
        articles = sorted(existing.get(folder, ()))
        if len(articles) + len(items) <= MAX_TOPIC_SIZE:
            continue
        _split_folder(folder, items, [catalog.items[a] for a in articles])


def _texts_of_sources(sources: list[tuple[str, str, str]]) -> tuple[dict[str, str], dict[str, str]]:
    """(key -> title and summary, key -> title) of sources given as (path, title, text): the
    summary the offline planner writes, so a source is grouped by what its catalog line will say."""
    texts = {f"s:{path}": f"{title} {first_sentence(text, SUMMARY_LIMIT)}" for path, title, text in sources}
    return texts, {f"s:{path}": title for path, title, _ in sources}


def _split_folder(folder: str, items: list[SourceWork], articles: list[CatalogEntry]) -> None:
    from kb_ai.offline.text_ranking import term_groups  # noqa: PLC0415 (the index only when a topic is split)

    texts, titles = _texts_of_sources([(w.path, w.source.title, w.source.text) for w in items])
    texts.update({f"a:{e.path}": f"{e.title} {e.summary}" for e in articles})
    titles.update({f"a:{e.path}": e.title for e in articles})
    groups = term_groups(texts, MIN_TOPIC_SIZE, MAX_TOPIC_SIZE, titles)
    votes: dict[str, Counter[str]] = {}  # group word -> topics its written articles have
    for entry in articles:
        word = groups.get(f"a:{entry.path}", "")
        if word and entry.topic != folder:
            votes.setdefault(word, Counter())[entry.topic] += 1
    for item in items:
        word = groups.get(f"s:{item.path}", "")
        if not word:
            continue
        if word in votes:
            topic = min(votes[word].items(), key=lambda kv: (-kv[1], kv[0]))[0]
        else:
            topic = word if folder == DEFAULT_TOPIC else f"{folder}-{word}"
        item.source.topic_hint = topic_folder(slugify(topic, fallback=folder))
