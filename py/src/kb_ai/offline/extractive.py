"""Extractive answers: the answer units of the selected pages most likely to hold what the question asks.

The candidates are the units of the pages read (``offline.units``: a sentence, a sentence with
its neighbour, a paragraph, a list with its lead-in, a code block with the sentence introducing
it, a table row with its header, a heading with its first line), each sharing a term with the
question. Terms are ``tokenize``'s plus the short options it drops ("-v") and the words of
CamelCase and snake_case names ("HTTPBasicAuth": http, basic, auth). Each candidate is scored by
the fitted model of ``offline.scorer`` over general features (``candidates`` computes them), then
picked greedily: a pick's score is multiplied by the share of its question terms no earlier pick
covered (never below the fitted ``new_floor``) and, for a page whose title an earlier pick names,
by the fitted ``bridge`` bonus (the second hop); at most the fitted ``per_page`` units of a page, no two
overlapping, none scoring under the fitted ``min_share`` of the best score, and the answer stops
before a unit that would pass ``MAX_ANSWER_CHARS``. A unit is
quoted whole or not at all; a lead-in is never quoted without the code it introduces.

Shown context (``Evidence.subject``): a unit opening with a pronoun that does not name its page's
subject is shown after the page's title; asked for a version, a unit that states none is shown
after the version its page's title, else its heading, states.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from kb_ai.offline import scorer
from kb_ai.offline.asked import KINDS, asks_for, held, version_in
from kb_ai.offline.equivalents import EQUIVALENT_WEIGHT, query_weights
from kb_ai.offline.text import tokenize
from kb_ai.offline.text_ranking import rank_texts
from kb_ai.offline.units import MAX_UNIT_CHARS, Unit, neighbour_pairs, page_units

MAX_ANSWER_CHARS = 1_500  # units are whole: the answer stops before one that would pass this
SHORT_WORDS = 8  # a unit under this many words is "short" (a feature)

_SHORT_OPTION = re.compile(r"(?<![\w-])-[A-Za-z](?![\w-])")
_CAMEL = re.compile(r"(?<![\w.])[A-Za-z]*(?:[a-z][A-Z]|[A-Z]{2}[a-z])\w*")
_SNAKE = re.compile(r"(?<![\w.])[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+(?!\w)")
_CAMEL_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_PRONOUN = re.compile(r"(?:He|She|It|They|His|Her|Its|Their|This|These)\b")


@dataclass(frozen=True)
class PageText:
    path: str
    title: str
    body: str


@dataclass(frozen=True)
class Evidence:
    """A unit picked for the answer, with its score. ``sentence`` is the text the answer shows."""

    unit: Unit
    score: float
    subject: str = ""  # context the unit does not state: its page's title, or the version it is listed under

    @property
    def path(self) -> str:
        return self.unit.path

    @property
    def title(self) -> str:
        return self.unit.title

    @property
    def sentence(self) -> str:
        """The unit as the answer shows it: after its subject when it does not say it."""
        return f"{self.subject}: {self.unit.text}" if self.subject else self.unit.text


@dataclass
class Candidate:
    """A unit that shares a term with the question, and its features (``offline.scorer``)."""

    unit: Unit
    rank: int  # its page's rank among the pages read
    terms: set[str]  # the question terms it holds
    features: dict[str, float] = field(default_factory=dict)


def best_units(question: str, pages: list[PageText], limit: int = 4) -> list[Evidence]:
    """Up to ``limit`` units from ``pages`` (in rank order) that best answer ``question``."""
    found = candidates(question, pages)
    if not found:
        return []
    return choose(question, pages, found, [scorer.score(c.features) for c in found], limit)


def query_terms(question: str) -> dict[str, float]:
    """The question's terms and their weights: its words, the words documentation uses for them
    (``offline.equivalents``), short options and the parts of CamelCase and snake_case names."""
    weights: dict[str, float] = {}
    for term, weight in query_weights(question):
        weights[term] = max(weights.get(term, 0.0), weight)
    for term in _short_options(question):
        weights[term] = 1.0
    for term in _name_parts(question):  # "InsecureRequestWarning": a page says "these warnings"
        weights.setdefault(term, EQUIVALENT_WEIGHT)
    return weights


def candidates(question: str, pages: list[PageText]) -> list[Candidate]:
    """Every unit of ``pages`` sharing a term with ``question``, with its features."""
    weights = query_terms(question)
    if not weights:
        return []
    units = [(rank, unit) for rank, page in enumerate(pages) for unit in _page_candidates(page)]
    texts = [_unit_terms(_ranked_text(unit), weights) for _rank, unit in units]
    idf = _idf(weights, texts)
    bm25 = [float(s) for s in rank_texts(weights, texts)]
    top = max(bm25, default=0.0) or 1.0
    wants = asks_for(question)
    lengths = {page.path: max(len(page.body), 1) for page in pages}
    firsts: dict[str, int] = {}
    for _rank, unit in units:
        firsts[unit.path] = min(firsts.get(unit.path, unit.start), unit.start)
    found = []
    for (rank, unit), terms, score in zip(units, texts, bm25, strict=True):
        matched = set(terms) & set(weights)
        if not matched:
            continue
        features = {"bias": 1.0, "cover": _share(matched, idf), "bm25": score / top, "best": float(score >= top),
                    "page_first": float(rank == 0), "page_rank": 1.0 / (1 + rank),
                    "first": float(unit.start == firsts[unit.path]), "position": unit.start / lengths[unit.path],
                    "heading": _share(set(tokenize(unit.heading)) & set(weights), idf),
                    "title": _share(set(tokenize(unit.title)) & set(weights), idf)}
        features.update(_unit_features(unit))
        features.update(_asked_features(unit, wants, question))
        found.append(Candidate(unit, rank, matched, features))
    best_cover = max((c.features["cover"] for c in found), default=0.0) or 1.0
    for c in found:  # how it compares with the best candidate, and its match when it holds what is asked
        c.features["cover_top"] = c.features["cover"] / best_cover
        c.features["cover_asked"] = c.features["cover_top"] * float(bool(wants) and "asked_none" not in c.features)
    return found


def _page_candidates(page: PageText) -> list[Unit]:
    """A page's units and neighbour pairs, less those that never stand alone: a supersession
    trail (history, not the answer), and a unit ending with a lead-in that a code block or a
    list is quoted with (the lead-in without what it introduces)."""
    units = [u for u in page_units(page.path, page.title, page.body) if not u.text.startswith("[Superseded")]
    wholes = {u.start: u for u in units if u.kind == "list" or (u.kind == "code" and u.lead)}
    lead_ends = {u.end for u in units if u.kind in ("sentence", "definition") and u.start in wholes
                 and u.end < wholes[u.start].end and _leads(u, wholes[u.start])}
    units += neighbour_pairs(units, page.body)
    return [u for u in units if u.kind not in ("sentence", "definition", "pair", "heading") or u.end not in lead_ends]


def _leads(unit: Unit, whole: Unit) -> bool:
    """Whether ``unit`` is the lead-in that ``whole`` (a list, or code with its lead-in) opens with."""
    return whole.lead == unit.text if whole.kind == "code" else whole.text.startswith(unit.text)


def _idf(weights: dict[str, float], texts: list[list[str]]) -> dict[str, float]:
    """Each question term's weight times its IDF over the candidate units."""
    n = len(texts)
    df = dict.fromkeys(weights, 0)
    for terms in texts:
        for term in set(terms) & set(weights):
            df[term] += 1
    return {t: w * math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t, w in weights.items()}


def _share(terms: set[str], idf: dict[str, float]) -> float:
    total = sum(idf.values())
    return sum(idf[t] for t in terms if t in idf) / total if total else 0.0


def _unit_features(unit: Unit) -> dict[str, float]:
    """What a unit is, whatever the question: its kind, size and form."""
    kind = "code-lead" if unit.kind == "code" and unit.lead else unit.kind
    text = unit.text.rstrip()
    return {f"kind_{kind}": 1.0, "length": min(len(unit.text), MAX_UNIT_CHARS) / MAX_UNIT_CHARS,
            "short": float(len(unit.text.split()) < SHORT_WORDS),
            "question": float(unit.kind != "code" and text.endswith("?")),
            "lead_in": float(unit.kind != "code" and text.endswith(":")),
            "refers_back": float(unit.kind != "code" and _PRONOUN.match(unit.text) is not None)}


def _asked_features(unit: Unit, wants: set[str], question: str) -> dict[str, float]:
    """Whether the unit holds each kind of thing the question asks for (``offline.asked``)."""
    has = held(unit, wants, question)
    features = {f"asked_{kind}": 1.0 for kind in KINDS if kind in has}
    if wants and not has:
        features["asked_none"] = 1.0
    if wants:
        features["asked_share"] = len(has) / len(wants)
    if unit.kind == "code" and not wants & {"code", "identifier"}:
        features["code_unasked"] = 1.0
    return features


def choose(question: str, pages: list[PageText], found: list[Candidate], scores: list[float],
           limit: int = 4, params: dict[str, float] | None = None) -> list[Evidence]:
    """The greedy choice of the module's docstring over ``found`` scored ``scores`` (``params``:
    the selection parameters, default the shipped ones)."""
    params = params or scorer.selection()
    floor, bridge = params["new_floor"], params["bridge"]
    asked = set(tokenize(question))
    # A page the question names by its title is no second hop: a pick naming it too is no bridge.
    titles = {page.path: " ".join(tokenize(page.title)) for page in pages if not set(tokenize(page.title)) <= asked}
    picked: list[Evidence] = []
    covered: set[str] = set()
    named: set[str] = set()
    used = 0

    def gain(i: int) -> float:
        matched = found[i].terms
        new = len(matched - covered) / max(len(matched), 1)
        return scores[i] * (floor + (1 - floor) * new) * (bridge if found[i].unit.path in named else 1.0)

    top = max(scores, default=0.0)
    remaining = [i for i in range(len(found)) if scores[i] >= params["min_share"] * top]
    while remaining and len(picked) < limit:
        order = sorted(remaining, key=lambda i: (-gain(i), i))
        best = next((i for i in order if _fits(found[i].unit, picked, used, int(params["per_page"]))), None)
        if best is None:
            break
        remaining = [i for i in order if i != best]
        unit = found[best].unit
        covered |= found[best].terms
        used += len(unit.text)
        said = f" {' '.join(tokenize(unit.text))} "
        named |= {path for path, title in titles.items() if title and path != unit.path and f" {title} " in said}
        picked.append(Evidence(unit, scores[best], _context(unit, question)))
    return picked


def _fits(unit: Unit, picked: list[Evidence], used: int, per_page: int) -> bool:
    """Whether ``unit`` may join ``picked``: its page has fewer than ``per_page`` picks, it
    overlaps and repeats none, and the answer stays under ``MAX_ANSWER_CHARS``."""
    if picked and used + len(unit.text) > MAX_ANSWER_CHARS:
        return False
    same_page = [e.unit for e in picked if e.path == unit.path]
    key = " ".join(unit.text.lower().split())
    return (len(same_page) < per_page and all(key != " ".join(e.unit.text.lower().split()) for e in picked)
            and not any(unit.start < other.end and other.start < unit.end for other in same_page))


def _context(unit: Unit, question: str) -> str:
    """What the answer shows before ``unit`` (the module's docstring): the page's title for a unit
    opening with a pronoun that does not name it; asked for a version, the version the page's
    title or else the unit's heading states when the unit states none."""
    own = unit.text.split(": ", 1)[-1] if unit.kind == "heading" else unit.text
    if "version" in asks_for(question) and not version_in(own):
        for context in (unit.title, unit.heading):
            found = version_in(context) if context else None
            if found:
                version = found.group()
                if version[0] not in "vV":
                    return context
                return version[1:] if context.strip() == version else f"{version[1:]} ({context})"
    if unit.kind in ("sentence", "pair", "list-item") and _PRONOUN.match(unit.text):
        title = set(tokenize(unit.title))
        return unit.title if title and not title <= set(tokenize(unit.text)) else ""
    return ""


def _short_options(text: str) -> list[str]:
    """Short command-line options as written ("-v", "-h"): one letter, so ``tokenize`` drops
    them, yet "What do git -v and git -h mean?" asks about nothing else."""
    return _SHORT_OPTION.findall(text)


def _name_parts(text: str) -> list[str]:
    """The terms of the words inside CamelCase and snake_case names ("HTTPBasicAuth": http, basic,
    auth; "read_locked": read, lock), which ``tokenize`` reads as one word."""
    camel = [term for name in _CAMEL.findall(text) for term in tokenize(" ".join(_CAMEL_PART.findall(name)))]
    return camel + [term for name in _SNAKE.findall(text) for term in tokenize(name.replace("_", " "))]


def _unit_terms(text: str, weights: dict[str, float]) -> list[str]:
    """A unit's terms as the answer ranks them: ``tokenize``'s, and its short options and CamelCase
    parts that the question asks for (the others would only lengthen it: "McDonald's")."""
    return tokenize(text) + [t for t in _short_options(text) + _name_parts(text) if t in weights]


def _ranked_text(unit: Unit) -> str:
    """What a unit is ranked by: its text, and for code the line that introduces it."""
    return f"{unit.lead} {unit.text}" if unit.lead else unit.text
