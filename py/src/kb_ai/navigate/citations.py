"""Citations: ``[Title](path)`` links in an answer, validated against the pages actually read,
each with the passages of its page that the answer's cited sentences stand on.

The sentence a link cites is the sentence of the answer the link is in (its links removed); when
that holds no words of its own ("See [Title](path)."), the sentence before it. Its passage is
found in the page by ``offline.passages.locate`` (the same for a model's answer and an
extractive one): a quote of the page, its offsets in the page body and the id of the heading it
is under in the rendered page. A link whose sentence matches nothing in the page cites the page.

A link whose target is not a page read as written is resolved by the one page resolver
(``navigate.page_refs``, as selection resolves a model's picks) among the pages read: a case or
prefix slip (``Pages/Product/Pricing.md``), a title for a path, a missing ``.md`` is repaired
(``CitationCheck.repaired``); a prompt's placeholder copied literally (``[Page Title](path)``)
is dropped (``placeholders``), neither a citation nor an invalid one.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Any

from kb_ai.navigate.page_refs import is_placeholder, resolve_page_ref
from kb_ai.navigate.records import Citation, ReadPage
from kb_ai.offline.passages import locate_all
from kb_ai.offline.text import tokenize
from kb_ai.store.catalog import Catalog, CatalogEntry
from kb_ai.store.links import resolve_link
from kb_ai.store.markdown_text import Link, find_links, plain_text
from kb_ai.store.sentences import split_sentences

MAX_CLAIMS_PER_PAGE = 64  # distinct cited sentences located per page (an answer has far fewer)
_LIST_ITEM = re.compile(r"[ \t]*+(?:[-*+]|\d{1,9}+[.)])[ \t]++")


def _answer_links(answer: str) -> list[Link]:
    return [link for link in find_links(answer) if link.kind != "definition"]


@dataclass
class CitationCheck:
    """An answer's links sorted: ``valid`` citations of pages read, ``invalid`` targets (pages not
    read, invented, external), ``repaired`` (target as written -> the page read it names) and
    ``placeholders`` (a prompt's example copied, dropped)."""

    valid: list[Citation]
    invalid: list[str] = field(default_factory=list)
    repaired: dict[str, str] = field(default_factory=dict)
    placeholders: list[str] = field(default_factory=list)


def validate_citations(answer: str, pages_read: list[ReadPage], *,
                       with_passages: bool = True) -> tuple[list[Citation], list[str]]:
    """``check_citations`` as (valid, invalid)."""
    check = check_citations(answer, pages_read, with_passages=with_passages)
    return check.valid, check.invalid


def _read_catalog(read: dict[str, ReadPage]) -> Catalog:
    return Catalog([CatalogEntry(p.path, p.title, "", "") for p in read.values()])


def check_citations(answer: str, pages_read: list[ReadPage], *, with_passages: bool = True) -> CitationCheck:
    """Split the answer's links into valid citations (pages read, de-duplicated, in order of first
    appearance, titled from the catalog), repaired ones among them, placeholders and invalid ones
    (anything else: pages not read, invented paths, external links, and saved answers, which are
    navigation, not evidence). With ``with_passages`` each citation carries the passages its
    links' sentences stand on (blocking: CPU work on the pages' text)."""
    read = {p.path: p for p in pages_read if p.is_evidence}
    links = _answer_links(answer)
    cited: dict[str, list[int]] = {}  # path -> positions (in ``links``) of its valid links, in order
    check = CitationCheck(valid=[])
    among: Catalog | None = None
    for position, link in enumerate(links):
        target = resolve_link("", link.target)  # an answer's paths are catalog paths, as a page's links may be
        path = target.page
        if (path is None or path not in read) and read and target.kind not in ("external", "anchor"):
            if is_placeholder(link.text, link.target):
                check.placeholders.append(f"[{link.text}]({link.target})")
                continue
            among = among or _read_catalog(read)
            repaired = resolve_page_ref(link.target, among, link.text)
            if repaired is not None:
                check.repaired[link.target] = repaired
                path = repaired
        if path is None or path not in read:
            if link.target not in check.invalid:
                check.invalid.append(link.target)
            continue
        cited.setdefault(path, []).append(position)
    claims = cited_sentences(answer, links) if with_passages and cited else []
    check.valid = [Citation(path, read[path].title,
                            tuple(_passages([claims[i] for i in positions], read[path])) if claims else ())
                   for path, positions in cited.items()]
    return check


def cited_sentences(answer: str, links: list[Link]) -> list[str]:
    """For each of ``links`` (the answer's, in order), the words of the answer it cites: the
    sentence it is in, links removed — or, when that sentence has no words of its own, the
    sentence before it on its line; a list item citing one page is one claim. "" when there are
    none. One pass over each line, however many links it holds."""
    claims = [""] * len(links)
    i = 0
    while i < len(links):
        line_start = answer.rfind("\n", 0, links[i].start) + 1
        line_end = _line_end(answer, links[i].end)
        j = i
        while j < len(links) and links[j].start < line_end:
            line_end = max(line_end, _line_end(answer, links[j].end))
            j += 1
        _claims_of_line(answer, line_start, line_end, links, range(i, j), claims)
        i = j
    return claims


def _line_end(text: str, at: int) -> int:
    end = text.find("\n", at)
    return len(text) if end < 0 else end


def _claims_of_line(answer: str, line_start: int, line_end: int, links: list[Link], positions: range,
                    claims: list[str]) -> None:
    on_line = [links[k] for k in positions]
    if _LIST_ITEM.match(answer, line_start) and len({k.target for k in on_line}) == 1:
        # A list item citing one page (an extractive answer's line): the item is the claim.
        words = _without_links(answer, line_start, line_end, on_line)
        if len(tokenize(words)) >= 2:
            for k in positions:
                claims[k] = words
            return
    # Links blanked (same length, no sentence ends), so a title's "." does not split a sentence
    # and every offset stays the answer's.
    pieces, at = [], line_start
    for link in on_line:
        if link.start >= at:
            pieces += [answer[at:link.start], "x" * (link.end - link.start)]
            at = link.end
    pieces.append(answer[at:line_end])
    line = "".join(pieces)
    spans: list[tuple[int, int]] = []
    at = 0
    for sentence in split_sentences(line):
        found = line.find(sentence, at)
        if found >= 0:
            at = found + len(sentence)
            spans.append((line_start + found, line_start + at))
    starts = [s for s, _ in spans]
    link_starts = [k.start for k in on_line]
    words_of: dict[int, str] = {}

    def words(n: int) -> str:
        if n not in words_of:
            s, e = spans[n]
            inside = on_line[bisect.bisect_left(link_starts, s):bisect.bisect_left(link_starts, e)]
            words_of[n] = _without_links(answer, s, e, [k for k in inside if k.end <= e])
        return words_of[n]

    for k, link in zip(positions, on_line, strict=True):
        here = bisect.bisect_right(starts, link.start) - 1
        for n in (here, here - 1):
            if n >= 0 and len(tokenize(words(n))) >= 2:
                claims[k] = words(n)
                break


def _without_links(text: str, start: int, end: int, links: list[Link]) -> str:
    """What a reader sees of ``text[start:end]`` with ``links`` (inside it, in order) left out."""
    pieces, at = [], start
    for k in links:
        if k.start >= at:
            pieces.append(text[at:k.start])
            at = k.end
    pieces.append(text[at:end])
    words = "".join(pieces)
    marker = _LIST_ITEM.match(words)  # a list item's bullet or number is not a word of the claim
    return plain_text(words[marker.end():] if marker else words)


def _passages(claims: list[str], page: ReadPage) -> list[dict[str, Any]]:
    """The passages of ``page`` that its links' ``claims`` stand on: one per distinct passage,
    each with the positions (``links``: 0 for the first link to this page in the answer, ...) of
    the links that cite it. At most ``MAX_CLAIMS_PER_PAGE`` distinct claims are looked for."""
    distinct = list(dict.fromkeys(c for c in claims if c))[:MAX_CLAIMS_PER_PAGE]
    if not distinct:
        return []
    body = page.body if page.body else page.text
    within = page.text if page.truncated and page.body else None
    found = dict(zip(distinct, locate_all(body, distinct, within=within), strict=True))
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for position, claim in enumerate(claims):
        passage = found.get(claim)
        if passage is None:
            continue
        entry = out.setdefault((passage.start, passage.end), {**passage.as_dict(), "links": []})
        entry["links"].append(position)
    return list(out.values())
