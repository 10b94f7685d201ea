"""The wiki as the planner sees it: existing articles plus those planned so far in this run,
with lexical lookup (BM25 over titles and summaries, ``offline.text_ranking.TermIndex``) and near-identical title detection.
"""

from __future__ import annotations

import posixpath
import re
from difflib import SequenceMatcher

from kb_ai.compile.records import PlanTarget
from kb_ai.store.catalog import CatalogEntry
from kb_ai.store.words import title_key

MAX_CANDIDATES = 25
TITLE_MERGE_RATIO = 0.92
_TITLE_STOP = {"a", "an", "the", "of", "and", "for", "to", "in", "on", "with", "about", "our", "&"}

# ---------------------------------------------------------------------------------------------
# the catalog as the planner sees it


def twin_key(title: str) -> str:
    """Normalized title for twin detection: case, stop words, punctuation, word order and
    inflection (Snowball stems: "processes" = "process") ignored."""
    tokens = _terms(" ".join(w for w in title_key(title).split() if w not in _TITLE_STOP))
    return " ".join(sorted(set(tokens)))


class PlanCatalog:
    """Existing articles plus those planned so far in this run, with lexical lookup."""

    def __init__(self, items: list[CatalogEntry]):
        self.items: dict[str, CatalogEntry] = {}
        self.restricted: set[str] = set()  # paths of items with an access rule
        self._public_topics: set[str] = set()
        self._by_key: dict[str, str] = {}
        # article path -> the raw/ folders of the sources it is made from (known ones: the
        # manifest's and this run's plans), for ``OfflinePlanner``'s same-title rule
        self.source_folders: dict[str, set[str]] = {}
        from kb_ai.offline.text_ranking import TermIndex  # noqa: PLC0415 (the index only when planning)

        self._lexical = TermIndex()
        for item in items:
            self.add(item)

    def add_target(self, target: PlanTarget, source: str | None = None) -> None:
        """An article planned in this run (by ``source``), so later plans see it (a new one with
        the access it gets)."""
        if target.new:
            self.add(target.entry())
        if source is not None:
            self.add_source(target.path, source)

    def add_source(self, article: str, source: str) -> None:
        """``source`` (a raw/ path) feeds ``article``."""
        self.source_folders.setdefault(article, set()).add(posixpath.dirname(source))

    def add(self, item: CatalogEntry) -> None:
        if item.path in self.items:
            return
        self.items[item.path] = item
        if item.access is not None:
            self.restricted.add(item.path)
        else:
            self._public_topics.add(item.topic)
        key = twin_key(item.title)
        if key:
            self._by_key.setdefault(key, item.path)
        self._lexical.add(item.path, f"{item.title} {item.title} {item.summary} {item.topic}")

    @property
    def topics(self) -> list[str]:
        return sorted({i.topic for i in self.items.values()})

    @property
    def public_topics(self) -> set[str]:
        return self._public_topics

    def twin_of(self, title: str) -> str | None:
        """The path of an article whose title is near-identical to ``title``: the same words
        (``twin_key``), or a typo away among the lexically closest titles."""
        key = twin_key(title)
        if not key:
            return None
        if key in self._by_key:
            return self._by_key[key]
        folded = title_key(title)
        numbers = re.findall(r"\d+", folded)
        for item in self.related(title, limit=8):
            other = title_key(item.title)
            if re.findall(r"\d+", other) != numbers:
                continue  # "Q1 planning" and "Q2 planning" are one character apart and not twins
            if abs(len(other) - len(folded)) <= 4 and SequenceMatcher(None, folded, other).ratio() >= TITLE_MERGE_RATIO:
                return item.path
        return None

    def related(self, text: str, limit: int = MAX_CANDIDATES, exclude: set[str] | frozenset[str] = frozenset()
                ) -> list[CatalogEntry]:
        """The ``limit`` items most related to ``text`` by BM25 (``offline.text_ranking.TermIndex``,
        ties broken by path), leaving out the paths in ``exclude``."""
        return [self.items[p] for p in self._lexical.search(text, limit, exclude)]


def _terms(text: str) -> list[str]:
    from kb_ai.offline.text import tokenize  # noqa: PLC0415 (shared stemmer/stop words)

    return tokenize(text)

