"""Reading selected pages whole, within a token budget.

Pages are taken in rank order. A page that fits is read whole. A page that does not fit, while
at least 120 tokens of budget remain, is trimmed by section: its lead plus the sections that best match the question, in document
order, with a visible note naming what was left out. A page that cannot fit even trimmed is not
read, and a notice says so. Nothing is cut silently, and only pages read can be cited.
"""

from __future__ import annotations

import logging

from kb_ai.errors import KaasError
from kb_ai.llm.tokens import chars_for_tokens, estimate_tokens
from kb_ai.navigate.records import ReadPage
from kb_ai.offline.text_ranking import by_shared_terms
from kb_ai.store.access import OWNER, Reader
from kb_ai.store.catalog import Catalog
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.links import resolve_link
from kb_ai.store.markdown_text import find_links, split_sections
from kb_ai.store.pages import load_page

log = logging.getLogger(__name__)

MIN_USEFUL_TOKENS = 120  # below this a trimmed page is more noise than help


def _trim_to_budget(body: str, question: str, budget: int) -> tuple[str, list[str]] | None:
    """Lead + best-matching sections that fit ``budget`` tokens, in document order, plus a note."""
    sections = split_sections(body)
    if not sections:
        return None
    note_reserve = 60
    lead, rest = (sections[0], sections[1:]) if sections[0].level <= 1 else (None, sections)
    chosen: set[int] = set()
    used = note_reserve
    if lead is not None:
        lead_text = lead.text
        if estimate_tokens(lead_text) + used > budget:
            lead_text = lead_text[: chars_for_tokens(budget - used)].rsplit(" ", 1)[0] + " …"
        used += estimate_tokens(lead_text)
    else:
        lead_text = ""
    ranked = by_shared_terms(question, [section.text for section in rest])
    for i in ranked:
        cost = estimate_tokens(rest[i].text)
        if used + cost <= budget:
            chosen.add(i)
            used += cost
    omitted = [rest[i].heading or "(untitled section)" for i in range(len(rest)) if i not in chosen]
    if used - note_reserve < MIN_USEFUL_TOKENS and not chosen and len(lead_text) < 200:
        return None
    parts = [lead_text] if lead_text else []
    parts += [rest[i].text for i in sorted(chosen)]
    note = "[kaas: this page was shortened to fit the reading budget"
    note += f"; sections left out: {'; '.join(omitted)}]" if omitted else "]"
    parts.append(note)
    return "\n\n".join(parts), omitted


def without_hidden_links(text: str, path: str, catalog: Catalog) -> str:
    """``text`` (the page at ``path``) with every link to a wiki page outside ``catalog`` (the
    reader's view) cut to what a reader sees of it: ``[the bands](../hr/salaries.md)`` becomes
    ``the bands``, a reference definition to such a page goes. What a reader may not read is
    not named to a model either, not even by a page the reader may read."""
    cuts: list[tuple[int, int, str]] = []
    for link in find_links(text):
        page = resolve_link(path, link.target).page
        if page is None or page in catalog or (cuts and link.start < cuts[-1][1]):
            continue
        cuts.append((link.start, link.end, "" if link.kind == "definition" else text[link.text_start:link.text_end]))
    for start, end, keep in reversed(cuts):
        text = text[:start] + keep + text[end:]
    return text


def read_pages(kb: KnowledgeBase, paths: list[str], budget_tokens: int, question: str, *,
               catalog: Catalog | None = None, reader: Reader = OWNER) -> tuple[list[ReadPage], list[str]]:
    """Read ``paths`` (best first) within ``budget_tokens``. Returns (pages read, notices).

    ``catalog`` is what ``reader`` may see; every page is read through ``store.pages.load_page``,
    which checks its own ``access`` rule again as it is read (a hand edit may have restricted it
    since the catalog was indexed): a refused page reads exactly like a missing one.

    A saved answer (``kind: answer``) is navigation, not evidence: it is read, and the article
    pages it cites are queued right after it, so the answer can cite those instead."""
    pages: list[ReadPage] = []
    notices: list[str] = []
    remaining = budget_tokens
    catalog = catalog if catalog is not None else kb.catalog().visible_to(reader)
    queue = list(paths)
    seen: set[str] = set()
    while queue:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        try:
            article = load_page(kb, path, reader).article
        except KaasError as exc:
            notices.append(f"Could not read {path}: {exc.message}")
            continue
        entry = catalog.get(path)
        title = entry.title if entry else article.title
        text = article.body.strip() if reader.admin else without_hidden_links(article.body.strip(), path, catalog)
        kind = article.kind
        if kind == "answer":
            cited = [p for p in article.cited_paths if p in catalog and p not in seen]
            queue[0:0] = cited
        cost = estimate_tokens(text)
        if cost <= remaining:
            pages.append(ReadPage(path, title, text, kind=kind, body=article.body))
            remaining -= cost
            continue
        trimmed = _trim_to_budget(text, question, remaining) if remaining >= MIN_USEFUL_TOKENS else None
        if trimmed is None:
            notices.append(f"Not read: {title} ({path}) — the reading budget of {budget_tokens} tokens was used up.")
            continue
        trimmed_text, omitted = trimmed
        pages.append(ReadPage(path, title, trimmed_text, truncated=True, omitted_sections=tuple(omitted), kind=kind,
                              body=article.body))
        remaining -= estimate_tokens(trimmed_text)
        notices.append(
            f"Shortened to fit the reading budget: {title} ({path})"
            + (f"; sections left out: {', '.join(omitted)}" if omitted else "")
        )
    return pages, notices
