"""Where in a page a piece of text is: the passage of the page an answer's sentence stands on.

``locate(body, text)`` splits the page body (Markdown, frontmatter removed) into passages a reader
can point at — prose sentences (a very short one kept with the sentence before it: "Defaults to
``500``."), list items' sentences, headings, table rows, code lines — and returns the one that best
matches ``text``: the passage that contains it or is contained in it when there is one (an
extractive answer quotes the page), else the one sharing the most of its terms, then the best by
BM25 over the page's passages (``offline.text_ranking.rank_texts_each``, the one lexical scorer). When
no passage shares at least a quarter of its terms: None (the citation points at the page).

A ``Passage`` holds only text of the page: ``start``/``end`` are offsets in the body (the
Markdown source of the passage is ``body[start:end]``), ``quote`` is what a reader sees of it
(markup and link targets removed, whitespace folded), made from that slice and nothing else
(cut at a word after ``MAX_QUOTE_CHARS``),
and ``anchor`` is the id of the heading it is under in the rendered page
(``store.anchors``: the renderer's own rule), None in the page's lead. Nothing of ``text`` (a
model's words) is ever quoted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kb_ai.offline.text_ranking import rank_texts_each
from kb_ai.offline.text import tokenize
from kb_ai.store.anchors import HeadingAnchor, anchor_at, heading_anchors
from kb_ai.store.markdown_text import atx_heading, iter_lines_at, plain_text
from kb_ai.store.sentences import split_sentences

MIN_WORDS = 4  # a sentence shorter than this is kept with the one before it
MAX_QUOTE_CHARS = 600  # a longer passage is quoted up to here (the offsets still cover it whole)
MAX_UNITS = 5_000  # passages scored per page: enough for any article, bounded for a huge one
MIN_SHARED = 0.25  # of a cited sentence's distinct terms, that its passage must share
MAX_CLAIM_CHARS = 2_000  # a longer cited sentence is matched by its terms, not looked for whole

_LIST_MARKER = re.compile(r"[ \t]*+(?:[-*+]|\d{1,9}+[.)])[ \t]++")
_QUOTE_MARKER = re.compile(r"^[ \t]{0,3}+>[ \t]?+", re.MULTILINE)
_TABLE_RULE = re.compile(r"[\s|:\-]*+")
_CELL_SEPARATOR = re.compile(r"(?<!\\)\|")  # "a \| b" is one cell holding "a | b"
_ROW_EDGES = re.compile(r"^\|[ \t]*+|(?<!\\)\|[ \t]*+$")


@dataclass(frozen=True)
class Passage:
    start: int  # offsets in the page body: body[start:end] is the passage's Markdown
    end: int
    quote: str  # what a reader sees of it (plain text, whitespace folded)
    anchor: str | None  # id of the heading it is under in the rendered page; None: the lead
    heading: str | None  # that heading's text

    def as_dict(self) -> dict[str, Any]:
        return {"anchor": self.anchor, "heading": self.heading, "quote": self.quote,
                "start": self.start, "end": self.end}


@dataclass(frozen=True)
class _Unit:
    start: int
    end: int
    quote: str
    heading: bool = False


def _fold(text: str) -> str:
    return " ".join(text.split())


def _seen(markdown: str) -> str:
    """What a reader sees of a passage's Markdown: block-quote markers, markup and link targets gone."""
    return plain_text(_QUOTE_MARKER.sub("", markdown) if ">" in markdown else markdown)


def _sentence_units(body: str, start: int, end: int) -> list[_Unit]:
    """The sentences of the prose block ``body[start:end]``, a short one joined to the one before."""
    raw = body[start:end]
    spans: list[tuple[int, int]] = []
    at = 0
    for sentence in split_sentences(raw):
        found = raw.find(sentence, at)
        if found < 0:
            continue
        at = found + len(sentence)
        if spans and len(sentence.split()) < MIN_WORDS:
            spans[-1] = (spans[-1][0], at)
        else:
            spans.append((found, at))
    if len(spans) > 1 and len(raw[spans[0][0]:spans[0][1]].split()) < MIN_WORDS:
        spans[0:2] = [(spans[0][0], spans[1][1])]  # a short first sentence goes with the next
    units = []
    for s, e in spans:
        quote = _seen(raw[s:e])
        if quote:
            units.append(_Unit(start + s, start + e, quote))
    return units


def passages(body: str) -> list[_Unit]:
    """The passages of ``body`` in order: sentences of prose and list items, headings, table
    rows, code lines."""
    units: list[_Unit] = []
    block: list[tuple[int, int]] = []  # (start, end) of the lines of the current prose block

    def flush() -> None:
        if block:
            units.extend(_sentence_units(body, block[0][0], block[-1][1]))
            block.clear()

    for start, line, in_fence in iter_lines_at(body):
        end = start + len(line)
        stripped = line.strip()
        if in_fence:
            flush()
            if stripped and not stripped.startswith(("```", "~~~")):
                lead = len(line) - len(line.lstrip())
                units.append(_Unit(start + lead, end, stripped))
            continue
        if not stripped:
            flush()
            continue
        heading = atx_heading(line)
        if heading is not None:
            flush()
            text = heading[1]
            at = line.find(text) if text else -1
            if text and at >= 0 and plain_text(text):
                units.append(_Unit(start + at, start + at + len(text), plain_text(text), heading=True))
            continue
        if stripped.startswith("|"):
            flush()
            if not _TABLE_RULE.fullmatch(stripped):
                cells = [plain_text(cell) for cell in _CELL_SEPARATOR.split(_ROW_EDGES.sub("", stripped))]
                quote = " ".join(cell for cell in cells if cell)
                if quote:
                    lead = len(line) - len(line.lstrip())
                    units.append(_Unit(start + lead, start + len(line.rstrip()), quote))
            continue
        if stripped.startswith("<"):
            flush()  # an HTML block: not shown as written
            continue
        marker = _LIST_MARKER.match(line)
        if marker:
            flush()
            block.append((start + marker.end(), end))
            continue
        block.append((start + len(line) - len(line.lstrip()), end))
    flush()
    return units[:MAX_UNITS]


def _passage(unit: _Unit, anchors: list[HeadingAnchor]) -> Passage:
    heading = anchor_at(anchors, unit.start)
    quote = unit.quote if len(unit.quote) <= MAX_QUOTE_CHARS else unit.quote[:MAX_QUOTE_CHARS].rsplit(" ", 1)[0]
    return Passage(unit.start, unit.end, quote, heading.id if heading else None, heading.title if heading else None)


def locate(body: str, text: str, *, within: str | None = None) -> Passage | None:
    """The passage of ``body`` that ``text`` (an answer's sentence) stands on, or None.

    ``within``: only passages whose Markdown is in this text count (the part of a page that was
    read, when it was shortened to fit the reading budget)."""
    return locate_all(body, [text], within=within)[0]


def locate_all(body: str, texts: list[str], *, within: str | None = None) -> list[Passage | None]:
    """``locate`` for several texts of one page: the page is split and indexed once."""
    units = passages(body)
    if within is not None:
        units = [u for u in units if body[u.start:u.end] in within]
    if not units or not texts:
        return [None] * len(texts)
    anchors = heading_anchors(body)
    unit_terms = [tokenize(u.quote) for u in units]
    if not any(unit_terms):
        return [None] * len(texts)
    queries = [set(tokenize(text)) for text in texts]
    scores = rank_texts_each(queries, unit_terms)
    found: list[Passage | None] = []
    for text, query, score in zip(texts, queries, scores, strict=True):
        best = _containing(units, text)
        if best is None:
            best = _best_match(units, unit_terms, query, score)
        found.append(_passage(units[best], anchors) if best is not None else None)
    return found


def _containing(units: list[_Unit], text: str) -> int | None:
    """The longest passage that contains ``text`` or is contained in it (a quote of the page)."""
    if len(text) > MAX_CLAIM_CHARS:
        return None
    claim = _fold(plain_text(text)).rstrip("…").strip()
    if len(claim.split()) < 3:
        return None
    best, length = None, 0
    for i, unit in enumerate(units):
        if len(unit.quote) > length and (unit.quote in claim or claim in unit.quote) and len(unit.quote.split()) >= 3:
            best, length = i, len(unit.quote)
    return best


def _best_match(units: list[_Unit], unit_terms: list[list[str]], query: set[str], scores) -> int | None:
    """The passage sharing the most distinct terms with the query, then the best by BM25; a
    heading only when no sentence, row or line matches as well."""
    shared = [len(query.intersection(terms)) for terms in unit_terms]
    best = max(range(len(units)), key=lambda i: (shared[i], not units[i].heading, float(scores[i]), -i))
    # One common word of a long sentence is no evidence: better the page than a wrong passage.
    return best if shared[best] >= max(1, round(MIN_SHARED * len(query))) else None
