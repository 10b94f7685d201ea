"""Comparison and yes/no questions: a verdict derived from quoted evidence, or none.

An extractive answer quotes what the pages say; it never names the winner of a comparison ("Which
... first, A or B?") nor says "yes" to "Are A and B both P?". Two narrow
derivations state the result, always with the passages they stand on (cited by the answer):

* **dates**: "Which ... first / earlier / older / more recently / later ..., A or B?" — the year
  each compared subject's page gives for the asked event (the first passage of its page holding a
  year and a word of the question; else the first year its page gives, where a page states its
  subject's date). Both
  found and different: "A (1923) before B (1931)"; same year: said, no verdict.
* **both**: "Are A and B both P?" / "Are both A and B P?" — "Yes" only when each subject's page
  has a passage holding every word of P; otherwise no verdict (a page that does not say P is not
  evidence that P is false).

The compared subjects must each have a read page whose title names them; when either is missing
or the evidence is not found: None, and the answer is the quotes alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kb_ai.offline.names import question_names
from kb_ai.offline.text import tokenize
from kb_ai.offline.units import Unit, page_units
from kb_ai.store.words import GENERIC_WORDS, title_key

_SPLIT = re.compile(r"[,:]")
_OR = re.compile(r"\s+or\s+", re.IGNORECASE)
_EARLIER = frozenset("first earlier earliest older oldest before sooner".split())
_LATER = frozenset("later latest recently recent younger youngest newer newest".split())
_RANK = re.compile(r"\b(?:the|a|an|its|their|his|her)\s+(?:first|earliest|oldest|latest|youngest|newest)\b")
_BOTH = re.compile(r"^\s*(?:are|were|is|was|do|does|did|can|could|have|has)\b", re.IGNORECASE)
_YEAR = re.compile(r"(?<![\d.,])(1[0-9]{3}|20[0-9]{2})(?![\d.,]\d)")
_PARENTHETICAL = re.compile(r"\s*\([^()]*\)\s*$")
# Words of a question that say how it compares, not what: never required in a page's passage.
_FORM_WORDS = frozenset("both same either neither first earlier older later recently younger".split())


@dataclass(frozen=True)
class Verdict:
    text: str  # the derived statement (plain text)
    units: tuple[Unit, ...]  # the passages it stands on, to quote and cite


@dataclass(frozen=True)
class ComparedPage:
    path: str
    title: str
    body: str


def derive(question: str, pages: list[ComparedPage]) -> Verdict | None:
    """A verdict for a date comparison or a "both" question, from ``pages`` (the pages read);
    None when the question is neither or the evidence does not settle it."""
    options = _options(question)
    asked = question[:options[2]] if options else question
    # "the first Russian composer to ..." ranks, it does not compare dates
    words = set(re.findall(r"[a-z]+", _RANK.sub(" ", asked.lower())))
    if options and (words & _EARLIER or words & _LATER):
        return _dates(question, list(options[:2]), pages, earlier=bool(words & _EARLIER))
    if _BOTH.match(question) and "both" in set(re.findall(r"[a-z]+", question.lower())):
        return _both(question, pages)
    return None


def _options(question: str) -> tuple[str, str, int] | None:
    """The two options of "..., A or B?" (A holding at most one comma) and
    where the list starts; None when the question offers none. Looks after its first three commas
    or colons only (linear in the question's length)."""
    for separator in list(_SPLIT.finditer(question))[:3]:
        rest = question[separator.end():].strip()
        rest = rest[:-1].rstrip() if rest.endswith("?") else rest
        if "?" in rest:
            continue
        split = _OR.search(rest)
        if split is None or ":" in rest[:split.start()] or rest[:split.start()].count(",") > 1:
            continue
        a, b = rest[:split.start()].strip(), rest[split.end():].strip()
        if a and b:
            return a, b, separator.start()
    return None


def _page_for(name: str, pages: list[ComparedPage]) -> ComparedPage | None:
    """The read page whose title is ``name``, a trailing parenthetical aside of the title ignored."""
    key = title_key(name.strip().strip("\"'“”"))
    if not key:
        return None
    for page in pages:
        if key in (title_key(page.title), title_key(_PARENTHETICAL.sub("", page.title))):
            return page
    return None


def _units(page: ComparedPage) -> list[Unit]:
    return [u for u in page_units(page.path, page.title, page.body) if u.kind != "code"]


def _dated(page: ComparedPage, asked: set[str]) -> tuple[int, Unit] | None:
    """The year the page gives for the asked event, and the passage it is in."""
    units = _units(page)
    for unit in units:
        if asked & set(tokenize(unit.text)):
            year = _YEAR.search(unit.text)
            if year:
                return int(year.group(1)), unit
    for unit in units:  # else the first date the page gives: its subject's (born, founded, released)
        year = _YEAR.search(unit.text)
        if year:
            return int(year.group(1)), unit
    return None


def _dates(question: str, options: list[str], pages: list[ComparedPage], earlier: bool) -> Verdict | None:
    found = [_page_for(option, pages) for option in options]
    if any(page is None for page in found):
        return None
    named = {t for option in options for t in tokenize(option)}
    asked = {t for t in tokenize(question) if t not in named and t not in GENERIC_WORDS} - {
        t for w in _FORM_WORDS for t in tokenize(w)}
    dated = [_dated(page, asked) for page in found]
    if any(d is None for d in dated):
        return None
    (year_a, unit_a), (year_b, unit_b) = dated
    a, b = (page.title for page in found)
    units = (unit_a, unit_b) if unit_a != unit_b else (unit_a,)
    if year_a == year_b:
        return Verdict(f"Both dates quoted are {year_a}: the passages below do not tell {a} and {b} apart.", units)
    first, second = ((a, year_a), (b, year_b)) if year_a < year_b else ((b, year_b), (a, year_a))
    winner = first if earlier else second
    return Verdict(f"{winner[0]}, by the years quoted below: {first[0]} ({first[1]}) comes before "
                   f"{second[0]} ({second[1]}). (Derived from the quoted passages.)", units)


def _both(question: str, pages: list[ComparedPage]) -> Verdict | None:
    names = question_names(question)
    subjects = [(name, _page_for(name.text, pages)) for name in names]
    subjects = [(name, page) for name, page in subjects if page is not None][:2]
    if len(subjects) != 2 or subjects[0][1] == subjects[1][1]:
        return None
    named = {t for name, _page in subjects for t in name.terms}
    predicate = [t for t in dict.fromkeys(tokenize(question)) if t not in named
                 and t not in {x for w in _FORM_WORDS for x in tokenize(w)}]
    if not predicate:
        return None
    evidence = []
    for _name, page in subjects:
        unit = next((u for u in _units(page) if set(predicate) <= set(tokenize(u.text))), None)
        if unit is None:
            return None
        evidence.append(unit)
    a, b = (page.title for _name, page in subjects)
    return Verdict(f"Yes: the pages of both {a} and {b} say so (passages below). "
                   f"(Derived from the quoted passages.)", tuple(evidence))
