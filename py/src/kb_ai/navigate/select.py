"""Page selection with a model: the catalog goes in as delimited data, a JSON list of paths
comes back, and every path is checked against the catalog before anything is read.

When the catalog is larger than the selection budget, a lexical shortlist (BM25 over titles,
summaries and text) narrows it to the best matches that fit, and the selection says so.
"""

from __future__ import annotations

import difflib
import itertools
import re
from pathlib import PurePosixPath
from typing import Iterable

import anyio

from kb_ai.errors import UnsafePathError
from kb_ai.llm.gateway import LLMGateway
from kb_ai.llm.prompts import PromptLibrary
from kb_ai.llm.tokens import CHARS_PER_TOKEN, estimate_tokens
from kb_ai.llm.usage import UsageMeter
from kb_ai.navigate.records import Selection
from kb_ai.offline.lexical import LexicalIndex
from kb_ai.store.catalog import Catalog, CatalogEntry
from kb_ai.store.markdown_text import Link, inline_links
from kb_ai.store.paths import normalize_wiki_path, slugify
from kb_ai.store.words import title_identity

DEFAULT_SELECT_BUDGET = 6_000  # catalog tokens when the model's context window is unknown
MAX_SELECT_BUDGET = 32_000
MIN_LINE_TOKENS = 8  # "- [T](a/b.md)" is already ~4 tokens; real lines are 20-60


def selection_schema(max_pages: int) -> dict:
    return {
        "type": "object",
        "properties": {"paths": {"type": "array", "items": {"type": "string"}, "maxItems": max(max_pages, 1) * 2}},
        "required": ["paths"],
        "additionalProperties": True,
    }


def selection_max_tokens(max_pages: int) -> int:
    """Reply tokens for a list of paths: ~30 a path (pretty-printed JSON included), plus room."""
    return 100 + 30 * selection_schema(max_pages)["properties"]["paths"]["maxItems"]


def select_budget_for(context_window: int | None, configured: int | None) -> int:
    """Tokens of catalog the selection prompt may carry."""
    if configured:
        return configured
    if context_window:
        return max(1_000, min(context_window // 2, MAX_SELECT_BUDGET))
    return DEFAULT_SELECT_BUDGET


def resolve_paths(raw_paths: list, catalog: Catalog, limit: int) -> Selection:
    """Validate the model's paths against the catalog; repair near misses by title or slug;
    drop the rest. Order is kept, duplicates removed, at most ``limit`` paths."""
    kept: list[str] = []
    dropped: list[str] = []
    repaired: dict[str, str] = {}
    by_title, by_slug = catalog.by_title, catalog.by_stem  # built once per catalog version

    for item in raw_paths:
        if not isinstance(item, str) or not item.strip():
            dropped.append(repr(item))
            continue
        text = item.strip()
        title_hint = None
        link = _whole_link(text)
        if link:
            title_hint, text = link.text, link.target
        path = _repair(text, title_hint, catalog, by_title, by_slug)
        if path is None:
            dropped.append(item)
            continue
        if path != text:
            repaired[item] = path
        if path not in kept:
            kept.append(path)
    return Selection(paths=kept[:limit], method="llm", dropped=dropped, repaired=repaired)


def _whole_link(text: str) -> Link | None:
    """The link when ``text`` is one Markdown link and nothing else (a model answering
    ``[Title](path)`` for a path), found by the one link finder."""
    links = inline_links(text)
    if len(links) == 1 and links[0].start == 0 and links[0].end == len(text) and not links[0].image:
        return links[0]
    return None


def _repair(text: str, title_hint: str | None, catalog: Catalog, by_title, by_slug) -> str | None:
    text = re.sub(r"\.(json|txt|html?|markdown)$", "", text, flags=re.IGNORECASE)
    candidate = text if text.endswith(".md") else text + ".md"
    try:
        normalized = normalize_wiki_path(candidate)
    except UnsafePathError:
        normalized = None
    if normalized and normalized in catalog:
        return normalized
    for title in (title_hint, text):
        if title and title_identity(title) in by_title:
            return by_title[title_identity(title)]
    stem = PurePosixPath(normalized).stem if normalized else slugify(text)
    for slug in (stem, slugify(text), slugify(title_hint or "")):
        matches = by_slug.get(slug, [])
        if len(matches) == 1:
            return matches[0]
    if normalized:
        close = difflib.get_close_matches(normalized, list(catalog.by_path), n=1, cutoff=0.88)
        if close:
            return close[0]
    return None


def shortlist(catalog: Catalog, question: str, budget_tokens: int, lexical: LexicalIndex | None) -> tuple[list[CatalogEntry], bool]:
    """The catalog entries to show the model: all of them when they fit in the budget, else the
    best lexical matches that fit (rank order). Returns (entries, shortlisted?)."""
    if catalog_tokens(catalog) <= budget_tokens:
        return list(catalog.entries), False
    # No line is shorter than MIN_LINE_TOKENS, so more hits than this could never fit: asking
    # BM25 for just these keeps a question on 100,000 pages from sorting 100,000 scores.
    wanted = min(len(catalog), budget_tokens // MIN_LINE_TOKENS + 1)
    ranked = [catalog.by_path[p.path] for p in lexical.search(question, wanted)] if lexical else []
    seen = {e.path for e in ranked}
    unscored = (e for e in catalog.entries if e.path not in seen)  # then catalog order, lazily
    return fill_budget(itertools.chain(ranked, unscored), budget_tokens), True


def fill_budget(entries: Iterable[CatalogEntry], budget_tokens: int) -> list[CatalogEntry]:
    """``entries`` in their order, each page once, while their catalog lines fit in
    ``budget_tokens`` (a shortlist: the first line that does not fit ends it)."""
    chosen: list[CatalogEntry] = []
    seen: set[str] = set()
    used = 0
    for entry in entries:
        if entry.path in seen:
            continue
        seen.add(entry.path)
        cost = estimate_tokens(entry.line())
        if used + cost > budget_tokens:
            break
        chosen.append(entry)
        used += cost
    return chosen


def catalog_tokens(catalog: Catalog) -> int:
    """Estimated tokens of the whole catalog (an upper bound of the per-line estimates' sum);
    the character count is computed once per catalog version."""
    return int(catalog.line_chars / CHARS_PER_TOKEN) + len(catalog)


def known_to_fit(catalog: Catalog, budget_tokens: int) -> bool:
    """The whole catalog fits in the budget, as far as is known without blocking work (its size
    is computed when it is loaded): then no keyword search is needed, and nothing runs in a
    worker thread (each hop made the event loop wait its turn at the GIL under many chats)."""
    return catalog.line_chars_known and catalog_tokens(catalog) <= budget_tokens


async def select_pages_llm(
    question: str,
    catalog: Catalog,
    *,
    gateway: LLMGateway,
    prompts: PromptLibrary,
    max_pages: int,
    budget_tokens: int,
    lexical: LexicalIndex | None,
    meter: UsageMeter,
) -> Selection:
    """One selection call. Raises the gateway's LLMError on failure (the caller degrades)."""
    if known_to_fit(catalog, budget_tokens):
        entries, shortlisted = list(catalog.entries), False
    else:  # a keyword search over the whole catalog: in a worker thread, not on the event loop
        entries, shortlisted = await anyio.to_thread.run_sync(shortlist, catalog, question, budget_tokens, lexical)
    messages = prompts.render(
        "select",
        question=question,
        catalog_lines=[e.line() for e in entries],
        max_pages=max_pages,
        shortlisted=shortlisted,
        total_pages=len(catalog),
    )
    reply = await gateway.complete_json(
        messages, schema=selection_schema(max_pages), schema_name="page_selection", purpose="select", meter=meter,
        max_tokens=selection_max_tokens(max_pages),
    )
    selection = resolve_paths(list(reply.get("paths", [])) if isinstance(reply, dict) else [], catalog, max_pages)
    if shortlisted:
        selection.notices.append(
            f"The catalog has {len(catalog)} pages, more than the selection budget of {budget_tokens} tokens: "
            f"the model was shown the {len(entries)} best keyword matches."
        )
    if selection.dropped:
        selection.notices.append(
            "Ignored page paths the model returned that are not in the catalog: " + ", ".join(selection.dropped[:5])
        )
    return selection
