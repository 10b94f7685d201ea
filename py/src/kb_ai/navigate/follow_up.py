"""A further round of page selection with a model: it has read some pages and may ask for the
pages they lead to (prompt ``select_more.md``). The call is made only when the pages read lead
somewhere: they name (by title) or link to a catalog page not read yet.

The model sees the question, an excerpt of each page read with the catalog pages it names
(``navigate.bridge``), and the catalog minus the pages read. When the catalog is over the
selection budget, the shortlist it is shown is built from what was read, not from the question
alone: the pages the pages read name or link to come first, then the best keyword matches of the
question plus their titles (``bridge.expansion_query``), so the model can be shown the page it
could not have found from the question.
"""

from __future__ import annotations

import itertools

import anyio

from kb_ai.llm.gateway import LLMGateway
from kb_ai.llm.plausible import one_line
from kb_ai.llm.prompts import PromptLibrary
from kb_ai.llm.tokens import estimate_tokens
from kb_ai.llm.usage import UsageMeter
from kb_ai.navigate.bridge import BridgeOptions, TitleMentions, bridge_candidates, expansion_query, linked_pages
from kb_ai.navigate.records import ReadPage, Selection
from kb_ai.navigate.select import catalog_tokens, resolve_paths, selection_max_tokens, shortlist
from kb_ai.offline.lexical import LexicalIndex
from kb_ai.store.catalog import Catalog, CatalogEntry

EXCERPT_CHARS = 1_500  # of each page read, shown to the model
MAX_NAMES = 12  # catalog pages named per page read, shown to the model
WHY_CHARS = 200


def follow_up_schema(max_pages: int) -> dict:
    return {
        "type": "object",
        "properties": {"paths": {"type": "array", "items": {"type": "string"}, "maxItems": max(max_pages, 1) * 2},
                       "why": {"type": "string"}},
        "required": ["paths"],
        "additionalProperties": True,
    }


def follow_up_shortlist(catalog: Catalog, question: str, pages: list[ReadPage], budget_tokens: int,
                        lexical: LexicalIndex | None) -> tuple[list[CatalogEntry], bool]:
    """The catalog lines shown in a further round: every page not read when the catalog fits the
    budget; else the pages the pages read lead to, then the best keyword matches of the question
    plus their titles, as many as fit. Returns (entries, shortlisted?)."""
    read = {p.path for p in pages}
    if catalog_tokens(catalog) <= budget_tokens:
        return [e for e in catalog.entries if e.path not in read], False
    options = BridgeOptions(seeds=len(pages))
    bridges = [catalog.by_path[p] for p in bridge_candidates(pages, catalog, options)]
    ranked, _ = shortlist(catalog, expansion_query(question, pages, catalog, options), budget_tokens, lexical)
    chosen: list[CatalogEntry] = []
    seen = set(read)
    used = 0
    for entry in itertools.chain(bridges, ranked):
        if entry.path in seen:
            continue
        seen.add(entry.path)
        cost = estimate_tokens(entry.line())
        if used + cost > budget_tokens:
            break
        chosen.append(entry)
        used += cost
    return chosen, True


def _names(page: ReadPage, catalog: Catalog) -> list[str]:
    """Titles of the catalog pages ``page`` mentions or links to (the reader's catalog only)."""
    paths = dict.fromkeys([*linked_pages(page, catalog), *TitleMentions.of(catalog).find(page.text)])
    return [catalog.by_path[p].title for p in paths if p != page.path][:MAX_NAMES]


async def select_more_llm(question: str, catalog: Catalog, pages: list[ReadPage], *, gateway: LLMGateway,
                          prompts: PromptLibrary, max_pages: int, budget_tokens: int, lexical: LexicalIndex | None,
                          meter: UsageMeter) -> Selection:
    """One call: the pages to read next (possibly none). Raises the gateway's LLMError on failure."""
    def prepare():
        entries, shortlisted = follow_up_shortlist(catalog, question, pages, budget_tokens, lexical)
        shown = [{"path": p.path, "title": p.title, "excerpt": p.text[:EXCERPT_CHARS], "names": _names(p, catalog)}
                 for p in pages if p.is_evidence]
        return entries, shortlisted, shown

    leads = await anyio.to_thread.run_sync(
        lambda: bridge_candidates(pages, catalog, BridgeOptions(seeds=len(pages))))
    if not leads:
        # The pages read name and link to no other page of the catalog: nothing to follow, and a
        # call that shows the model the whole catalog again is not made (single-hop questions
        # cost what they cost before multi-hop reading).
        return Selection(paths=[], method="llm", why="the pages read lead to no other page")
    entries, shortlisted, shown = await anyio.to_thread.run_sync(prepare)
    if not entries:
        return Selection(paths=[], method="llm", why="no page of the catalog is left to read")
    messages = prompts.render("select_more", question=question, pages=shown, catalog_lines=[e.line() for e in entries],
                              max_pages=max_pages, shortlisted=shortlisted, total_pages=len(catalog))
    reply = await gateway.complete_json(
        messages, schema=follow_up_schema(max_pages), schema_name="more_pages", purpose="select-more", meter=meter,
        max_tokens=selection_max_tokens(max_pages) + WHY_CHARS // 3,
    )
    raw = reply.get("paths", []) if isinstance(reply, dict) else []
    read = {p.path for p in pages}
    selection = resolve_paths(list(raw) if isinstance(raw, list) else [], catalog, max_pages + len(read))
    selection.paths = [p for p in selection.paths if p not in read][:max_pages]
    why = reply.get("why") if isinstance(reply, dict) else None
    selection.why = one_line(why)[:WHY_CHARS] if isinstance(why, str) and why.strip() else "chosen by the model after reading the first pages"
    if selection.dropped:
        selection.notices.append(
            "Ignored page paths the model returned that are not in the catalog: " + ", ".join(selection.dropped[:5]))
    return selection
