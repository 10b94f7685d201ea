"""Does the wiki cover a question at all? The offline answerer's abstention decision, in one place.

Each term of the question is weighted by how informative it is (BM25's IDF over the wiki's pages,
from the lexical index; a term no page holds weighs as much as one that a single page holds). The question is covered when the best
page among the keyword matches, or the best two pages *that are joined* (one holds the other's
title, or the question names both: "Which band formed first, Lit or Adorable?", "the director of
the film that ..."), hold

* at least ``COVERED_SHARE`` of the question's term weight, or
* at least ``COVERED_RARE_TERMS`` terms' worth of weight, counted in units of the rarest term
  (a long question whose many rare terms are found is about something the wiki holds, even when
  some of its words are not).

Nonsense ("How tall is the Eiffel Tower in bananas?") shares a word or two with some page, never
most of its weight; a question about a subject the wiki lacks loses that subject's weight; two
unrelated pages do not add up ("boiling point" on one page, "sonnet" on another).

The thresholds were calibrated on questions with known truth (docs/benchmarks.md, "Offline
answers and abstention (issue 15)"; benchmarks/bench_answers.py): nonsense questions, HotpotQA
questions whose gold pages were deleted, answerable HotpotQA and real-docs questions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from kb_ai.offline.lexical import LexicalIndex
from kb_ai.offline.text import tokenize

COVERED_SHARE = 0.60  # share of the question's term weight one page (or a joined pair) must hold
COVERED_RARE_TERMS = 2.8  # ... or this many times the weight of the rarest term the wiki holds
CANDIDATES = 8  # best keyword matches examined (and pairs among them)
TITLE_NAMED = 0.5  # a page is named by the question when this share of its title's terms is in it


@dataclass(frozen=True)
class Coverage:
    """How well the wiki covers a question's terms, and the verdict."""

    share: float  # best share of the question's term weight held by one page or a joined pair
    rare_terms: float  # that weight, in units of the rarest possible term's weight
    pages: tuple[str, ...]  # the page(s) holding it, best first
    missing: tuple[str, ...] = ()  # question words no page (this reader may read) holds

    @property
    def covered(self) -> bool:
        return is_covered(self.share, self.rare_terms)


def is_covered(share: float, rare_terms: float, min_share: float = COVERED_SHARE,
               min_rare_terms: float = COVERED_RARE_TERMS) -> bool:
    """The abstention rule (its thresholds are arguments so a benchmark can trace the curve)."""
    return share >= min_share or rare_terms >= min_rare_terms


def _idf(pages: int, holders: int) -> float:
    return math.log(1 + (pages - holders + 0.5) / (holders + 0.5))


def coverage(index: LexicalIndex, title_of: Callable[[str], str], question: str) -> Coverage:
    """How well the best page, or best joined pair of pages, of ``index`` covers ``question``.
    ``title_of``: a page's title (the catalog's), to tell which pages are joined."""
    terms = list(dict.fromkeys(tokenize(question)))
    _found, missing = index.known_terms(question)
    hits = index.search(question, CANDIDATES) if terms else []
    if not hits:
        return Coverage(0.0, 0.0, (), tuple(missing))
    n = max(index.page_count(), 1)
    ids = np.array([index.position(h.path) for h in hits], dtype=np.int64)
    holders: dict[str, tuple[int, frozenset[int]]] = {}  # term -> (pages holding it, which hits)

    def look_up(term: str) -> tuple[int, frozenset[int]]:
        if term not in holders:
            pages = index.pages_with(term)
            found = (pages[:, None] == ids[None, :]).any(axis=0) if len(pages) else np.zeros(len(ids), dtype=bool)
            holders[term] = (len(pages), frozenset(np.flatnonzero(found).tolist()))
        return holders[term]

    # A word no page holds weighs as much as the rarest word the wiki holds, no more: in a small
    # wiki, plain words of a question ("use", "happens") are often in no page at all.
    rarest = _idf(n, 1)
    weights = {t: min(_idf(n, look_up(t)[0]), rarest) for t in terms}
    total = sum(weights.values()) or 1.0
    asked = set(terms)
    held = [frozenset(t for t in terms if i in look_up(t)[1]) for i in range(len(hits))]
    title_terms = [set(tokenize(title_of(h.path))) for h in hits]
    named = [bool(tt) and len(tt & asked) / len(tt) >= TITLE_NAMED for tt in title_terms]

    def holds_title(i: int, j: int) -> bool:  # page i's text holds every term of page j's title
        return bool(title_terms[j]) and all(i in look_up(t)[1] for t in title_terms[j])

    best = max(range(len(hits)), key=lambda i: (sum(weights[t] for t in held[i]), -i))
    best_terms, pages = held[best], (hits[best].path,)
    for i in range(len(hits)):
        for j in range(i + 1, len(hits)):
            if not ((named[i] and named[j]) or holds_title(i, j) or holds_title(j, i)):
                continue
            union = held[i] | held[j]
            if sum(weights[t] for t in union) > sum(weights[t] for t in best_terms) + 1e-9:
                best_terms, pages = union, (hits[i].path, hits[j].path)
    weight = sum(weights[t] for t in best_terms)
    return Coverage(weight / total, weight / rarest, pages, tuple(missing))
