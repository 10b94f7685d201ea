"""Words as every ranking, summary and comparison in kaas sees them: case-folded word runs
(``words``), English stop words and question words (``STOP_WORDS``), and titles as compared for
sameness (``title_key``) or as they name a page (``title_identity``). Dependency-free, so the store can summarize topics without the lexical
engine, and compile's duplicate detection and lint's title checks read words the same way."""

from __future__ import annotations

import html
import re
import unicodedata

# The English stop-word list of bm25s (33 words; Lucene's), which kaas's ranking was first built on.
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
    "am", "been", "being", "were", "i", "me", "my", "you", "your", "we", "our", "us", "tell", "explain", "please",
    "about", "from", "its", "it's", "so", "than", "too", "very", "just", "also", "any", "some", "all",
    "much", "many", "long", "often",
}
STOP_WORDS = frozenset(_ENGLISH | _QUESTION_WORDS)
_WORD = re.compile(r"\w+", re.UNICODE)
_LABEL_WORD = re.compile(r"[^\W\d_]{3,}", re.UNICODE)  # letters only, 3+: what reads as a subject


def words(text: str) -> list[str]:
    """Case-folded words of ``text``, as written (decode HTML entities first where the text may
    carry them: ``offline.text.tokenize`` does). Compile's fingerprints hash these words, so a
    change here changes which sources are duplicates."""
    return _WORD.findall(text.casefold())


def title_identity(title: str) -> str:
    """A title as it names one page (a model or a question file naming a page by its title):
    HTML entities decoded, NFKC, case-folded, whitespace folded. Punctuation counts:
    ``Romeo + Juliet`` and ``Romeo × Juliet`` are two pages."""
    return " ".join(unicodedata.normalize("NFKC", html.unescape(title)).casefold().split())


def title_key(title: str) -> str:
    """A title as compared for sameness (duplicate titles in lint, same-title sources in dedup,
    twin articles in the planner): ``title_identity`` with punctuation to spaces, so
    ``Romeo + Juliet`` and ``Romeo × Juliet`` look the same."""
    return " ".join(words(title_identity(title)))


# Common English words that are not stop words for ranking but name no subject either: a topic
# called "during", "his" or "january" says nothing about its pages (``offline.text_ranking.term_groups``).
GENERIC_WORDS = frozenset("""
after again against ago along already although always among another around away back because before
began begin behind below best better between both came come comes considered during each early either
else end even ever every few first former found four further gave get give given goes going gone got
great her here hers herself him himself his however including known last later latter least less like
made main make makes making more most mostly near nearly new next nine now number off old once one only
other others over own part per put rather same second see seen seven several she since six still take
taken ten third though three through thus today together toward towards two under until upon use used
uses using well were what while whom within without yet year years name named called became become
becomes based located best largest
whether happen happens happened happening multiple various
sometimes commonly formerly usually currently originally primarily mainly especially generally
previously recently widely mostly later often

january february march april june july august september october november december
monday tuesday wednesday thursday friday saturday sunday
""".split())


def label_words(text: str) -> set[str]:
    """Distinct content words fit to name a subject: letters only, 3+ characters, no stop words."""
    return {w for w in _LABEL_WORD.findall(text.lower()) if w not in STOP_WORDS}
