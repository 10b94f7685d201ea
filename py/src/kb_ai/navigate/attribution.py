"""Grounding a model's answer after it streamed: kaas attributes it when the model does not.

Every claim sentence of the answer (a sentence or list item outside code, with at least
``MIN_TERMS`` search terms once its links are left out; headings are not claims) is matched to the
passages of the pages read by the one passage matcher (``offline.passages.locate_all``). A match
is **strong** when the passage holds at least ``STRONG_SHARE`` of the sentence's distinct terms,
and at least ``MIN_TERMS`` of them. Then:

- a strongly matched sentence that cites no page read gets a citation of the page it restates,
  with the passage (``attributed``; the citation is marked ``attributed`` when the model cited
  that page nowhere);
- a sentence that cites a page read is supported when the passage matcher finds its passage in
  that page (its own rule: a quarter of its terms); a citation whose page holds nothing of the
  sentence is no evidence by itself;
- any other sentence that no page read matches strongly is ``unsupported``;
- a sentence that says the pages do not cover the question (``ABSTAINING``) is no claim;
- when no sentence of the answer is supported, the answer is ``abstained``: the pages read do not
  answer the question, whatever the model wrote.
Offsets (``start``/``end``) are in the answer as streamed."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from kb_ai.navigate.citations import CitationCheck, _answer_links, _without_links
from kb_ai.navigate.records import Citation, ReadPage
from kb_ai.offline.passages import locate_all
from kb_ai.offline.text import tokenize
from kb_ai.store.markdown_text import atx_heading, iter_lines_at
from kb_ai.store.sentences import sentence_spans

STRONG_SHARE = 0.5
MIN_TERMS = 2
MAX_SENTENCES = 200  # claims matched per answer (an answer has far fewer)
ABSTAINING = re.compile(
    r"\b(?:do(?:es)?\s*(?:not|n['’]t)|did\s*(?:not|n['’]t)|cannot|can['’]t|is\s*not|are\s*not|isn['’]t|aren['’]t)"
    r"\s+(?:\w+\s+){0,3}?(?:cover|contain|mention|say|include|provide|answer|discuss|address|describe|specif|stat|found|given)"
    r"|\bno\s+(?:information|mention|details?)\b|\bnot\s+(?:covered|mentioned|specified|stated|described)\b",
    re.IGNORECASE)


@dataclass(frozen=True)
class Claim:
    start: int
    end: int
    words: str  # what a reader sees of it, links left out
    cites: frozenset[str]  # pages read its links cite


@dataclass
class Attribution:
    citations: list[Citation]
    attributed: list[dict[str, Any]] = field(default_factory=list)  # {"start", "end", "path"}
    unsupported: list[dict[str, Any]] = field(default_factory=list)  # {"start", "end", "text"}
    supported: int = 0  # claim sentences a page read supports
    abstained: bool = False  # no sentence of the answer is supported: the pages do not answer it
    model_abstained: bool = False  # the answer itself says so


def claims(answer: str, check: CitationCheck) -> tuple[list[Claim], bool]:
    """The answer's claim sentences, and whether a sentence of it says the pages do not cover it."""
    links = _answer_links(answer)
    targets = {c.path for c in check.valid}
    out: list[Claim] = []
    abstains = False
    for start, line, in_fence in iter_lines_at(answer):
        if in_fence or not line.strip() or atx_heading(line) is not None or line.lstrip().startswith(("```", "~~~", "|")):
            continue
        for s, e in sentence_spans(line):
            s, e = start + s, start + e
            inside = [k for k in links if k.start >= s and k.end <= e]
            words = _without_links(answer, s, e, inside)
            if ABSTAINING.search(words):
                abstains = True
                continue
            if len(set(tokenize(words))) < MIN_TERMS:
                continue
            cites = frozenset(check.repaired.get(k.target, k.target) for k in inside) & targets
            out.append(Claim(s, e, words, cites))
    return out[:MAX_SENTENCES], abstains


def _share(terms: set[str], quote: str) -> tuple[float, int]:
    shared = len(terms.intersection(tokenize(quote)))
    return (shared / len(terms) if terms else 0.0), shared


def attribute(answer: str, pages_read: list[ReadPage], check: CitationCheck) -> Attribution:
    """Attribute ``answer`` (a model's, with ``check`` its citations) to the pages read, by the
    rules of this module. Blocking: CPU work on the pages' text."""
    found, model_abstained = claims(answer, check)
    pages = [p for p in pages_read if p.is_evidence]
    result = Attribution(citations=list(check.valid), model_abstained=model_abstained)
    if not pages:
        return result
    texts = [c.words for c in found]
    best: list[tuple[float, int, ReadPage | None, Any]] = [(0.0, 0, None, None)] * len(found)
    in_cited = [False] * len(found)  # the passage matcher found the sentence in a page it cites
    for page in pages:
        body = page.body if page.body else page.text
        within = page.text if page.truncated and page.body else None
        for i, passage in enumerate(locate_all(body, texts, within=within) if texts else []):
            if passage is None:
                continue
            share, shared = _share(set(tokenize(texts[i])), passage.quote)
            cited_here = page.path in found[i].cites
            in_cited[i] = in_cited[i] or cited_here
            if (share, cited_here) > (best[i][0], best[i][2] is not None and best[i][2].path in found[i].cites):
                best[i] = (share, shared, page, passage)
    added: dict[str, list[dict[str, Any]]] = {}
    for claim, (share, shared, page, passage), cited_found in zip(found, best, in_cited, strict=True):
        if cited_found:
            result.supported += 1
            continue
        if page is None or share < STRONG_SHARE or shared < MIN_TERMS:
            result.unsupported.append({"start": claim.start, "end": claim.end, "text": claim.words})
            continue
        result.supported += 1
        if claim.cites:
            continue  # it cites a page read, and another page supports it: its citation stands
        result.attributed.append({"start": claim.start, "end": claim.end, "path": page.path})
        added.setdefault(page.path, []).append({**passage.as_dict(), "links": [],
                                               "sentence": {"start": claim.start, "end": claim.end}})
    result.citations = _merged(result.citations, added, {p.path: p for p in pages})
    result.abstained = result.supported == 0
    return result


def _merged(citations: list[Citation], added: dict[str, list[dict[str, Any]]],
            pages: dict[str, ReadPage]) -> list[Citation]:
    """The model's citations with the attributed passages added (a page it cited keeps its entry;
    a page it did not is a new citation marked ``attributed``)."""
    out = []
    for citation in citations:
        extra = [p for p in added.pop(citation.path, [])
                 if (p["start"], p["end"]) not in {(q["start"], q["end"]) for q in citation.passages}]
        out.append(replace(citation, passages=citation.passages + tuple(extra)) if extra else citation)
    for path, passages in added.items():
        unique = list({(p["start"], p["end"]): p for p in passages}.values())
        out.append(Citation(path, pages[path].title, tuple(unique), attributed=True))
    return out
