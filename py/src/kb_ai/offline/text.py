"""Tokenization shared by every lexical ranking in kaas: lower-case words, English stop words
removed, Snowball-stemmed (PyStemmer), so "selection", "selected" and "selects" meet."""

from __future__ import annotations

import html
import logging
import re
from functools import lru_cache

import Stemmer
from bm25s.stopwords import STOPWORDS_EN

# bm25s sets its own logger to DEBUG at import; its progress chatter must not reach a
# terminal, and never stdout (where `kaas mcp` speaks the protocol).
logging.getLogger("bm25s").setLevel(logging.WARNING)

_WORD = re.compile(r"\w+", re.UNICODE)
# bm25s's list is short (33 words); questions add their own function words, which would
# otherwise outweigh the content words ("what is offline mode?" ranked pages by "what").
_QUESTION_WORDS = {
    "how", "what", "why", "when", "where", "which", "who", "whom", "whose", "does", "do", "did", "done",
    "can", "could", "should", "would", "will", "shall", "may", "might", "must", "has", "have", "had",
    "am", "been", "being", "i", "me", "my", "you", "your", "we", "our", "us", "tell", "explain", "please",
    "about", "from", "its", "it's", "so", "than", "too", "very", "just", "also", "any", "some", "all",
    "much", "many", "long", "often",
}
_STOP = frozenset(STOPWORDS_EN) | _QUESTION_WORDS
_stemmer = Stemmer.Stemmer("english")


@lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    return _stemmer.stemWord(word)


def tokenize(text: str) -> list[str]:
    """Terms of ``text`` for BM25: stemmed, stop words and one-letter tokens dropped."""
    words = _WORD.findall(html.unescape(text).lower())
    return [_stem(w) for w in words if (len(w) > 1 or w.isdigit()) and w not in _STOP]
