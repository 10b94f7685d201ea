"""The seam between the ask pipeline and what does the thinking.

``ask.ask_events`` runs the same steps for every question (rewrite, select, read, answer,
validate citations, suggest); a ``Navigator`` supplies the judgement for each step. The LLM
navigator asks a model; the offline navigator ranks lexically and extracts sentences. Tests and
interfaces never branch on the mode: they get a navigator and call it.
"""

from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator, Protocol

from kb_ai.llm.usage import UsageMeter
from kb_ai.navigate.records import ReadPage, Selection, Turn
from kb_ai.offline.lexical import LexicalIndex
from kb_ai.store.catalog import Catalog


class Navigator(Protocol):
    mode: str  # "llm" | "offline"

    async def rewrite(self, question: str, history: list[Turn], meter: UsageMeter) -> tuple[str, list[str]]:
        """A standalone query for ``question`` in the light of ``history``, and notices."""

    async def select(self, question: str, catalog: Catalog, max_pages: int, meter: UsageMeter) -> Selection:
        """The pages to read, best first (possibly none)."""

    def answer(self, question: str, history: list[Turn], pages: list[ReadPage], catalog: Catalog,
               meter: UsageMeter) -> AsyncIterator[str]:
        """The answer text, streamed, citing pages as [Title](path)."""

    async def suggest(self, question: str, answer: str, pages: list[ReadPage], catalog: Catalog,
                      meter: UsageMeter) -> tuple[list[str], list[str]]:
        """Three follow-up questions, and notices."""

    def not_covered(self) -> str:
        """The honest answer when no page was selected."""


class LexicalIndexCache:
    """One lexical index per catalog version, shared by both navigators (selection fallback,
    shortlists, offline ranking). Rebuilt when the catalog object changes (the catalog store
    hands out a new object whenever master-index.md changes)."""

    VIEWS = 32

    def __init__(self, wiki_dir: Path, cache_dir: Path | None):
        self.wiki_dir = wiki_dir
        self.cache_dir = cache_dir
        self._catalog: Catalog | None = None
        self._index: LexicalIndex | None = None
        self._views: dict[int, tuple[Catalog, LexicalIndex]] = {}  # per reader's view / topic subset

    def get(self, catalog: Catalog) -> LexicalIndex:
        """The index of ``catalog``; for a subset of a catalog (a topic, one user's view) the
        full catalog's index, restricted to the subset's pages."""
        root = catalog.root
        if self._index is None or self._catalog is not root:
            self._index = LexicalIndex.load_or_build(self.wiki_dir, root, self.cache_dir)
            self._catalog = root
            self._views.clear()
        if catalog is root:
            return self._index
        hit = self._views.get(id(catalog))
        if hit is None or hit[0] is not catalog:
            if len(self._views) >= self.VIEWS:
                self._views.pop(next(iter(self._views)))
            hit = self._views[id(catalog)] = (catalog, self._index.restricted_to(catalog.by_path))
        return hit[1]
