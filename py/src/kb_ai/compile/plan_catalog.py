"""The wiki as the planner sees it: existing articles plus those planned so far in this run,
with lexical lookup (BM25 over titles and summaries) and near-identical title detection.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from difflib import SequenceMatcher

from kb_ai.compile.records import PlanTarget
from kb_ai.store.catalog import CatalogEntry

MAX_CANDIDATES = 25
TITLE_MERGE_RATIO = 0.92
_TITLE_STOP = {"a", "an", "the", "of", "and", "for", "to", "in", "on", "with", "about", "our", "&"}

# ---------------------------------------------------------------------------------------------
# the catalog as the planner sees it


def title_key(title: str) -> str:
    """Normalized title for twin detection: case, stop words, punctuation, word order and
    inflection (Snowball stems: "processes" = "process") ignored."""
    tokens = _terms(" ".join(w for w in re.findall(r"\w+", title.casefold()) if w not in _TITLE_STOP))
    return " ".join(sorted(set(tokens)))


class PlanCatalog:
    """Existing articles plus those planned so far in this run, with lexical lookup."""

    def __init__(self, items: list[CatalogEntry]):
        self.items: dict[str, CatalogEntry] = {}
        self.restricted: set[str] = set()  # paths of items with an access rule
        self._public_topics: set[str] = set()
        self._by_key: dict[str, str] = {}
        self._postings: dict[str, dict[str, int]] = {}
        self._lengths: dict[str, int] = {}
        for item in items:
            self.add(item)

    def add_target(self, target: PlanTarget) -> None:
        """A new article planned in this run, so later plans see it (with the access it gets)."""
        self.add(target.entry())

    def add(self, item: CatalogEntry) -> None:
        if item.path in self.items:
            return
        self.items[item.path] = item
        if item.access is not None:
            self.restricted.add(item.path)
        else:
            self._public_topics.add(item.topic)
        key = title_key(item.title)
        if key:
            self._by_key.setdefault(key, item.path)
        terms = _terms(f"{item.title} {item.title} {item.summary} {item.topic}")
        self._lengths[item.path] = len(terms)
        for term, count in Counter(terms).items():
            self._postings.setdefault(term, {})[item.path] = count

    @property
    def topics(self) -> list[str]:
        return sorted({i.topic for i in self.items.values()})

    @property
    def public_topics(self) -> set[str]:
        return self._public_topics

    def twin_of(self, title: str) -> str | None:
        """The path of an article whose title is near-identical to ``title``: the same words
        (``title_key``), or a typo away among the lexically closest titles."""
        key = title_key(title)
        if not key:
            return None
        if key in self._by_key:
            return self._by_key[key]
        folded = " ".join(re.findall(r"\w+", title.casefold()))
        numbers = re.findall(r"\d+", folded)
        for item in self.related(title, limit=8):
            other = " ".join(re.findall(r"\w+", item.title.casefold()))
            if re.findall(r"\d+", other) != numbers:
                continue  # "Q1 planning" and "Q2 planning" are one character apart and not twins
            if abs(len(other) - len(folded)) <= 4 and SequenceMatcher(None, folded, other).ratio() >= TITLE_MERGE_RATIO:
                return item.path
        return None

    def related(self, text: str, limit: int = MAX_CANDIDATES, exclude: set[str] | frozenset[str] = frozenset()
                ) -> list[CatalogEntry]:
        """The ``limit`` items most related to ``text`` by BM25 (ties broken by path), leaving
        out the paths in ``exclude``."""
        if not self.items:
            return []
        n = len(self.items)
        average = (sum(self._lengths.values()) / n) or 1.0
        scores: dict[str, float] = {}
        common = max(200, n // 50)
        for term, qcount in Counter(_terms(text)).most_common(40):
            postings = self._postings.get(term)
            if not postings or len(postings) > common:
                continue  # in over 2% of all titles: says little, costs a scan of them all
            idf = math.log(1 + (n - len(postings) + 0.5) / (len(postings) + 0.5))
            for path, tf in postings.items():
                if path in exclude:
                    continue
                norm = tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * self._lengths[path] / average))
                scores[path] = scores.get(path, 0.0) + idf * norm
        ranked = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        return [self.items[p] for p, _ in ranked]


def _terms(text: str) -> list[str]:
    from kb_ai.offline.text import tokenize  # noqa: PLC0415 (shared stemmer/stop words)

    return tokenize(text)

