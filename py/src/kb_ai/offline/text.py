"""Tokenization shared by every lexical ranking in kaas: lower-case words, English stop words
removed, Snowball-stemmed (PyStemmer), so "selection", "selected" and "selects" meet."""

from __future__ import annotations

import html
import re
from functools import lru_cache

import Stemmer
from bm25s.stopwords import STOPWORDS_EN

_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset(STOPWORDS_EN)
_stemmer = Stemmer.Stemmer("english")


@lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    return _stemmer.stemWord(word)


def tokenize(text: str) -> list[str]:
    """Terms of ``text`` for BM25: stemmed, stop words and one-letter tokens dropped."""
    words = _WORD.findall(html.unescape(text).lower())
    return [_stem(w) for w in words if (len(w) > 1 or w.isdigit()) and w not in _STOP]
