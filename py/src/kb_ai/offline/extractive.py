"""Extractive answers: the answer-bearing units of the selected pages that best match the question.

Units (``offline.units``: sentences joined with a short neighbour, list items with their lead-in,
definitions, headings with their first line, table rows, short code) are ranked with BM25 among
the selected pages' units only, nudged towards the higher-ranked pages and towards units that
hold what the question asks for (a number for "how many / default / what port", a year, date,
duration or relative time for "when" ("after six weeks"), a name or a field naming a person
("Owner: Dana.") for "who", code for "how do I", a whole list for "which ... are", a name written
as code for "which option / parameter / function", the bound stated as "3.7 or later" / "up to 8"
for "minimum / maximum", the asked noun with its number for "which RFC" ("RFC 5891"); for a value,
a time or a name, a sentence that lacks one joined with the next sentence of its paragraph (or the
next one-line paragraph) that gives it, and for "who" a sentence joined with the field line naming
the person right after it), then picked greedily so that each new unit
adds query terms the earlier ones did not cover (for "how do I", the first code block counts as
new whatever its words). Terms are ``tokenize``'s plus the short options it drops ("-v") and the
words of CamelCase and snake_case names ("HTTPBasicAuth": http, basic, auth). A unit is quoted whole or not at all.
What a question asks for, and whether a unit holds it, is ``offline.asked``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kb_ai.offline.asked import (CODE_SPAN, PERSON_FIELD, VALUE_WANTS, asks_for, holds, labelled_number, names_plural,
                                 states_bound)
from kb_ai.offline.equivalents import EQUIVALENT_WEIGHT, query_weights
from kb_ai.offline.text_ranking import rank_texts
from kb_ai.offline.text import tokenize
from kb_ai.offline.units import MAX_UNIT_CHARS, Unit, page_units

PER_PAGE = 2
MAX_ANSWER_CHARS = 1_500  # units are whole: the answer stops before one that would pass this
ASKED_BONUS = 1.5  # a unit that holds what the question asks for
CODE_UNASKED = 0.5
BRIDGE_BONUS = 3.0  # a unit of a page whose title an earlier pick names: the second hop

# "Which release / version added ...?": in release notes and changelogs the version is the page's
# title or the heading the entry sits under, not the entry's own words.
_VERSION_Q = re.compile(r"\b(which|what)\s+(?:[\w-]+\s+){0,2}?(release|version)s?\b|"
                        r"\bsince (which|what)\b|\bin (which|what) (release|version)\b", re.IGNORECASE)
_VERSION = re.compile(r"(?<![\w.])v?\d+\.\d+(?:\.\d+)*(?![\w.]*\d)")
_SHORT_OPTION = re.compile(r"(?<![\w-])-[A-Za-z](?![\w-])")
_CAMEL = re.compile(r"(?<![\w.])[A-Za-z]*(?:[a-z][A-Z]|[A-Z]{2}[a-z])\w*")
_SNAKE = re.compile(r"(?<![\w.])[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+(?!\w)")
_CAMEL_PART = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_RELATIVE_VERSION = re.compile(r"\b(?:since|after|before|until|till|from|than|prior to)\s+$", re.IGNORECASE)
_FENCE_NEXT = re.compile(r"\s*+(?:>[ \t]?)?(?:```|~~~)")  # what follows a unit is a fenced code block
# A unit that opens by referring back to its page's subject ("He served as ...", "It is the largest
# airport ...", "The film stars ...") does not say what it is about on its own.
_REFERS_BACK = re.compile(r"(?:He|She|It|They|His|Her|Its|Their|This|These|The (?:film|album|song|band|company|"
                          r"school|city|town|village|book|novel|show|series|game|airport|station|team|club|group|"
                          r"building|river|church|magazine|newspaper|episode|player|university|museum))\b")


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
    subject: str = ""  # the page's title, when the unit speaks of it as "He", "It", "The film"...; or the
    # heading / title giving the version a "which release ...?" unit does not state

    @property
    def path(self) -> str:
        return self.unit.path

    @property
    def title(self) -> str:
        return self.unit.title

    @property
    def sentence(self) -> str:
        """The unit as the answer shows it: prefixed by its subject when it only says "It"."""
        return f"{self.subject}: {self.unit.text}" if self.subject else self.unit.text


def best_units(question: str, pages: list[PageText], limit: int = 4) -> list[Evidence]:
    """Up to ``limit`` units from ``pages`` (in rank order) that share terms with ``question``."""
    asked = set(tokenize(question))
    if not asked:
        return []
    # The question's words, and at a reduced weight the words documentation uses for them
    # ("disable" for "turn off"): a unit that says it in other words is a candidate too.
    weights: dict[str, float] = {}
    for term, weight in query_weights(question):
        weights[term] = max(weights.get(term, 0.0), weight)
    for term in _short_options(question):
        weights[term] = 1.0
    for term in _name_parts(question):  # "InsecureRequestWarning": a page says "these warnings"
        weights.setdefault(term, EQUIVALENT_WEIGHT)
    query_terms = set(weights)
    candidates: list[tuple[int, Unit, set[str]]] = []
    code_leads: set[tuple[str, int, int]] = set()  # units ending in ":" right before a code block
    wants = asks_for(question)
    for rank, page in enumerate(pages):
        units = page_units(page.path, page.title, page.body)
        if wants & VALUE_WANTS:
            units += _with_next_value(units, page.body, wants, question)
        if "name" in wants:
            units += _with_person_field(units, page.body)
        for unit in units:
            if unit.text.startswith("[Superseded"):
                continue  # a supersession trail records an earlier fact: history, not the answer
            terms = set(_unit_terms(_ranked_text(unit), query_terms))
            if terms & query_terms:
                candidates.append((rank, unit, terms))
                if unit.text.endswith(":") and _FENCE_NEXT.match(page.body, unit.end):
                    code_leads.add((unit.path, unit.start, unit.end))
    if not candidates:
        return []
    scores = [float(s) for s in rank_texts(weights, [_unit_terms(_ranked_text(c[1]), query_terms) for c in candidates])]
    # A code block quoted with the sentence that introduces it matches the question at least as
    # well as that sentence alone: its code lines must not dilute the match (BM25's length
    # normalisation) so that the bare lead-in, which "introduces what it does not show", wins.
    leads = {(unit.path, unit.start, unit.text): score for score, (_r, unit, _t) in zip(scores, candidates, strict=True)
             if unit.kind != "code"}
    scores = [max(score, leads.get((unit.path, unit.start, unit.lead), 0.0)) if unit.kind == "code" and unit.lead
              else score for score, (_r, unit, _t) in zip(scores, candidates, strict=True)]
    carried = {(unit.path, unit.start, unit.lead) for _r, unit, _t in candidates if unit.kind == "code" and unit.lead}
    # A sentence that announces the list after it without a colon ("The following checks must pass
    # before merging.") introduces what it does not show, as one ending in ":" does.
    announcing = {(unit.path, unit.start) for _r, unit, _t in candidates if unit.kind == "list"}
    base = []
    for score, (rank, unit, _terms) in zip(scores, candidates, strict=True):
        value = score * (1.0 - 0.08 * min(rank, 5))
        if wants and holds(unit, wants, question):
            value *= ASKED_BONUS
        if states_bound(unit, wants):
            value *= ASKED_BONUS
        if "labelled" in wants and labelled_number(unit.text, question):
            value *= ASKED_BONUS
        if unit.kind == "code" and not wants & {"code", "identifier"}:
            value *= CODE_UNASKED
        if unit.text.endswith(":") and not (CODE_SPAN.search(unit.quote) and (unit.path, unit.start, unit.end) in code_leads
                                            and (unit.path, unit.start, unit.text) not in carried):
            # It introduces what it does not show (a list, a table, code quoted with it); but the
            # lead-in of a code block too long to quote whole, writing the thing itself ("specify
            # `retries=False`:"), is the answer.
            value *= CODE_UNASKED
        elif unit.kind == "sentence" and (unit.path, unit.start) in announcing:
            value *= CODE_UNASKED
        if unit.kind != "code" and (unit.path, unit.start, unit.text) in carried:
            # a lead-in is never quoted without the code it introduces: the code unit quoted with
            # it stands for it ("you should use:" and then `yaml.safe_load(stream)`)
            value = 0.0
        base.append(value)
    if wants & {"list", "plural"}:
        # A whole list answers "which ... are" at least as well as the best of its items.
        for i, (_rank, unit, _terms) in enumerate(candidates):
            if unit.kind == "list" and ("list" in wants or names_plural(unit, question)):
                inside = [base[j] for j, (_r, other, _t) in enumerate(candidates) if other.path == unit.path
                          and other.kind != "list" and unit.start <= other.start and other.end <= unit.end]
                base[i] = max([base[i], *(b * ASKED_BONUS for b in inside)])

    picked: list[Evidence] = []
    covered: set[str] = set()
    per_page: dict[str, int] = {}
    spans: dict[str, list[tuple[int, int]]] = {}
    seen_texts: set[str] = set()
    used_chars = 0

    named: set[str] = set()  # pages whose title a picked unit names (the bridge to a second page)
    # A page the question names by its title is no second hop: a pick naming it too is no bridge
    # ("Uvicorn has three implementations..." does not make the page "Uvicorn" the answer to a
    # question about uvicorn).
    titles = {page.path: " ".join(tokenize(page.title)) for page in pages
              if not set(tokenize(page.title)) <= asked}

    def gain(i: int) -> float:
        matched = candidates[i][2] & query_terms
        new = len(matched - covered) / max(len(matched), 1)
        if "code" in wants and candidates[i][1].kind == "code" and not any(e.unit.kind == "code" for e in picked):
            new = 1.0  # "how do I" asks for code: the first code block is new even in words already said
        bridge = BRIDGE_BONUS if candidates[i][1].path in named else 1.0
        return base[i] * (0.4 + 0.6 * new) * bridge

    def overlaps(unit: Unit) -> bool:
        return any(unit.start < end and start < unit.end for start, end in spans.get(unit.path, []))

    remaining = list(range(len(candidates)))
    while remaining and len(picked) < limit:
        order = sorted(remaining, key=lambda i: (-gain(i), i))
        best = None
        for position, i in enumerate(order):
            unit = candidates[i][1]
            key = " ".join(unit.text.lower().split())
            if per_page.get(unit.path, 0) >= PER_PAGE or key in seen_texts or overlaps(unit) or gain(i) <= 0:
                continue
            if picked and used_chars + len(unit.text) > MAX_ANSWER_CHARS:
                continue
            best, remaining = i, order[position + 1:]
            seen_texts.add(key)
            break
        if best is None:
            break
        _rank, unit, terms = candidates[best]
        per_page[unit.path] = per_page.get(unit.path, 0) + 1
        spans.setdefault(unit.path, []).append((unit.start, unit.end))
        covered |= terms & query_terms
        used_chars += len(unit.text)
        said = " " + " ".join(tokenize(unit.text)) + " "
        named |= {path for path, title in titles.items() if title and path != unit.path and f" {title} " in said}
        picked.append(Evidence(unit, base[best], _subject(unit) or _version_context(unit, question)))
    return picked


def _with_next_value(units: list[Unit], body: str, wants: set[str], question: str) -> list[Unit]:
    """A sentence that does not hold the value, time or name the question asks for, joined with the
    next sentence of its paragraph when that one does ("Another way to speed up key generation is to
    use several processes. ... a dual-core machine should use `poolsize=2`"): the sentence that
    repeats the question's words is the topic, the one after it gives the answer, and neither alone
    is both. Notes written a line at a time put the two in one-sentence paragraphs of their own
    ("Read ... before joining the on-call rotation." / "On-call starts after six weeks; ..."): those
    are joined too when the second repeats a word of the question."""
    sentences = [u for u in units if u.kind == "sentence"]
    asked = set(tokenize(question))
    value_wants = wants & VALUE_WANTS
    joined = []
    for first, second in zip(sentences, sentences[1:], strict=False):
        between = body[first.end:second.start]
        if between.strip() or second.end - first.start > MAX_UNIT_CHARS:
            continue  # not the next sentence, or too long to quote whole
        if "\n\n" in between and not (between.count("\n") == 2 and _whole_line(body, first.start, first.end)
                                       and _whole_line(body, second.start, second.end)
                                       and asked & set(tokenize(second.text))):
            continue  # another paragraph, unless both are one-line notes on the same thing
        if holds(first, value_wants, question) or not holds(second, value_wants, question):
            continue
        joined.append(_joined(first, second, body))
    return joined


def _joined(first: Unit, second: Unit, body: str) -> Unit:
    """``first`` and the ``second`` after it, quoted as one sentence unit (the page text between
    them included in the quote)."""
    return Unit(first.path, first.title, "sentence", f"{first.text} {second.text}", body[first.start:second.end],
                first.start, second.end, first.heading)


def _whole_line(body: str, start: int, end: int) -> bool:
    """Whether body[start:end] is a line of its own."""
    return (start == 0 or body[start - 1] == "\n") and (end == len(body) or body[end] == "\n")


def _with_person_field(units: list[Unit], body: str) -> list[Unit]:
    """A sentence or list item joined with the paragraph right after it when that one opens with a
    field naming who is responsible ("We agreed to ship receipt capture by March." + "Owner: Dana.
    Budget: ..."): meeting notes and specs put the person on a line of their own, and asked "who",
    neither alone is both the thing and the person."""
    ordered = sorted(units, key=lambda u: u.start)
    joined = []
    for index, first in enumerate(ordered):
        if first.kind not in ("sentence", "list-item") or PERSON_FIELD.search(first.text):
            continue
        for second in ordered[index + 1:]:
            if second.start <= first.end:
                continue
            between = body[first.end:second.start]
            if between.strip() or between.count("\n") > 2 or second.end - first.start > MAX_UNIT_CHARS:
                break  # not the paragraph right after it, or too long to quote whole
            if second.kind in ("sentence", "definition") and PERSON_FIELD.match(second.text):
                joined.append(_joined(first, second, body))
                break
    return joined


def _subject(unit: Unit) -> str:
    """The page's title when ``unit`` refers back to the page's subject without naming it."""
    if unit.kind not in ("sentence", "list-item") or not _REFERS_BACK.match(unit.text):
        return ""
    title = set(tokenize(unit.title))
    return unit.title if title and not title <= set(tokenize(unit.text)) else ""


def _version_context(unit: Unit, question: str) -> str:
    """For "which release / version ...?": the heading or page title that gives the version of a
    unit that does not say it ("Git v2.38 Release Notes" for '"git grep -m" limits the hits ...')."""
    if not _VERSION_Q.search(question) or _VERSION.search(unit.text):
        return ""
    for context in (unit.heading, unit.title):
        found = _VERSION.search(context) if context else None
        if found and _RELATIVE_VERSION.search(context[:found.start()]):
            continue  # "Fixes since v2.38" (in the notes of 2.39) names the release before: the title says which
        if found:
            # "v2.38" glued to its letter is not the number a reader asked for: say the release
            # itself first ("2.38 (Git v2.38 Release Notes)"), then where the page says it.
            version = found.group()
            if version[0] not in "vV":
                return context
            return version[1:] if context.strip() == version else f"{version[1:]} ({context})"
    return ""


def _short_options(text: str) -> list[str]:
    """Short command-line options as written ("-v", "-h"): one letter, so ``tokenize`` drops
    them, yet "What do git -v and git -h mean?" asks about nothing else."""
    return _SHORT_OPTION.findall(text)


def _name_parts(text: str) -> list[str]:
    """The terms of the words inside CamelCase and snake_case names ("HTTPBasicAuth": http, basic,
    auth; "read_locked": read, lock), which ``tokenize`` reads as one word: a page names the
    subject in those words."""
    camel = [term for name in _CAMEL.findall(text) for term in tokenize(" ".join(_CAMEL_PART.findall(name)))]
    return camel + [term for name in _SNAKE.findall(text) for term in tokenize(name.replace("_", " "))]


def _unit_terms(text: str, query_terms: set[str]) -> list[str]:
    """A unit's terms as the answer ranks them: ``tokenize``'s, and its short options and CamelCase
    parts that the question asks for (the others would only lengthen it: "McDonald's")."""
    return tokenize(text) + [t for t in _short_options(text) + _name_parts(text) if t in query_terms]


def _ranked_text(unit: Unit) -> str:
    """What a unit is ranked by: its text, and for code the line that introduces it."""
    return f"{unit.lead} {unit.text}" if unit.lead else unit.text
