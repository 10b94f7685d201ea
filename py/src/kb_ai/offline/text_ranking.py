"""Whole-text rankings by shared words: the texts are ranked where they are, with no saved index.

* ``rank_texts``: BM25 over a handful of texts ranked once (the extractive answer's sentences);
  ``rank_texts_each`` for several queries over the same texts (a page's passages).
* ``TermIndex``: BM25 over short texts that grows one text at a time (the compile planner's
  catalog, which sees each article it plans in the same run).
* ``by_shared_terms``: texts ordered by how many terms they share with a query (the sections
  of a page kept when it is trimmed to a reading budget, or shown to the model for a revision).
* ``jaccard``: the share of terms two texts have in common (lint's contradiction pairs).
* ``term_groups``: texts grouped by a distinctive word they share (the topics of a flat
  ``raw/``, ``compile/topic_rule.py``); words as ``store.words.label_words`` reads them (whole
  words, so a group's word is its readable name), weighted by inverse document frequency like
  ``store/topics.py``'s summaries.

All of them read text through ``offline.text.tokenize`` (stemmed, stop words dropped), and the
BM25 rankings score as ``offline/lexical.py``'s ``LexicalIndex`` does (its ``K1``, ``B`` and ``idf``).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter

import numpy as np

from kb_ai.offline.lexical import B, K1, idf
from kb_ai.offline.text import tokenize
from kb_ai.store.words import GENERIC_WORDS, label_words


def rank_texts(query_terms: set[str] | list[str] | dict[str, float], texts_terms: list[list[str]]) -> np.ndarray:
    """BM25 scores of each of ``texts_terms`` (tokenized texts) for ``query_terms`` (float32):
    an index built for one ranking and dropped. A dict gives each term a weight (a word the
    question does not use but documentation uses for it: ``offline.equivalents``)."""
    return rank_texts_each([query_terms], texts_terms)[0]


def rank_texts_each(queries: list[set[str] | list[str] | dict[str, float]], texts_terms: list[list[str]]) -> list[np.ndarray]:
    """``rank_texts`` for several queries over the same texts (the passages of one page, for each
    sentence of an answer that cites it): the statistics counted once, scored once per query."""
    if not texts_terms:
        return [np.zeros(0, dtype=np.float32) for _ in queries]
    counts = [Counter(terms) for terms in texts_terms]
    lengths = np.array([len(terms) for terms in texts_terms], dtype=np.float64)
    n = len(texts_terms)
    average = float(lengths.mean()) or 1.0
    norm = K1 * (1 - B + B * lengths / average)
    df: Counter[str] = Counter()
    for c in counts:
        df.update(c.keys())
    results = []
    for query_terms in queries:
        scores = np.zeros(n, dtype=np.float64)
        weighted = query_terms.items() if isinstance(query_terms, dict) else ((t, 1.0) for t in query_terms)
        for term, weight in weighted:
            if not df.get(term):
                continue
            tfs = np.array([c.get(term, 0) for c in counts], dtype=np.float64)
            scores += weight * idf(df[term], n) * tfs / (tfs + norm)
        results.append(scores.astype(np.float32))
    return results


class TermIndex:
    """BM25 over short texts (a title and summary each) that grows one text at a time, scored
    term by term through postings: a query touches only the texts that share a term with it, and
    skips terms in over 2% of all texts (they say little and cost a scan of them all)."""

    def __init__(self) -> None:
        self._postings: dict[str, dict[str, int]] = {}
        self._lengths: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._lengths)

    def add(self, key: str, text: str) -> None:
        terms = tokenize(text)
        self._lengths[key] = len(terms)
        for term, count in Counter(terms).items():
            self._postings.setdefault(term, {})[key] = count

    def search(self, text: str, limit: int, exclude: set[str] | frozenset[str] = frozenset()) -> list[str]:
        """The ``limit`` keys most related to ``text`` (ties broken by key), leaving out ``exclude``."""
        n = len(self._lengths)
        if not n:
            return []
        average = (sum(self._lengths.values()) / n) or 1.0
        scores: dict[str, float] = {}
        common = max(200, n // 50)
        for term, _qcount in Counter(tokenize(text)).most_common(40):
            postings = self._postings.get(term)
            if not postings or len(postings) > common:
                continue
            idf = math.log(1 + (n - len(postings) + 0.5) / (len(postings) + 0.5))
            for key, tf in postings.items():
                if key in exclude:
                    continue
                norm = tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * self._lengths[key] / average))
                scores[key] = scores.get(key, 0.0) + idf * norm
        return [key for key, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]]


def jaccard(a: set[str], b: set[str]) -> float:
    """The share of terms two texts have in common: |a & b| / |a | b| (0 for two empty sets)."""
    union = a | b
    return len(a & b) / len(union) if union else 0.0


def by_shared_terms(query: str, texts: list[str]) -> list[int]:
    """The positions of ``texts``, most terms shared with ``query`` first (ties in text order)."""
    terms = set(tokenize(query))
    shared = [len(terms & set(tokenize(text))) if terms else 0 for text in texts]
    return sorted(range(len(texts)), key=lambda i: (-shared[i], i))


def term_groups(texts: dict[str, str], min_size: int, max_size: int,
                titles: dict[str, str] | None = None) -> dict[str, str]:
    """Group ``texts`` (key -> a title and summary) by a word they share: key -> the group's word,
    or "" for a text in no group. Greedy and deterministic (the word in more ``titles``, then
    alphabetical order, breaks every tie): the word found in the most ungrouped texts, among the words in at most
    ``max_size`` texts (a word in more names too broad a subject: "american"), takes those texts; until no
    word is in ``min_size`` ungrouped texts. A text left over joins the group it shares the most
    rare words with (inverse document frequency) while that group has room; one sharing none
    stays in no group. One added text changes the count of its own words by one, so it moves
    only the texts whose best two words were tied."""
    words_of = {key: label_words(texts[key]) - GENERIC_WORDS for key in sorted(texts)}
    frequency: Counter[str] = Counter()
    for found in words_of.values():
        frequency.update(found)
    # Candidate words: in min_size..max_size texts in all. A word in more ("american", "known",
    # "during") names no subject of that size; it is not taken even once others took most texts.
    cover = {w: c for w, c in frequency.items() if min_size <= c <= max_size}
    holders: dict[str, list[str]] = {w: [] for w in cover}
    for key, found in words_of.items():
        for w in found:
            if w in holders:
                holders[w].append(key)
    in_titles: Counter[str] = Counter()
    for title in (titles or {}).values():
        in_titles.update(label_words(title))
    group: dict[str, str] = {}
    # Counts only fall, so a heap whose stale entries are pushed again when popped finds the
    # next word in O(log words): a 50,000-text raw/ is grouped in seconds, not minutes.
    heap = [(-c, -in_titles[w], w) for w, c in cover.items()]
    heapq.heapify(heap)
    while heap:
        negative, _, word = heapq.heappop(heap)
        if word not in cover:
            continue
        if -negative != cover[word]:
            heapq.heappush(heap, (-cover[word], -in_titles[word], word))
            continue
        if cover[word] < min_size:
            break
        for key in holders[word]:
            if key in group:
                continue
            group[key] = word
            for w in words_of[key]:
                if w in cover:
                    cover[w] -= 1
        del cover[word]
    sizes = Counter(group.values())
    total = max(len(texts), 1)
    profile: dict[str, Counter[str]] = {}
    for key, word in group.items():
        profile.setdefault(word, Counter()).update(words_of[key])
    groups_with: dict[str, list[str]] = {}  # word -> the groups whose texts have it
    for word in sorted(profile):
        for w in profile[word]:
            groups_with.setdefault(w, []).append(word)
    for key, found in words_of.items():
        if key in group:
            continue
        scores: dict[str, float] = {}
        for w in found:
            weight = math.log(total / frequency[w])
            for word in groups_with.get(w, ()):
                scores[word] = scores.get(word, 0.0) + weight * profile[word][w] / sizes[word]
        room = [(score, word) for word, score in scores.items() if score > 0 and sizes[word] < max_size]
        best = min(room, key=lambda sw: (-sw[0], sw[1]))[1] if room else ""
        group[key] = best
        if best:
            sizes[best] += 1
    return group
