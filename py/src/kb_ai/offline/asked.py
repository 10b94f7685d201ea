"""What a question asks for, and whether a unit of a page holds it: the question kinds the
offline answer (``offline.extractive``) prefers units for.

``asks_for(question)`` names the kinds: "number" (how many / how much / default / what port),
"date" (when: a year, a date, a duration or a relative time, "after six weeks"), "name" (who: a
person's name, or a field naming one, "Owner: Dana."), "code" (how do I), "list" / "plural"
(which ... are; which checks), "identifier" (which option / parameter / function / marker: a name
written as code), "min" / "max" (the bound "3.7 or later" / "up to 8"), "labelled" (which RFC:
the asked noun with its number, "RFC 5891"), "version" (which release). ``holds``,
``states_bound``, ``labelled_number``, ``names_plural`` and ``new_identifier`` tell whether a unit
gives it. Every pattern runs in linear time on any text (tests/test_linear_time.py).
"""

from __future__ import annotations

import re

from kb_ai.offline.names import identifiers
from kb_ai.offline.text import tokenize
from kb_ai.offline.units import Unit

VALUE_WANTS = frozenset({"number", "identifier", "date"})  # a value, a name written as code, a time

_NUMBER_Q = re.compile(r"\b(how (many|much|long|big|large|fast|old|often|high|tall)|default|defaults|"
                       r"what (port|size|number|version|percentage|value|limit|timeout)|maximum|minimum|max|min|"
                       r"limit|timeout|size|number of|population|capacity)\b", re.IGNORECASE)
_WHEN_Q = re.compile(r"\b(when|what year|which year|what date|in what year|born|founded|released)\b", re.IGNORECASE)
_WHO_Q = re.compile(r"\b(who|whom|whose|which (person|man|woman|actor|actress|author|director|singer))\b", re.IGNORECASE)
_HOW_Q = re.compile(r"\b(how (do|can|should|to)|how would|command|example|syntax|configure|install|run|set up)\b",
                    re.IGNORECASE)
_LIST_Q = re.compile(r"\b(what|which)\b[^?.]{0,60}?\b(are|were)\b|\b(list|types|kinds|options|ways|steps)\b",
                     re.IGNORECASE)
# "Which checks / HTTP methods ...": a plural asks for all of them, in a list that names them
# ("The following checks must pass ...: unit tests; lint; type check").
_PLURAL_Q = re.compile(r"\b(?:which|what)\s+(?:[\w-]+\s+)?(?!(?:does|was|has|is|its|this|happens|means|makes|takes|"
                       r"needs|goes|uses|runs|works|gives|status|process|class|address|access|alias|series|news|"
                       r"analysis|basis|always|perhaps|less|unless)\b)([a-z][\w-]*[a-rt-z]s)\b", re.IGNORECASE)
# "Which option / parameter / flag / function / environment variable ...": the answer is a name
# written as code (``poolsize``, ``--update-refs``, ``REQUESTS_CA_BUNDLE``), not a sentence about it.
_IDENT_Q = re.compile(r"\b(which|what)\s+(?:[\w-]+\s+){0,2}?(option|parameter|argument|flag|switch|function|method|"
                      r"class|variable|setting|key|command|field|attribute|module|exception|header|tool|scheme|"
                      r"keyword|config|configuration|marker|decorator|directive|prefix|suffix|placeholder|token|hook|"
                      r"endpoint|plugin|backend|codec)s?\b", re.IGNORECASE)
# "What is the minimum / at least ...?": documentation states a lower bound as "3.7 or later",
# "3.7+", "at least 2 GB" (and an upper bound as "up to 3", "at most 10", "2.0 or earlier"), rarely
# with the question's word: a unit stating the asked bound holds the answer even more than one
# holding any number.
_MIN_Q = re.compile(r"\b(minimum|at least|oldest|earliest|lowest)\b", re.IGNORECASE)
_MAX_Q = re.compile(r"\b(maximum|at most|highest|up to)\b", re.IGNORECASE)
_LOWER_BOUND = re.compile(r"\d[\w.]*\+(?!\w)|\d[\w.]*\s+(?:or|and)\s+(?:later|newer|above|higher|greater|more|up)\b|"
                          r"\bat least\s+\S*\d|>=\s*\d|≥\s*\d", re.IGNORECASE)
_UPPER_BOUND = re.compile(r"\d[\w.]*\s+(?:or|and)\s+(?:earlier|older|below|lower|less|fewer)\b|"
                          r"\b(?:at most|up to|no more than)\s+\S*\d|<=\s*\d|≤\s*\d", re.IGNORECASE)
CODE_SPAN = re.compile(r"`+([^`\n]+?)`+")
_NUMBER = re.compile(r"(?<![\w.#])\d[\d,._]*")  # "#1362" is an issue, not a value
_YEAR = re.compile(r"(?<!#)\b(1[0-9]{3}|20[0-9]{2})\b|\b(January|February|March|April|May|June|July|August|September|"
                   r"October|November|December)\b")
_NAME = re.compile(r"\b[A-Z][a-z]+(?:\s+[A-Z][a-z.]+)+")
# "When ...?" is answered by a relative time or a duration as much as by a date ("after six weeks",
# "within ten minutes", "every Tuesday", "on day one").
_NUMBER_WORDS = r"(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a few|few|several)"
_RELATIVE_TIME = re.compile(r"\b(?:after|within|before|in|for|every|each|until|once|from)\s+(?:the\s+)?(?:first\s+)?"
                            rf"{_NUMBER_WORDS}\s+(?:second|minute|hour|day|week|month|quarter|year|sprint|release)s?\b|"
                            r"\b(?:every|each|on|next|last)\s+(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday|"
                            r"day|week|month|quarter|year|morning|night)s?\b|"
                            r"\b(?:daily|weekly|monthly|quarterly|yearly|annually|hourly|nightly)\b", re.IGNORECASE)
# A field line naming who is responsible ("Owner: Dana.", "**author:** Paul McGuire", "Maintainer - Sam"):
# a name, though it may be one word.
PERSON_FIELD = re.compile(r"(?:^|[.;!?]\s+)\W{0,2}(?:owners?|authors?|maintainers?|lead|leads|contact|assignee|"
                           r"responsible|written by|created by|owned by|maintained by|led by|dri)\W{0,2}\s*(?::|—|–|-)"
                           r"\W{0,2}\s*[A-Z]", re.IGNORECASE)
# "Which RFC / port / PEP / version ...?": the thing the question names, with its number after it
# ("RFC 5891", "port 8000") holds the answer.
_WHICH_NOUN = re.compile(r"\b(?:which|what)(?:\s+(?:is|are|was|were)\s+the)?\s+(?:(?:minimum|maximum|default|latest|"
                         r"oldest|earliest|required|recommended|supported|current|first|last|lowest|highest|min|max)\s+)?"
                         r"([A-Za-z][\w-]*)(?:\s+([A-Za-z][\w-]*))?", re.IGNORECASE)
_VERSION_NOUNS = frozenset({"version", "versions", "release", "releases"})
# "Which git release added / fixed ...?" asks for the release a change is listed under (the page's
# or the heading's version), not a "Git 2.25" an entry mentions in passing.
_CHANGE_VERB = re.compile(r"\b(?:add|added|adds|introduce[sd]?|fix|fixe[sd]|remove[sd]?|deprecate[sd]?|change[sd]?|"
                          r"learn(?:ed|t|s)?|drop(?:ped|s)?|correct(?:ed|s)?|first|start(?:ed)?|began|stop(?:ped)?|"
                          r"bring|brought|ship(?:ped|s)?)\b", re.IGNORECASE)


def asks_for(question: str) -> set[str]:
    wants = set()
    if _NUMBER_Q.search(question):
        wants.add("number")
    if _WHEN_Q.search(question):
        wants.add("date")
    if _WHO_Q.search(question):
        wants.add("name")
    if _HOW_Q.search(question):
        wants.add("code")
    if _LIST_Q.search(question):
        wants.add("list")
    elif _PLURAL_Q.search(question):
        wants.add("plural")
    if _IDENT_Q.search(question):
        wants.add("identifier")
    if which_nouns(question):
        wants.add("labelled")
    if _MIN_Q.search(question):
        wants.add("lower bound")
    elif _MAX_Q.search(question):
        wants.add("upper bound")
    return wants


def holds(unit: Unit, wants: set[str], question: str) -> bool:
    """Whether ``unit`` holds something of the kind the question asks for (and not only the
    question's own words)."""
    asked = set(question.lower().split())
    if "number" in wants and any(m.group().lower() not in asked for m in _NUMBER.finditer(unit.text)):
        return True
    if "date" in wants and any(m.group().lower() not in asked for m in _YEAR.finditer(unit.text)):
        return True
    if "date" in wants and _RELATIVE_TIME.search(unit.text):
        return True
    if "name" in wants and any(not set(m.group().lower().split()) <= asked for m in _NAME.finditer(unit.text)):
        return True
    if "name" in wants and PERSON_FIELD.search(unit.text):
        return True
    if "code" in wants and (unit.kind == "code" or "`" in unit.quote):
        return True
    if "list" in wants and unit.kind == "list":
        return True
    if "plural" in wants and unit.kind == "list" and names_plural(unit, question):
        return True
    if "identifier" in wants and (unit.kind == "code" or new_identifier(unit, question)):
        return True
    return False


def names_plural(unit: Unit, question: str) -> bool:
    """Whether a list names what a plural question asks for ("checks" in "The following checks must
    pass ...: unit tests; lint; type check"), not only some other list on the page."""
    return any(set(tokenize(m.group(1))) & set(tokenize(unit.text)) for m in _PLURAL_Q.finditer(question))


def labelled_number(text: str, question: str) -> bool:
    """Whether ``text`` writes the thing a "which / what <noun>" question names followed by a number
    the question does not have ("RFC 5891" for "Which RFC does idna implement?")."""
    asked = set(question.lower().split())
    for noun in which_nouns(question):
        for found in re.finditer(rf"\b{re.escape(noun)}s?\s+#?(\d[\w.-]*)", text, re.IGNORECASE):
            if found.group(1).lower() not in asked:
                return True
    return False


def which_nouns(question: str) -> list[str]:
    """The words naming what a "which / what" question asks for ("Which RFC": RFC). Of "What is the
    minimum Python version", the thing whose version it is ("Python 3.7+", not "Version 2.0" of a
    license)."""
    nouns = []
    for match in _WHICH_NOUN.finditer(question):
        first, second = match.groups()
        if first.lower() in _STOP_NOUNS:
            continue
        if second and _CHANGE_VERB.fullmatch(second):
            second = None  # "Which version added ...": a verb, not a second noun
        if second and second.lower() in _VERSION_NOUNS and first.lower() not in _VERSION_NOUNS:
            if _CHANGE_VERB.search(question):
                continue  # which release made a change: the release it is listed under (``_version_context``)
            second = None
        nouns += [w for w in (first, second) if w and len(w) > 1 and w.lower() not in _STOP_NOUNS]
    return nouns
_STOP_NOUNS = frozenset({"is", "are", "was", "were", "does", "do", "did", "can", "should", "the", "a", "an", "of",
                         "kind", "kinds", "type", "types", "happens", "has", "have", "will"})


def states_bound(unit: Unit, wants: set[str]) -> bool:
    """Whether ``unit`` states the bound the question asks for ("3.7 or later" for a minimum)."""
    if "lower bound" in wants:
        return _LOWER_BOUND.search(unit.text) is not None
    return "upper bound" in wants and _UPPER_BOUND.search(unit.text) is not None


def new_identifier(unit: Unit, question: str) -> bool:
    """Whether ``unit`` writes as code (a code span, an identifier) a name the question does not."""
    asked = set(tokenize(question))
    spans = [m.group(1) for m in CODE_SPAN.finditer(unit.quote)] + [n.text for n in identifiers(unit.text)]
    return any(set(tokenize(span)) - asked for span in spans)
