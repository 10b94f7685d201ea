"""Extractive answers: the sentences of the selected pages that best match the question.

Sentences are ranked with BM25 among the selected pages' sentences only, nudged towards the
higher-ranked pages, then picked greedily so that each new sentence adds query terms the
earlier ones did not cover (a short answer that covers the question beats three near-copies).
"""

from __future__ import annotations

from dataclasses import dataclass

from kb_ai.offline.lexical import rank_texts
from kb_ai.offline.text import tokenize
from kb_ai.store.markdown_text import clip, prose_paragraphs, split_sentences

MAX_SENTENCE_CHARS = 400
MIN_SENTENCE_WORDS = 4
PER_PAGE = 2


@dataclass(frozen=True)
class Evidence:
    path: str
    title: str
    sentence: str
    score: float


@dataclass(frozen=True)
class PageText:
    path: str
    title: str
    body: str


def best_sentences(question: str, pages: list[PageText], limit: int = 4) -> list[Evidence]:
    """Up to ``limit`` sentences from ``pages`` (in rank order) that share terms with ``question``."""
    query_terms = set(tokenize(question))
    if not query_terms:
        return []
    candidates: list[tuple[int, PageText, str, set[str]]] = []
    for rank, page in enumerate(pages):
        for paragraph in prose_paragraphs(page.body):
            if paragraph.startswith("[Superseded"):
                continue  # a supersession trail records an earlier fact: history, not the answer
            for sentence in split_sentences(paragraph):
                if len(sentence.split()) < MIN_SENTENCE_WORDS:
                    continue
                terms = set(tokenize(sentence))
                if terms & query_terms:
                    candidates.append((rank, page, sentence, terms))
    if not candidates:
        return []
    scores = rank_texts(query_terms, [tokenize(c[2]) for c in candidates])
    base = [float(s) * (1.0 - 0.08 * min(c[0], 5)) for s, c in zip(scores, candidates)]

    picked: list[Evidence] = []
    covered: set[str] = set()
    per_page: dict[str, int] = {}
    remaining = list(range(len(candidates)))
    seen_sentences: set[str] = set()

    def gain(i: int) -> float:
        matched = candidates[i][3] & query_terms
        new = len(matched - covered) / max(len(matched), 1)
        return base[i] * (0.4 + 0.6 * new)

    # Gains change only when a sentence is picked, so the candidates are ranked once per pick
    # (at most ``limit`` times), and the ones passed over on the way are dropped for good.
    while remaining and len(picked) < limit:
        order = sorted(remaining, key=lambda i: (-gain(i), i))
        best = None
        for position, i in enumerate(order):
            page, sentence = candidates[i][1], candidates[i][2]
            key = " ".join(sentence.lower().split())
            if per_page.get(page.path, 0) >= PER_PAGE or key in seen_sentences or gain(i) <= 0:
                continue
            best, remaining = i, order[position + 1:]
            seen_sentences.add(key)
            break
        if best is None:
            break
        rank, page, sentence, terms = candidates[best]
        per_page[page.path] = per_page.get(page.path, 0) + 1
        covered |= terms & query_terms
        picked.append(Evidence(page.path, page.title, clip(sentence, MAX_SENTENCE_CHARS), base[best]))
    return picked
