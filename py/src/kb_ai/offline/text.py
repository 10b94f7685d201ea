"""Tokenization shared by every lexical ranking in kaas: lower-case words, English stop words
removed, Snowball-stemmed (PyStemmer), so "selection", "selected" and "selects" meet."""

from __future__ import annotations

import html
from functools import lru_cache

import Stemmer

from kb_ai.store.markdown_text import unescape
from kb_ai.store.words import STOP_WORDS, words as _words

_stemmer = Stemmer.Stemmer("english")


@lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    return _stemmer.stemWord(word)


def tokenize(text: str) -> list[str]:
    """Terms of ``text`` for BM25: stemmed, stop words and one-letter tokens dropped; HTML
    entities and Markdown backslash escapes read as the characters they stand for."""
    return [_stem(w) for w in _words(_as_read(text)) if (len(w) > 1 or w.isdigit()) and w not in STOP_WORDS]


def stem_words(text: str) -> list[str]:
    """Every word of ``text`` stemmed, stop words and short words kept, in order (to match a
    phrase such as "turn off" or "shut down", whose little word matters)."""
    return [_stem(w) for w in _words(_as_read(text))]


def _as_read(text: str) -> str:
    """The characters a reader sees: Markdown backslash escapes ("\\_\\_init\\_\\_" is the word
    "__init__", not "_init") and HTML entities undone."""
    return html.unescape(unescape(text))
