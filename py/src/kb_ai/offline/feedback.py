"""Pseudo-relevance feedback (RM3, as Anserini and Pyserini run it over BM25): a question in the
reader's own words borrows the words of the pages that match it best, so a page that says it in
the wiki's own vocabulary can still rank. It is off (``EXPANSION_TERMS = 0``): measured, it did
not earn its place on small wikis (see below); the offline navigator calls it, so turning it on
is one setting.

``expanded_query(index, question, terms_of)``:

1. the question is ranked as usual (``LexicalIndex.search``, the question's terms and their
   ``offline.equivalents``), and its ``FEEDBACK_PAGES`` best pages are read back as the index
   counts them (``terms_of``: the page's weighted title, summary, topic, ``questions:`` and body
   terms; ``offline.lexical.page_terms``);
2. the feedback model: each term's share of each page's terms, weighted by the page's share of
   the pages' scores, for the terms the question does not have already; of its ``CANDIDATES``
   heaviest terms, the ``EXPANSION_TERMS`` with the most weight times IDF are the expansion
   (plain RM3 picks "app", "use", "page": the words every page of a small wiki holds);
3. the query ranked instead: the question's terms as a distribution (their weights over their sum)
   at ``1 - FEEDBACK_WEIGHT``, the expansion's (its weights over their sum) at ``FEEDBACK_WEIGHT``.

It is a question's own business and a reader's: ``index`` is the reader's view (or a topic of
it), so the pages read back are pages the reader may read, and the expansion holds only words of
those pages (IDF too is counted over the reader's pages). Cost: one extra ranking, and ``FEEDBACK_PAGES`` pages read (each bounded by
``offline.lexical.BODY_CHAR_LIMIT``) and tokenized. No second index.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Sequence

from kb_ai.offline.equivalents import query_weights
from kb_ai.offline.lexical import idf

FEEDBACK_PAGES = 3  # pages whose terms make the feedback model (k)
# Off: measured on paraphrased questions and HotpotQA (docs/benchmarks.md, "Different words for the
# same thing (issue 26)"), k=3, m=5, λ=0.3 gained nothing on the held-out questions and ranked
# HotpotQA's gold page first less often. Set m > 0 to turn it on.
EXPANSION_TERMS = 0  # terms added to the question (m); 0: no expansion
FEEDBACK_WEIGHT = 0.3  # the expansion's share of the query (λ); the question keeps the rest
CANDIDATES = 50  # terms of the feedback model weighed by their rarity (the rest are left out)
MEASURED = (3, 5, 0.3)  # (k, m, λ): the best setting on the dev questions

WeightedTerms = Sequence[tuple[str, float]]


def expanded_query(index, question: str, terms_of: Callable[[str], list[str]]) -> str | WeightedTerms:
    """``question`` with the terms of its best pages in ``index`` (RM3, above); the question
    itself when expansion is off, nothing matches, or the pages add no term."""
    if EXPANSION_TERMS <= 0 or FEEDBACK_PAGES <= 0:
        return question
    hits = index.search(question, FEEDBACK_PAGES)
    total = sum(h.score for h in hits)
    if not hits or total <= 0:
        return question
    own = query_weights(question)
    asked = {term for term, _weight in own}
    model: Counter[str] = Counter()
    for hit in hits:
        terms = terms_of(hit.path)
        if not terms:
            continue
        share = hit.score / total / len(terms)
        for term, count in Counter(terms).items():
            if term not in asked:
                model[term] += share * count
    expansion = _informative(index, model)
    if not expansion:
        return question
    own_total = sum(weight for _term, weight in own)
    added_total = sum(weight for _term, weight in expansion)
    return ([(term, (1 - FEEDBACK_WEIGHT) * weight / own_total) for term, weight in own]
            + [(term, FEEDBACK_WEIGHT * weight / added_total) for term, weight in expansion])


def _informative(index, model: Counter[str]) -> list[tuple[str, float]]:
    """The ``EXPANSION_TERMS`` terms of the feedback model whose weight times their IDF over the
    index's pages (the reader's view) is highest, among its ``CANDIDATES`` heaviest terms: a word
    every page holds ("app", "use") says nothing about which page answers."""
    heaviest = heapq.nsmallest(CANDIDATES, model.items(), key=lambda item: (-item[1], item[0]))
    pages = max(index.page_count(), 1)
    weighed = [(term, weight * idf(len(index.pages_with(term)), pages)) for term, weight in heaviest]
    return heapq.nsmallest(EXPANSION_TERMS, weighed, key=lambda item: (-item[1], item[0]))
