"""Page selection with a model: the catalog goes in as delimited data, numbered, before the
question (the stable part of the prompt first, so a provider's prompt cache can serve it across
questions); a JSON list of line numbers or paths comes back, and every pick is checked against
the catalog (``navigate.page_refs``) before anything is read.

When the catalog is larger than the selection budget, a lexical shortlist (BM25 over titles,
summaries and text) narrows it to the best matches that fit, and the selection says so.
"""

from __future__ import annotations

import itertools
from typing import Iterable

import anyio

from kb_ai.llm.gateway import LLMGateway
from kb_ai.llm.prompts import PromptLibrary
from kb_ai.llm.tokens import CHARS_PER_TOKEN, estimate_tokens
from kb_ai.llm.usage import UsageMeter
from kb_ai.navigate.page_refs import line_number, resolve_page_ref, whole_link
from kb_ai.navigate.records import Selection
from kb_ai.offline.lexical import LexicalIndex
from kb_ai.store.catalog import Catalog, CatalogEntry

DEFAULT_SELECT_BUDGET = 6_000  # catalog tokens when the model's context window is unknown
MAX_SELECT_BUDGET = 32_000
MIN_SELECT_BUDGET = 1_000  # the smallest budget any context window gives
MIN_LINE_TOKENS = 8  # "- [T](a/b.md)" is already ~4 tokens; real lines are 20-60


def selection_schema(max_pages: int) -> dict:
    return {
        "type": "object",
        "properties": {"paths": {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "string"}]}, "maxItems": max(max_pages, 1) * 2}},
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
        return max(MIN_SELECT_BUDGET, min(context_window // 2, MAX_SELECT_BUDGET))
    return DEFAULT_SELECT_BUDGET


def resolve_paths(raw_paths: list, catalog: Catalog, limit: int,
                  lines: list[CatalogEntry] | None = None) -> Selection:
    """Validate the model's picks against the catalog: a line number of ``lines`` (the catalog
    lines it was shown, 1 = the first) or a path, title, slug or link, resolved by the one
    resolver (``navigate.page_refs``); drop the rest. Order is kept, duplicates removed, at most
    ``limit`` paths."""
    kept: list[str] = []
    dropped: list[str] = []
    repaired: dict[str, str] = {}
    for item in raw_paths:
        numbered = line_number(item, lines)
        if numbered is not None:
            path, text = numbered.path, numbered.path
        elif not isinstance(item, str) or not item.strip():
            dropped.append(repr(item))
            continue
        else:
            text, title_hint = item.strip(), None
            link = whole_link(text)
            if link:
                title_hint, text = link.text, link.target
            path = resolve_page_ref(text, catalog, title_hint)
        if path is None:
            dropped.append(item)
            continue
        if path != text and isinstance(item, str):
            repaired[item] = path
        if path not in kept:
            kept.append(path)
    return Selection(paths=kept[:limit], method="llm", dropped=dropped, repaired=repaired)


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
    raw = reply.get("paths", []) if isinstance(reply, dict) else []
    selection = resolve_paths(list(raw) if isinstance(raw, list) else [], catalog, max_pages, entries)
    selection.shown = [e.path for e in entries]
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
