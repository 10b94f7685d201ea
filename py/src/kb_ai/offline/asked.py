"""What a question asks for, and whether a unit of a page holds it: features of the offline
answer's scorer (``offline.scorer``, ``offline.extractive``).

``asks_for(question)`` names the kinds, from the question's form only:

* ``number``: "how many / much / long / ...", "default", "what port / size / value ...",
  "maximum", "minimum", "number of";
* ``date``: "when", "how long / often / soon", "what year / date / day / time" (a date, a time or
  a duration);
* ``name``: "who", "whom", "whose";
* ``code``: "how do / can / should I", "command", "example", "syntax", "configure", "install", "run";
* ``list``: "which / what ... are / were", "which <plural>", "list", "types", "kinds", "options",
  "ways", "steps" (held by a whole list);
* ``identifier``: "which / what <noun of a named thing>" (option, parameter, function, ...): a
  name written as code;
* ``bound``: "minimum", "maximum", "at least", "at most", "up to", "oldest", "latest";
* ``version``: "which / what version / release".

``held(unit, wants, question)`` is the subset of ``wants`` the unit holds: a number, a date or a
time, a capitalised name, code, a list, a name written as code, a stated bound ("3.7 or later",
"up to 8"), a version number; in each case one the question does not already say. Every pattern
runs in linear time on any text (tests/test_linear_time.py).
"""

from __future__ import annotations

import re

from kb_ai.offline.names import identifiers
from kb_ai.offline.text import tokenize
from kb_ai.offline.units import Unit

KINDS = ("number", "date", "name", "code", "list", "identifier", "bound", "version")

_QUESTIONS = {
    "number": re.compile(r"\b(?:how (?:many|much|long|big|large|fast|old|often|high|tall|far)|defaults?|"
                         r"what (?:port|size|number|percentage|value|limit|timeout|amount|price|cost)|"
                         r"maximum|minimum|max|min|number of)\b", re.IGNORECASE),
    "date": re.compile(r"\b(?:when|how (?:long|often|soon)|(?:what|which) (?:year|date|day|time|month))\b",
                       re.IGNORECASE),
    "name": re.compile(r"\b(?:who|whom|whose)\b", re.IGNORECASE),
    "code": re.compile(r"\b(?:how (?:do|can|should|to|would)|command|example|syntax|configure|install|run|set up)\b",
                       re.IGNORECASE),
    "list": re.compile(r"\b(?:what|which)\b[^?.]{0,60}?\b(?:are|were)\b|\b(?:list|types|kinds|options|ways|steps)\b|"
                       r"\bwhich\s+[a-z][\w-]{2,}(?<!s)s\b", re.IGNORECASE),
    "identifier": re.compile(r"\b(?:which|what)\s+(?:[\w-]+\s+){0,2}?(?:option|parameter|argument|flag|switch|"
                             r"function|method|class|variable|setting|key|command|field|attribute|module|exception|"
                             r"header|keyword|decorator|directive|marker|hook|endpoint)s?\b", re.IGNORECASE),
    "bound": re.compile(r"\b(?:minimum|maximum|at least|at most|up to|oldest|earliest|lowest|highest|latest)\b",
                        re.IGNORECASE),
    "version": re.compile(r"\b(?:which|what)\s+(?:[\w-]+\s+){0,2}?(?:release|version)s?\b", re.IGNORECASE),
}
CODE_SPAN = re.compile(r"`+([^`\n]+?)`+")
_NUMBER = re.compile(r"(?<![\w.#])\d[\d,._:]*")  # "#1362" is an issue, not a value
_NUMBER_WORD = re.compile(r"\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|forty|"
                          r"fifty|hundred|thousand|million|billion|dozen)\b", re.IGNORECASE)
_MONTHS = r"January|February|March|April|May|June|July|August|September|October|November|December"
_DAYS = r"Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday"
_TIME = re.compile(rf"(?<!#)\b(?:1[0-9]{{3}}|20[0-9]{{2}})\b|\b(?:{_MONTHS}|{_DAYS})\b|\d{{1,2}}:\d\d|"
                   r"\b(?:second|minute|hour|day|week|month|quarter|year)s?\b|"
                   r"\b(?:daily|weekly|monthly|quarterly|yearly|annually|hourly|nightly)\b", re.IGNORECASE)
_CAPITALISED = re.compile(r"(?<![\w.])[A-Z][a-z]+\b")
_CALENDAR = re.compile(rf"(?:{_MONTHS}|{_DAYS})$")
_MIN_Q = re.compile(r"\b(?:minimum|at least|oldest|earliest|lowest)\b", re.IGNORECASE)
_LOWER_BOUND = re.compile(r"\d[\w.]*\+(?!\w)|\d[\w.]*\s+(?:or|and)\s+(?:later|newer|above|higher|greater|more|up)\b|"
                          r"\bat least\s+\S*\d|>=\s*\d|≥\s*\d", re.IGNORECASE)
_UPPER_BOUND = re.compile(r"\d[\w.]*\s+(?:or|and)\s+(?:earlier|older|below|lower|less|fewer)\b|"
                          r"\b(?:at most|up to|no more than)\s+\S*\d|<=\s*\d|≤\s*\d", re.IGNORECASE)
_VERSION = re.compile(r"(?<![\w.])v?\d+\.\d+(?:\.\d+)*(?![\w.]*\d)")


def asks_for(question: str) -> set[str]:
    """The kinds of thing ``question`` asks for (see the module's docstring)."""
    return {kind for kind, pattern in _QUESTIONS.items() if pattern.search(question)}


def held(unit: Unit, wants: set[str], question: str) -> set[str]:
    """The kinds of ``wants`` that ``unit`` holds, not only in the question's own words."""
    asked = set(question.lower().split())
    return {kind for kind in wants if _HOLDS[kind](unit, asked, question)}


def _new(matches, asked: set[str]) -> bool:
    return any(m.group().lower().strip(".,:") not in asked for m in matches)


def _number(unit: Unit, asked: set[str], _question: str) -> bool:
    return _new(_NUMBER.finditer(unit.text), asked) or _new(_NUMBER_WORD.finditer(unit.text), asked)


def _date(unit: Unit, asked: set[str], _question: str) -> bool:
    return _new(_TIME.finditer(unit.text), asked)


def _name(unit: Unit, asked: set[str], _question: str) -> bool:
    """A capitalised word that does not open the unit or a sentence of it, is no stop word, month
    or weekday, and the question lacks."""
    text = unit.text
    return any(m.start() > 0 and not text[:m.start()].rstrip().endswith((".", "!", "?"))
               and m.group().lower() not in asked and not _CALENDAR.match(m.group()) and tokenize(m.group())
               for m in _CAPITALISED.finditer(text))


def _code(unit: Unit, _asked: set[str], _question: str) -> bool:
    return unit.kind == "code" or "`" in unit.quote


def _list(unit: Unit, _asked: set[str], _question: str) -> bool:
    return unit.kind == "list"


def _identifier(unit: Unit, _asked: set[str], question: str) -> bool:
    return unit.kind == "code" or new_identifier(unit, question)


def _bound(unit: Unit, _asked: set[str], question: str) -> bool:
    """The bound in the direction asked: a lower one ("3.7 or later") for a minimum, else an upper one."""
    bound = _LOWER_BOUND if _MIN_Q.search(question) else _UPPER_BOUND
    return bound.search(unit.text) is not None


def _version(unit: Unit, asked: set[str], _question: str) -> bool:
    return _new(_VERSION.finditer(unit.text), asked)


_HOLDS = {"number": _number, "date": _date, "name": _name, "code": _code, "list": _list,
          "identifier": _identifier, "bound": _bound, "version": _version}


def version_in(text: str) -> re.Match[str] | None:
    """The first version number written in ``text`` ("2.38", "v2.38", "1.4.0")."""
    return _VERSION.search(text)


def new_identifier(unit: Unit, question: str) -> bool:
    """Whether ``unit`` writes as code (a code span, an identifier) a name the question does not."""
    asked = set(tokenize(question))
    spans = [m.group(1) for m in CODE_SPAN.finditer(unit.quote)] + [n.text for n in identifiers(unit.text)]
    return any(set(tokenize(span)) - asked for span in spans)
