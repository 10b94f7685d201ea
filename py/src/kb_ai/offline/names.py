"""The names a question gives: what it is about, as the words of a page would name it.

A name is a quoted title (``"Big Stone Gap"``), an identifier written as code ("--no-recurse",
"push.useBitmaps", "sign_hash", "getSizeOf") or a run of capitalised words or numbers
("Scott Derrickson", "888 7th Avenue", "Battle of Stones River": lower-case *of*, *the*, *de*,
*von*... may sit inside a run, never at its ends). Punctuation ends a run ("Lawrence, Kansas" is
two names), and so do years and month names (dates are written in many ways: "October 22, 1930",
"22 October 1930"). The question's first word starts a name only when it is not a question word
a common word or a pronoun ("Which", "The", "Are", "Both", "He"...).

``mentions(page_terms, name)`` tells whether a page names it: the page's terms (``tokenize``d:
stemmed, stop words out) hold the name's terms one after the other ("The Battle of the Stones
River" names "Battle of Stones River"); a name of three or more terms is also named by two of its
adjacent terms ("Texas Tech Red Raiders" names "Texas Tech Raiders"; "the Prime Minister"
names "Prime Minister of Australia"), so a near spelling is not taken for a missing subject.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kb_ai.offline.text import tokenize
from kb_ai.store.words import GENERIC_WORDS, STOP_WORDS

# Lower-case words that may join the capitalised words of one name ("Bank of England").
_JOINERS = frozenset("of the de du des la le les von van der den di da del y".split())
_MONTHS = frozenset("january february march april may june july august september october november december".split())
_YEAR = re.compile(r"(?:1\d{3}|20\d{2})s?")
_QUOTED = re.compile(r"[\"“”]([^\"“”\n]{2,100})[\"“”]")
_TOKEN = re.compile(r"[\w'’&.-]+|[^\w\s]", re.UNICODE)
_SENTENCE_END = frozenset(".?!")
# Identifiers a question writes as code: an option ("--no-recurse"), a dotted name
# ("push.useBitmaps", "rsa.newkeys"), a snake_case or camelCase word. Each is a name: the exact
# thing asked about, which a page states by that spelling or not at all. The snake_case form
# alternates runs of underscores and of letters or digits, so it cannot backtrack (``\w*_\w*``
# was quadratic on a long "a_a_a_...").
_IDENTIFIER = re.compile(r"(?<![\w-])--[A-Za-z][\w-]+|(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?![\w.]*\w)"
                         r"|(?<!\w)[A-Za-z][A-Za-z0-9]*(?:_+[A-Za-z0-9]+)+(?!\w)|(?<!\w)[a-z]+[A-Z]\w*")
_PRONOUNS = frozenset("i you he she it we they his her its our their this that these those there here".split())


@dataclass(frozen=True)
class Name:
    text: str  # as the question writes it
    terms: tuple[str, ...]  # its terms (``tokenize``), in order


def question_names(question: str) -> list[Name]:
    """The names ``question`` gives, in order, each once (see the module's docstring)."""
    found = [m.group(1) for m in _QUOTED.finditer(question)]
    found += [m.group() for m in _IDENTIFIER.finditer(question) if _is_identifier(m.group())]
    run: list[str] = []

    def end_run() -> None:
        while run and run[-1].lower() in _JOINERS:
            run.pop()
        if run:
            text = " ".join(run)
            found.append(text[:-1] if text.endswith(".") and len(run[-1]) > 4 else text)  # a full stop, not "Jr."
        run.clear()

    sentence_start = True
    for token in _TOKEN.findall(question):
        if not token[0].isalnum():
            end_run()
            sentence_start = token in _SENTENCE_END
            continue
        word = token.lower().rstrip(".")
        capital = (token[0].isupper() or token[0].isdigit()) and word not in _MONTHS and not _YEAR.fullmatch(word)
        if sentence_start and (word in STOP_WORDS or word in GENERIC_WORDS or word in _PRONOUNS):
            capital = False
        if capital:
            run.append(token)
        elif run and word in _JOINERS:
            run.append(token)
        else:
            end_run()
        sentence_start = False
    end_run()
    names: dict[tuple[str, ...], Name] = {}
    for text in found:
        terms = tuple(tokenize(text))
        if terms and not all(t.isdigit() for t in terms) and terms not in names:
            names[terms] = Name(text, terms)
    return list(names.values())


def identifiers(text: str) -> list[Name]:
    """The identifiers written as code in ``text`` (options, dotted names, snake_case, camelCase)."""
    found = [m.group() for m in _IDENTIFIER.finditer(text) if _is_identifier(m.group())]
    return [Name(t, tuple(tokenize(t))) for t in dict.fromkeys(found) if tokenize(t)]


def _is_identifier(text: str) -> bool:
    """Not an abbreviation written with dots ("e.g", "U.S"): some part is 3+ characters long."""
    return text.startswith("--") or "." not in text or max(len(part) for part in text.split(".")) >= 3


def page_terms(*texts: str) -> str:
    """A page's terms as one string to look names up in (``mentions``): its title, its body..."""
    return " " + " | ".join(" ".join(tokenize(text)) for text in texts) + " "


def mentions(terms: str, name: Name) -> bool:
    """Whether a page whose ``page_terms`` are ``terms`` names ``name`` (see the docstring)."""
    if len(name.terms) == 1:
        return f" {name.terms[0]} " in terms
    if f" {' '.join(name.terms)} " in terms:
        return True
    return len(name.terms) >= 3 and any(f" {a} {b} " in terms for a, b in zip(name.terms, name.terms[1:], strict=False))
