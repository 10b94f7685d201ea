"""The seam between the ask pipeline and what does the thinking.

``ask.ask_events`` runs the same steps for every question (rewrite, select, read, answer,
validate citations, suggest); a ``Navigator`` supplies the judgement for each step. The LLM
navigator asks a model; the offline navigator ranks lexically and extracts sentences. Tests and
interfaces never branch on the mode: they get a navigator and call it.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import AsyncIterator, Protocol

from kb_ai.llm.usage import UsageMeter
from kb_ai.navigate.records import ReadPage, Selection, Turn
from kb_ai.offline.lexical import LexicalIndex
from kb_ai.store.catalog import Catalog

log = logging.getLogger(__name__)


class Navigator(Protocol):
    mode: str  # "llm" | "offline"

    def preflight(self) -> None:
        """Raise a ``KaasError`` when no question can be answered at all (no model name, no API
        key for a hosted provider): called once per question, before anything is read."""

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

    async def follow_up(self, question: str, catalog: Catalog, pages: list[ReadPage], latest: list[ReadPage],
                        max_pages: int, meter: UsageMeter) -> Selection:
        """After reading ``pages`` (``latest``: those of the last round), at most ``max_pages``
        more pages they lead to (none: enough was read). Optional: a navigator without it reads
        one round (``navigate/rounds.py``)."""


class LexicalIndexCache:
    """Lexical indexes shared by both navigators (selection fallback, shortlists, offline ranking).

    One index: the full catalog's, saved in ``cache_dir``. A reader's view (``Catalog.visible_to``)
    scores with it as an index built over the view's pages alone would (``LexicalIndex.as_view``:
    document frequencies, page count and average length counted over the view's pages; a word
    only hidden pages hold is unknown), so neither which pages a reader gets back nor their order
    or scores can depend on hidden text — at the cost of a few bytes a page per kind of reader,
    not a second index (~45 MB and a full read of the wiki at 100,000 articles). A topic's pages
    (a subset of a root) are a mask of the root's index (of the view, for a view's topic). Each
    is kept on the catalog version it was made for (``Catalog.derived``: a new master-index.md is
    a new catalog object, so a new index).

    Called from worker threads (never on a server's event loop): each index is loaded or built
    once (``Derived`` builds a key once), and loaded, built and saved by one thread at a time."""

    def __init__(self, wiki_dir: Path, cache_dir: Path | None):
        self.wiki_dir = wiki_dir
        self.cache_dir = cache_dir
        self._key = ("lexical", self)  # this cache's indexes (its folders), on each catalog
        self._disk = threading.Lock()  # one thread at a time loads, builds and saves an index

    def get(self, catalog: Catalog) -> LexicalIndex:
        """The index of ``catalog``: its own for a root (full catalog or one reader's view); for a
        subset (a topic's pages), its root's index restricted to the subset's pages. Blocking
        (it may read every page): call it in a worker thread from async code."""
        root = catalog.root
        if catalog is root:
            full = root.cut_from() if root.cut_from is not None else None
            if full is not None:  # a reader's view: the full index, scored as if built over the view
                return root.derived.get(self._key, lambda: self.get(full).as_view(root.by_path))
            return root.derived.get(self._key, lambda: self._load_or_build(root))
        return catalog.derived.get(self._key, lambda: self.get(root).restricted_to(catalog.by_path))

    def _load_or_build(self, root: Catalog) -> LexicalIndex:
        # Saved: the full catalog's index. A view whose full catalog is gone (replaced while a
        # question held the view) is built over its own pages, in memory only.
        with self._disk:
            return LexicalIndex.load_or_build(self.wiki_dir, root, None if root.key else self.cache_dir)
