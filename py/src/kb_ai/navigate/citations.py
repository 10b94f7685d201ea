"""Citations: ``[Title](path)`` links in an answer, validated against the pages actually read,
each with the passages of its page that the answer's cited sentences stand on.

The sentence a link cites is the sentence of the answer the link is in (its links removed); when
that holds no words of its own ("See [Title](path)."), the sentence before it. Its passage is
found in the page by ``offline.passages.locate`` (the same for a model's answer and an
extractive one): a quote of the page, its offsets in the page body and the id of the heading it
is under in the rendered page. A link whose sentence matches nothing in the page cites the page.
"""

from __future__ import annotations

import re
from typing import Any

from kb_ai.navigate.records import Citation, ReadPage
from kb_ai.offline.passages import locate_all
from kb_ai.offline.text import tokenize
from kb_ai.store.links import resolve_link
from kb_ai.store.markdown_text import Link, find_links, plain_text, split_sentences

_LIST_ITEM = re.compile(r"[ \t]*+(?:[-*+]|\d{1,9}+[.)])[ \t]++")


def find_citation_targets(answer: str) -> list[tuple[str, str]]:
    """Every Markdown link in ``answer`` as (title, target), in order of appearance: inline
    ``[Title](path)`` and reference ``[Title][1]`` links alike; links in code are not links."""
    return [(link.text, link.target) for link in _answer_links(answer)]


def _answer_links(answer: str) -> list[Link]:
    return [link for link in find_links(answer) if link.kind != "definition"]


def validate_citations(answer: str, pages_read: list[ReadPage], *,
                       with_passages: bool = True) -> tuple[list[Citation], list[str]]:
    """Split the answer's links into valid citations (pages read, de-duplicated, in order of first
    appearance, titled from the catalog) and invalid ones (anything else: pages not read,
    invented paths, external links, and saved answers, which are navigation, not evidence).
    With ``with_passages`` each citation carries the passages its links' sentences stand on
    (blocking: CPU work on the pages' text)."""
    read = {p.path: p for p in pages_read if p.is_evidence}
    links = _answer_links(answer)
    cited: dict[str, list[Link]] = {}  # path -> its valid links, in order
    invalid: list[str] = []
    for link in links:
        path = resolve_link("", link.target).page  # an answer's paths are catalog paths, as a page's links may be
        if path is None or path not in read:
            if link.target not in invalid:
                invalid.append(link.target)
            continue
        cited.setdefault(path, []).append(link)
    valid = [Citation(path, read[path].title,
                      tuple(_passages(answer, links, cited[path], read[path])) if with_passages else ())
             for path in cited]
    return valid, invalid


def cited_sentence(answer: str, link: Link, links: list[Link]) -> str:
    """The words of the answer that ``link`` cites: the sentence it is in, links removed (or,
    when that sentence has no words of its own, the sentence before it on its line)."""
    line_start = answer.rfind("\n", 0, link.start) + 1
    line_end = answer.find("\n", link.end)
    line_end = len(answer) if line_end < 0 else line_end
    on_line = [k for k in links if k.start >= line_start and k.end <= line_end]
    if _LIST_ITEM.match(answer, line_start) and len({k.target for k in on_line}) == 1:
        # A list item citing one page (an extractive answer's line): the item is the claim.
        words = _without_links(answer[line_start:line_end], on_line, line_start)
        if len(tokenize(words)) >= 2:
            return words
    # Links blanked (same length, no sentence ends), so a title's "." does not split a sentence
    # and every offset stays the answer's.
    masked = list(answer[line_start:line_end])
    for k in on_line:
        masked[k.start - line_start:k.end - line_start] = "x" * (k.end - k.start)
    line = "".join(masked)
    sentences: list[tuple[int, int]] = []
    at = 0
    for sentence in split_sentences(line):
        found = line.find(sentence, at)
        if found >= 0:
            at = found + len(sentence)
            sentences.append((line_start + found, line_start + at))
    here = next((i for i, (s, e) in enumerate(sentences) if s <= link.start < e), None)
    if here is None:
        return ""
    for i in (here, here - 1):
        if i < 0:
            break
        s, e = sentences[i]
        words = _without_links(answer[s:e], [k for k in on_line if k.start >= s and k.end <= e], s)
        if len(tokenize(words)) >= 2:
            return words
    return ""


def _without_links(text: str, links: list[Link], base: int) -> str:
    for k in sorted(links, key=lambda k: k.start, reverse=True):
        text = text[:k.start - base] + text[k.end - base:]
    return plain_text(_LIST_ITEM.sub("", text, count=1))


def _passages(answer: str, links: list[Link], page_links: list[Link], page: ReadPage) -> list[dict[str, Any]]:
    """The passages of ``page`` its links in ``answer`` cite: one per distinct passage, each with
    the positions (``links``: 0 for the first link to this page in the answer, ...) of the links
    that cite it."""
    sentences = [cited_sentence(answer, link, links) for link in page_links]
    body = page.body if page.body else page.text
    within = page.text if page.truncated and page.body else None
    found = locate_all(body, [s or "" for s in sentences], within=within)
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for position, (sentence, passage) in enumerate(zip(sentences, found)):
        if not sentence or passage is None:
            continue
        entry = out.setdefault((passage.start, passage.end), {**passage.as_dict(), "links": []})
        entry["links"].append(position)
    return list(out.values())

