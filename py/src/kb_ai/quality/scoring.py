"""Answer scores as HotpotQA defines them: exact match and token F1 after normalization
(lower case, punctuation and the articles a/an/the removed, whitespace folded).

``normalize_answer`` and ``f1_score`` follow the official ``hotpot_evaluate_v1.py`` exactly,
including its rule that a yes/no answer scores nothing unless it is the same yes/no. Answers
kaas writes are prose with citations, so ``scoring_text`` first removes what is not answer
content: citation links, the offline-mode label, the "no page mentions" footer.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from dataclasses import dataclass

from kb_ai.store.markdown_text import find_links

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)
# Lines kaas adds around an offline answer that are about the answer, not part of it. ("[ \t]",
# not "\s": a run of blank lines must not be rescanned from each of its line starts.)
_OFFLINE_NOTE = re.compile(r"^[ \t]*+\*?(?:Offline mode \(no model configured\)|No page of the wiki mentions:).*$",
                           re.MULTILINE)
_YES_NO = {"yes", "no", "noanswer"}


def normalize_answer(text: str) -> str:
    """HotpotQA normalization: lower, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def scoring_text(answer: str) -> str:
    """The words of an answer that can match a gold answer: citation links and kaas's own
    notes about the answer removed, Markdown bullets and emphasis left to normalization."""
    text = _OFFLINE_NOTE.sub("", answer)
    kept: list[str] = []
    position = 0
    for link in find_links(text):  # citation links (and images, definitions) go whole
        if link.start >= position:
            kept.append(text[position:link.start])
            position = link.end
    kept.append(text[position:])
    return " ".join(" ".join(kept).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    """Token F1 between normalized prediction and gold (HotpotQA's definition)."""
    pred, truth = normalize_answer(prediction), normalize_answer(gold)
    if (pred in _YES_NO or truth in _YES_NO) and pred != truth:
        return 0.0
    pred_tokens, truth_tokens = pred.split(), truth.split()
    same = sum((Counter(pred_tokens) & Counter(truth_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def contains_answer(prediction: str, gold: str) -> float:
    """1.0 when the gold answer occurs in the prediction as whole words: after HotpotQA's
    normalization, or with punctuation read as a word break instead of dropped, so a fact quoted
    inside code or a range counts as written ("newkeys" in ``rsa.newkeys(512)``, "1998" in
    "1998–2001", "512" in ``chunk_size=512,``), where the HotpotQA normalization reads
    "rsanewkeys512"."""
    for normalize in (normalize_answer, _words_apart):
        truth = normalize(gold)
        if truth and f" {truth} " in f" {normalize(prediction)} ":
            return 1.0
    return 0.0


def _words_apart(text: str) -> str:
    """``normalize_answer`` with punctuation and symbols (any script's: "–", "·") turned into spaces."""
    text = "".join(" " if ch in _PUNCTUATION or unicodedata.category(ch)[0] in "PS" else ch for ch in text.lower())
    return " ".join(_ARTICLES.sub(" ", text).split())


@dataclass(frozen=True)
class AnswerScore:
    exact_match: float
    f1: float
    contains_gold: float


def score_answer(answer: str, golds: list[str]) -> AnswerScore:
    """Best score over the gold answer and its aliases, on the answer's scoring text."""
    text = scoring_text(answer)
    golds = [g for g in golds if g and g.strip()]
    if not golds:
        return AnswerScore(0.0, 0.0, 0.0)
    return AnswerScore(
        exact_match=max(exact_match(text, g) for g in golds),
        f1=max(f1_score(text, g) for g in golds),
        contains_gold=max(contains_answer(text, g) for g in golds),
    )
