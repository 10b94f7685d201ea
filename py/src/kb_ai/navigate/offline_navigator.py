"""Offline navigation: BM25 selection and extractive answers. Useful, fast, and it says what it is.

Every step is keyword work on page text (index loads and builds, searches, sentence scoring):
it runs in a worker thread, never on the event loop a server shares between readers.
"""

from __future__ import annotations

from typing import AsyncIterator

import anyio

from kb_ai.llm.usage import UsageMeter
from kb_ai.navigate import bridge
from kb_ai.navigate.navigator import LexicalIndexCache
from kb_ai.navigate.records import ReadPage, Selection, Turn
from kb_ai.offline.extractive import PageText, best_sentences
from kb_ai.store.catalog import Catalog

RELATIVE_CUTOFF = 0.35  # a page scoring under 35% of the best match is noise, not a second source
OFFLINE_LABEL = "*Offline mode (no model configured): the passages of the wiki that best match the question.*"
NOT_COVERED = (
    "Nothing in the wiki matches this question. *(Offline mode: keyword search found no page "
    "containing its terms.)*"
)


def lexical_selection(index, question: str, max_pages: int, method: str) -> Selection:
    hits = index.search(question, max_pages)
    if hits:
        top = hits[0].score
        hits = [h for h in hits if h.score >= top * RELATIVE_CUTOFF]
    return Selection(paths=[h.path for h in hits], method=method)


class OfflineNavigator:
    mode = "offline"

    def __init__(self, lexical: LexicalIndexCache, label: str = OFFLINE_LABEL, *, rounds: int = 1):
        self.lexical = lexical
        self.label = label  # the answer's first line: says what the answer is, and why
        self.rounds = rounds  # rounds of reading (settings.max_rounds): later ones follow bridges

    def preflight(self) -> None:
        """Nothing to check: no model, no key."""

    async def rewrite(self, question: str, history: list[Turn], meter: UsageMeter) -> tuple[str, list[str]]:
        previous = [t.content for t in history if t.role == "user"]
        if not previous:
            return question, []
        return f"{previous[-1]} {question}", ["Offline rewrite: the previous question was added to the query."]

    async def select(self, question: str, catalog: Catalog, max_pages: int, meter: UsageMeter) -> Selection:
        return await anyio.to_thread.run_sync(self._select, question, catalog, max_pages)

    def _select(self, question: str, catalog: Catalog, max_pages: int) -> Selection:
        """Keyword hits and the pages the question names by title, leaving a page for each later
        round (``navigate.bridge.first_round``)."""
        index = self.lexical.get(catalog)
        selection = lexical_selection(index, question, max_pages, "lexical")
        reserve = min(self.rounds - 1, max_pages - 1)
        selection.paths, named = bridge.first_round(selection.paths, question, index, catalog, max_pages, reserve)
        if named:
            selection.why = "keyword search and the pages the question names: " + "; ".join(
                catalog.by_path[p].title for p in named)
        return selection

    async def follow_up(self, question: str, catalog: Catalog, pages: list[ReadPage], latest: list[ReadPage],
                        max_pages: int, meter: UsageMeter) -> Selection:
        """The pages the latest round's pages name or link to (``navigate.bridge.next_round``)."""
        def run() -> Selection:
            paths = bridge.next_round(question, latest, {p.path for p in pages}, self.lexical.get(catalog), catalog,
                                      max_pages)
            why = "pages the pages read name: " + "; ".join(catalog.by_path[p].title for p in paths)
            return Selection(paths=paths, method="lexical-bridge", why=why)

        return await anyio.to_thread.run_sync(run)

    async def answer(self, question: str, history: list[Turn], pages: list[ReadPage], catalog: Catalog,
                     meter: UsageMeter) -> AsyncIterator[str]:
        lines = await anyio.to_thread.run_sync(self._answer_lines, question, pages, catalog)
        for line in lines:
            yield line + "\n"

    def _answer_lines(self, question: str, pages: list[ReadPage], catalog: Catalog) -> list[str]:
        evidence = best_sentences(question, [PageText(p.path, p.title, p.text) for p in pages if p.is_evidence])
        lines = [self.label, ""]
        if evidence:
            lines += [f"- {e.sentence} [{e.title}]({e.path})" for e in evidence]
        else:
            lines += ["No single sentence matches the question; these pages are the closest:"]
            lines += [f"- [{p.title}]({p.path})" for p in pages if p.is_evidence]
        _found, missing = self.lexical.get(catalog).known_terms(question)
        if missing:
            lines += ["", f"No page of the wiki mentions: {', '.join(missing)}."]
        return lines

    async def suggest(self, question: str, answer: str, pages: list[ReadPage], catalog: Catalog,
                      meter: UsageMeter) -> tuple[list[str], list[str]]:
        return await anyio.to_thread.run_sync(self._suggestions, question, pages, catalog)

    def _suggestions(self, question: str, pages: list[ReadPage], catalog: Catalog) -> tuple[list[str], list[str]]:
        read = {p.path for p in pages}
        hits = self.lexical.get(catalog).search(question + " " + " ".join(p.title for p in pages), 10)
        related = [h.path for h in hits if h.path not in read and h.path in catalog]
        topics = {catalog.by_path[p.path].topic for p in pages if p.path in catalog}
        related += [e.path for e in catalog.entries if e.topic in topics and e.path not in read and e.path not in related]
        titles = [catalog.by_path[path].title for path in related]
        questions = [f"What does the wiki say about {t}?" for t in titles[:3]]
        return questions, ["Offline suggestions: related pages by keyword match and topic."]

    def not_covered(self) -> str:
        return NOT_COVERED
