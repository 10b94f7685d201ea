"""Words as every ranking and summary in kaas sees them: lower-case, English stop words and
question words removed. Dependency-free, so the store can summarize topics without the
lexical engine."""

from __future__ import annotations

import html
import re

# bm25s's English list (33 words), kept here so that importing it does not import bm25s.
_ENGLISH = {
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no",
    "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this",
    "to", "was", "will", "with",
}
# Questions add their own function words, which would otherwise outweigh the content words
# ("what is offline mode?" ranked pages by "what").
_QUESTION_WORDS = {
    "how", "what", "why", "when", "where", "which", "who", "whom", "whose", "does", "do", "did", "done",
    "can", "could", "should", "would", "will", "shall", "may", "might", "must", "has", "have", "had",
    "am", "been", "being", "i", "me", "my", "you", "your", "we", "our", "us", "tell", "explain", "please",
    "about", "from", "its", "it's", "so", "than", "too", "very", "just", "also", "any", "some", "all",
    "much", "many", "long", "often",
}
STOP_WORDS = frozenset(_ENGLISH | _QUESTION_WORDS)
_WORD = re.compile(r"\w+", re.UNICODE)
_LABEL_WORD = re.compile(r"[^\W\d_]{3,}", re.UNICODE)  # letters only, 3+: what reads as a subject


def words(text: str) -> list[str]:
    """Lower-case words of ``text`` (HTML entities decoded)."""
    return _WORD.findall(html.unescape(text).lower())


def label_words(text: str) -> set[str]:
    """Distinct content words fit to name a subject: letters only, 3+ characters, no stop words."""
    return {w for w in _LABEL_WORD.findall(text.lower()) if w not in STOP_WORDS}
