"""Sentences of plain text: the one sentence splitter (``sentence_spans``, with offsets, so an
answer can quote a sentence exactly as its page has it) and ``clip`` (a text cut at a word to a
length). Markdown-aware helpers built on them (``first_sentence``) are in ``markdown_text``."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*+\s++(?=[A-Z0-9\"'(\[`*_])")


# A period that ends one of these does not end the sentence ("a.k.a. Sam", "e.g. Flask", "Dr. Who",
# "vs. Rome") ... (the same rules as i14-readers' splitter, kept in this one home, with offsets)
_ABBREVIATIONS = frozenset(
    "e.g. i.e. a.k.a. aka. dr. mr. mrs. ms. mx. prof. st. sr. jr. vs. cf. approx. ca. mt. gen. col. lt. "
    "capt. sgt. rev. hon. dept. govt. esp. incl. viz. resp. ft. ave. blvd. etc. inc. ltd. co. corp.".split()
)
# ... and one that does only before a number ("No. 5", "Fig. 3", "pp. 12").
_NUMBER_ABBREVIATIONS = frozenset("no. nos. fig. figs. vol. vols. pp. p. sec. ch. eq. art. op. ver. v.".split())
_INITIALS = re.compile(r"(?:[A-Za-z]\.)++")  # "J." "U.S." "a.k.a."


def _ends_with_abbreviation(before: str, following: str) -> bool:
    """Whether the break after ``before`` (the text up to it) is an abbreviation's period, not a
    sentence end; ``following`` is the text after the break."""
    words = before[-40:].rsplit(None, 1)
    if not words:
        return False
    last = words[-1].lstrip("(\"'[").lower()
    if last in _ABBREVIATIONS or (_INITIALS.fullmatch(last) and len(last) <= 12 and not last[:-1].isdigit()):
        return True
    return last in _NUMBER_ABBREVIATIONS and following[:1].isdigit()


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each sentence of ``text`` (one paragraph), surrounding whitespace left
    out: a break after ``.``, ``!`` or ``?`` before a capital, a digit or an opening mark, except
    after an abbreviation ("e.g.", "Dr.", "vs."), an initial or a dotted acronym ("J.", "U.S."),
    or "No."/"Fig."/"pp." before a number. Version numbers ("v1.2.3") never split: a break needs
    a space. The one sentence splitter: ``split_sentences`` is its text; offsets let an answer
    quote a sentence exactly as the page has it."""
    spans: list[tuple[int, int]] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        if _ends_with_abbreviation(text[max(start, match.start() - 40):match.start()], text[match.end():match.end() + 1]):
            continue
        spans.append((start, match.start()))
        start = match.end()
    spans.append((start, len(text)))
    out = []
    for begin, end in spans:
        piece = text[begin:end]
        stripped = piece.strip()
        if stripped:
            begin += len(piece) - len(piece.lstrip())
            out.append((begin, begin + len(stripped)))
    return out


def split_sentences(text: str) -> list[str]:
    """Sentences of one paragraph of plain text (``sentence_spans``)."""
    return [text[start:end] for start, end in sentence_spans(text)]


def clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + "…"
