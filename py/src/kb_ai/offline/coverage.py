"""Does anything in the wiki match a question, and how strongly? The offline answerer's abstention
decision and the strength it shows, in one place.

The rule (``Coverage.abstain``, ``Coverage.match``):

* **abstain** only when no page (that this reader may read) holds any informative term of the
  question, itself or an equivalent (below): every word is generic, or on no page. Measured across 16 wikis (issue 26,
  docs/benchmarks.md "Abstention on measured evidence"): no share of the question's weight, no
  count of terms held, separates questions asked in a reader's own words from nonsense made of
  the wiki's words — real paraphrases hold as little of it as nonsense does — so any higher cut
  refuses questions the wiki answers, and a false "not covered" costs more than a weak answer;
* a **strong** match when the best page or joined pair holds at least ``COVERED_SHARE`` of the
  question's term weight (or, on a big wiki, ``COVERED_RARE_TERMS`` rare terms' worth: below);
* a **weak** match otherwise: answered with the closest passages, labelled as weak.

How the share is measured:

Each term of the question is weighted by how informative it is (BM25's IDF over the wiki's pages,
from the lexical index, as if the wiki had ``SMOOTH_PAGES`` more pages without the term: in a wiki
of ten pages about one product, its own words are on most pages and would weigh nothing). A term
no page holds is what the question asks about and the wiki lacks ("the shoe size of ...", "the
maximum size of the on-disk cache"): it weighs ``MISSING_WORD`` times a term that a single page
holds. A *generic* word (``store.words.GENERIC_WORDS``: "happened", "made", "still", "whether",
"multiple") counts for a page that holds it and never against one that does not: it names
nothing a page could lack ("Is google-apitools still maintained?"). The match is strong when the best page among the keyword matches, or the
best two pages *that are joined* (one holds the other's title and that title names something:
no more than ``TITLE_JOIN_PAGES`` pages, or ``TITLE_JOIN_SHARE`` of the wiki, hold it, so
"Introduction" or "How it works" joins nothing; or the question names both: "Which band formed
first, Lit or Adorable?", "the director of the film that ..."), hold

* at least ``COVERED_SHARE`` of the question's term weight, or
* on a wiki of ``RARE_TERMS_MIN_PAGES`` pages or more, at least ``COVERED_RARE_TERMS`` terms'
  worth of weight, counted in units of the rarest term (a long question whose many rare terms
  are found is about something the wiki holds, even when some of its words are not). In a small
  wiki every word is rare: the three words of "blue green switch" are not three rare terms.

A page that holds a question term only in other words (``offline.equivalents``: "disable" for
"turn off", "author" for "wrote"), or, for a word no page holds, in a longer form the stemmer does
not join ("connector" for "connect"; the ``FORM_PAGES`` best matches are read), holds it at
``EQUIVALENT_WEIGHT`` (half) of its weight.

Nonsense ("How tall is the Eiffel Tower in bananas?") shares a word or two with some page, never
most of its weight: it gets a weak answer, not a strong one; a question about a subject the wiki
lacks loses that subject's weight; two unrelated pages do not add up ("boiling point" on one page,
"sonnet" on another).

Known limit: the decision is lexical. A question that asks, in words no page uses, for something
a page states is refused; nonsense that shares a word with a page is answered (weakly).

The strength thresholds were calibrated on questions with known truth (docs/benchmarks.md,
"Offline answers and abstention (issue 15)"; benchmarks/bench_answers.py); the abstention rule on
benchmarks/bench_abstention.py's dev sets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from kb_ai.offline.equivalents import EQUIVALENT_WEIGHT, equivalents
from kb_ai.offline.lexical import LexicalIndex
from kb_ai.offline.names import Name, mentions, page_terms, question_names
from kb_ai.offline.text import tokenize
from kb_ai.store.words import GENERIC_WORDS

COVERED_SHARE = 0.60  # share of the question's term weight one page (or a joined pair) must hold
COVERED_RARE_TERMS = 2.8  # ... or this many times the weight of the rarest term the wiki holds
CANDIDATES = 8  # best keyword matches examined (and pairs among them)
TITLE_NAMED = 0.5  # a page is named by the question when this share of its title's terms is in it
MISSING_NAME = 1.5  # a name the question gives that no page mentions weighs this many times its terms
BRIDGE_SEEDS, BRIDGES = 2, 8  # pages of the best matches whose named pages are looked at, and how many each
NAME_PAGES = 24  # pages read, at most, to find one that mentions a name (more holders: taken as mentioned)
PAGES_READ = 64  # pages read for all names of one question, at most (then: taken as mentioned)
MAX_NAMES = 12  # names of one question looked for
SMOOTH_PAGES = 50  # IDF as if the wiki had this many more pages, none holding the term (small wikis: see below)
MISSING_WORD = 1.5  # a word no page holds weighs this many times the rarest word the wiki holds
RARE_TERMS_MIN_PAGES = 200  # the many-rare-terms rule needs a wiki this big (in a small one every word is rare)
FORM_PAGES, FORM_MIN_LETTERS = 3, 5  # best matches looked at for a longer form of a word no page holds
TITLE_JOIN_PAGES, TITLE_JOIN_SHARE = 2, 0.05  # a title more pages hold (and this share of the wiki) joins no pair
_GENERIC_TERMS = frozenset(t for word in GENERIC_WORDS for t in tokenize(word))


@dataclass(frozen=True)
class Coverage:
    """How well the wiki covers a question's terms, and the verdict."""

    share: float  # best share of the question's term weight held by one page or a joined pair
    rare_terms: float  # that weight, in units of the rarest possible term's weight
    pages: tuple[str, ...]  # the page(s) holding it, best first
    missing: tuple[str, ...] = ()  # question words no page (this reader may read) holds
    missing_names: tuple[str, ...] = ()  # names the question gives that no page mentions
    known: int = 0  # informative (not generic) question terms some page holds (or an equivalent of)

    @property
    def covered(self) -> bool:
        """A strong match (``is_covered``)."""
        return is_covered(self.share, self.rare_terms)

    @property
    def abstain(self) -> bool:
        """Nothing matches: no page holds any informative term of the question."""
        return self.known == 0

    @property
    def match(self) -> str:
        return "none" if self.abstain else "strong" if self.covered else "weak"


def is_covered(share: float, rare_terms: float, min_share: float | None = None,
               min_rare_terms: float | None = None) -> bool:
    """A strong match (its thresholds are arguments so a benchmark can trace the curve)."""
    min_share = COVERED_SHARE if min_share is None else min_share
    min_rare_terms = COVERED_RARE_TERMS if min_rare_terms is None else min_rare_terms
    return share >= min_share or rare_terms >= min_rare_terms


def _idf(pages: int, holders: int) -> float:
    return math.log(1 + (pages - holders + 0.5) / (holders + 0.5))


def coverage(index: LexicalIndex, title_of: Callable[[str], str], question: str, *,
             text_of: Callable[[str], str] | None = None, named: Sequence[str] = (),
             names_in: Callable[[str], list[str]] | None = None) -> Coverage:
    """How well the best page, or best joined pair of pages, of ``index`` covers ``question``.
    ``title_of``: a page's title (the catalog's), to tell which pages are joined. ``named``: pages
    the question names by title (looked at besides the keyword matches). ``text_of``: a page's
    text, to tell whether it names what the question names (``offline.names``); without it, names
    are not looked for."""
    terms = list(dict.fromkeys(tokenize(question)))
    _found, missing = index.known_terms(question)
    paths = [h.path for h in index.search(question, CANDIDATES)] if terms else []
    paths += [p for p in dict.fromkeys(named) if p not in paths and _indexed(index, p)][:CANDIDATES]
    if names_in is not None:  # the second hop: pages the best matches name ("the woman who portrayed ...")
        for path in paths[:BRIDGE_SEEDS]:
            paths += [p for p in names_in(path)[:BRIDGES] if p not in paths and _indexed(index, p)]
    if not paths:
        return Coverage(0.0, 0.0, (), tuple(missing))  # known: 0, nothing matches
    n = max(index.page_count(), 1)
    ids = np.array([index.position(p) for p in paths], dtype=np.int64)
    holders: dict[str, tuple[int, frozenset[int]]] = {}  # term -> (pages holding it, which candidates)

    def look_up(term: str) -> tuple[int, frozenset[int]]:
        if term not in holders:
            pages = index.pages_with(term)
            found = (pages[:, None] == ids[None, :]).any(axis=0) if len(pages) else np.zeros(len(ids), dtype=bool)
            holders[term] = (len(pages), frozenset(np.flatnonzero(found).tolist()))
        return holders[term]

    # A word no page holds is what the question asks about and the wiki lacks ("the shoe size of
    # ...", "the maximum size of ... cache"): it weighs more than the rarest word the wiki holds
    # (a generic one counts against no page: below). In a small wiki the topic's own words are on
    # most pages ("bank" on 6 of 10): counted as if the wiki had SMOOTH_PAGES more pages without
    # them, they are not worth nothing.
    rarest = _idf(n + SMOOTH_PAGES, 1)
    weights = {t: min(_idf(n + SMOOTH_PAGES, look_up(t)[0]), rarest) if look_up(t)[0] else MISSING_WORD * rarest
               for t in terms}
    asked = set(terms)
    held = [set(t for t in terms if i in look_up(t)[1]) for i in range(len(paths))]
    # A page that says it in other words ("disable" for "turn off") holds the term in part.
    stand_ins = equivalents(question)
    near = [set(t for t, others in stand_ins.items() if t not in held[i] and any(i in look_up(e)[1] for e in others))
            for i in range(len(paths))]
    page_words: dict[str, str] = {}  # path -> page_terms, read once for forms and names

    def words_of(path: str) -> str:
        if path not in page_words:
            page_words[path] = page_terms(title_of(path), text_of(path)) if text_of is not None else ""
        return page_words[path]

    # A word no page holds may be on a best match in a longer form the stemmer does not join
    # ("connect" on a page that says "connector"): that page holds it in part, like an equivalent.
    if text_of is not None:
        for t in terms:
            if look_up(t)[0] or t in _GENERIC_TERMS or len(t) < FORM_MIN_LETTERS or not t.isalpha():
                continue
            for i in range(min(FORM_PAGES, len(paths))):
                if t not in held[i] and f" {t}" in words_of(paths[i]):
                    near[i].add(t)
    missing_names: list[Name] = []
    names = question_names(question) if text_of is not None else []
    if names:
        missing_names = _names_not_held(index, names, paths, held, words_of, page_words)
    # The thing a question is about weighs more than its other words: a name no page mentions
    # ("Which band has more members, The Futureheads or ...?") is a subject the wiki lacks.
    # No page's holding of its words counts then: they are there in another sense.
    for name in missing_names:
        for t in name.terms:
            if t in weights:
                weights[t] *= MISSING_NAME
            for page_terms_held in held + near:
                page_terms_held.discard(t)
    # A generic word ("still", "whether", "happened") counts for a page that holds it and never
    # against one that does not: it names nothing the page could lack.
    generic = frozenset(t for t in terms if t in _GENERIC_TERMS)
    total = sum(w for t, w in weights.items() if t not in generic)
    held_sets = [frozenset(h) for h in held]
    near_sets = [frozenset(h) for h in near]

    def weight_of(full: frozenset[str], part: frozenset[str]) -> float:
        return sum(weights[t] for t in full) + EQUIVALENT_WEIGHT * sum(weights[t] for t in part - full)

    def share_of(full: frozenset[str], part: frozenset[str]) -> float:
        return weight_of(full, part) / (total + sum(weights[t] for t in full & generic) or 1.0)
    title_terms = [set(tokenize(title_of(p))) for p in paths]
    by_title = set(named)  # pages the question names by their title (parenthetical aside)
    is_named = [p in by_title or (bool(tt) and len(tt & asked) / len(tt) >= TITLE_NAMED)
                for p, tt in zip(paths, title_terms, strict=True)]

    names_few: dict[int, bool] = {}

    def holds_title(i: int, j: int) -> bool:  # page i's text holds every term of page j's title, a name
        if not (title_terms[j] and all(i in look_up(t)[1] for t in title_terms[j])):
            return False
        if j not in names_few:
            names_few[j] = _names_few(index, title_terms[j], n)
        return names_few[j]

    best = max(range(len(paths)), key=lambda i: (share_of(held_sets[i], near_sets[i]), -i))
    best_terms, best_near, pages = held_sets[best], near_sets[best], (paths[best],)
    for i in range(len(paths)):
        for j in range(i + 1, len(paths)):
            if not ((is_named[i] and is_named[j]) or holds_title(i, j) or holds_title(j, i)):
                continue
            union, union_near = held_sets[i] | held_sets[j], near_sets[i] | near_sets[j]
            if share_of(union, union_near) > share_of(best_terms, best_near) + 1e-9:
                best_terms, best_near, pages = union, union_near, (paths[i], paths[j])
    weight = weight_of(best_terms, best_near)
    # Words found speak for a question only when some of what it names is there: when every name
    # it gives is missing, it is about something else, however many of its other words a page
    # holds ("... in the V8 Liftoff compiler", "the default port of the Jenkins web interface").
    lacks_subject = bool(missing_names) and len(missing_names) == len(names)
    rare_terms = 0.0 if lacks_subject or n < RARE_TERMS_MIN_PAGES else weight / rarest
    share = 0.0 if lacks_subject else share_of(best_terms, best_near)
    known = sum(1 for t in terms if t not in generic and any(look_up(e)[0] for e in (t, *stand_ins.get(t, ()))))
    return Coverage(share, rare_terms, pages, tuple(missing), tuple(m.text for m in missing_names), known)


def _names_few(index: LexicalIndex, terms: set[str], pages: int) -> bool:
    """Whether a title's ``terms`` name something: few pages hold them all (at most
    ``TITLE_JOIN_PAGES`` of them, or ``TITLE_JOIN_SHARE`` of the wiki). A title most pages hold
    ("Introduction", "How it works", "Usage") joins nothing."""
    return len(_holding_all(index, terms)) <= max(TITLE_JOIN_PAGES, TITLE_JOIN_SHARE * pages)


def _indexed(index: LexicalIndex, path: str) -> bool:
    try:
        index.position(path)
    except KeyError:
        return False
    return True


def _names_not_held(index: LexicalIndex, names: list[Name], paths: list[str], held: list[set[str]],
                    words_of: Callable[[str], str], read: dict[str, str]) -> list[Name]:
    """The ``names`` a question gives that no page mentions (``offline.names.mentions``). Also
    takes a name's terms out of ``held[i]`` when candidate page ``paths[i]`` holds its words but
    does not name it (the words of "Zach Bogosian" on a page about Zach Crowell). ``words_of``:
    a page's ``page_terms``; ``read``: the pages read so far."""
    def names_it(path: str, name: Name) -> bool:
        """Whether the page names ``name``; past ``PAGES_READ`` pages read, taken as yes."""
        if path not in read and len(read) >= PAGES_READ:
            return True
        return mentions(words_of(path), name)

    candidates = {index.position(p): p for p in paths}
    missing = []
    for name in names[:MAX_NAMES]:
        for i, path in enumerate(paths):
            if set(name.terms) <= held[i] and len(name.terms) > 1 and not names_it(path, name):
                held[i] -= set(name.terms)
        holders = _holders(index, name)
        if holders is None:
            continue  # too many pages hold its words to read them: taken as mentioned
        ordered = sorted(holders, key=lambda pos: (pos not in candidates, pos))
        if len(name.terms) == 1 and ordered:
            continue
        if not any(names_it(index.paths[pos], name) for pos in ordered):
            missing.append(name)
    return missing


def _holding_all(index: LexicalIndex, terms) -> set[int]:
    """Positions of the pages that hold every one of ``terms`` (none for no terms)."""
    found: set[int] | None = None
    for term in terms:
        pages = set(index.pages_with(term).tolist())
        found = pages if found is None else found & pages
        if not found:
            return set()
    return found or set()


def _holders(index: LexicalIndex, name: Name) -> list[int] | None:
    """Positions of the pages that may mention ``name`` (hold all its terms; for a name of three or
    more terms, two adjacent ones), or None when there are more than ``NAME_PAGES``."""
    if len(name.terms) < 3:
        pages = _holding_all(index, name.terms)
    else:
        pages = set().union(*(_holding_all(index, pair) for pair in zip(name.terms, name.terms[1:], strict=False)))
    pages = {p for p in pages if index.paths[p] is not None}
    return sorted(pages) if len(pages) <= NAME_PAGES else None
