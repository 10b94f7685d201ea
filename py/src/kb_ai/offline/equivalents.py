"""Different words for the same thing: a question says "turn off", "silence" or "listen on all
addresses" where the documentation says "disable", "suppress" or "bind to all IPs".

``EQUIVALENT_GROUPS`` is a small, hand-written table of words and phrasal verbs that technical
documentation uses interchangeably. ``query_weights(question)`` is what every offline ranking of a
question reads (the keyword index's page ranking, the coverage verdict, the extractive answer's
units): the question's own terms at weight 1, and the single-word equivalents of the words and
phrases it uses at ``EQUIVALENT_WEIGHT``. The question's word still counts in full; a page that
holds only an equivalent counts less. ``equivalents(question)`` gives, per question term, the
terms that stand in for it (the coverage verdict credits a page holding one of them with
``EQUIVALENT_WEIGHT`` of that term's weight).

Only single-word members are looked for in pages: a phrasal verb's own words ("turn", "off",
"shut") say little alone. Phrases are matched in the question word by word on stems, stop words
included ("turn off", "shut down", "try again"), longest first, so "turn on" and "turn off" go
to different groups.

The table is deliberately small and general (no product names): every group is a synonym set a
reader of software documentation would accept both ways. Adding a group changes rankings and the
abstention verdict; measure with benchmarks/bench_answers.py and benchmarks/bench_outside.py.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from functools import lru_cache
from types import MappingProxyType

from kb_ai.offline.text import stem_words, tokenize
from kb_ai.store.words import words as _words

EQUIVALENT_WEIGHT = 0.5

EQUIVALENT_GROUPS: tuple[tuple[str, ...], ...] = (
    ("disable", "deactivate", "turn off", "switch off", "silence", "suppress"),
    ("enable", "activate", "turn on", "switch on"),
    ("remove", "delete", "erase", "uninstall"),
    ("start", "launch", "run", "spin up", "fire up"),
    ("run", "execute", "invoke"),
    ("stop", "kill", "terminate", "halt", "shut down", "shutdown"),
    ("listen", "bind"),
    ("address", "ip", "host", "hostname"),
    ("error", "exception", "failure"),
    ("raise", "throw"),
    ("create", "generate", "construct"),
    ("show", "display", "print"),
    ("configure", "set up", "setup"),
    ("download", "fetch", "retrieve"),
    ("skip", "ignore", "bypass"),
    ("update", "upgrade"),
    ("directory", "folder", "dir"),
    ("parameter", "argument", "param", "arg"),
    ("option", "flag"),
    ("password", "passphrase"),
    ("exit", "quit"),
    ("find", "search", "locate", "look up", "lookup"),
    ("retry", "try again"),
    ("timeout", "time out"),
    ("speed up", "accelerate"),
    ("log in", "login", "sign in", "authenticate"),
    ("log out", "logout", "sign out"),
    ("memory", "ram"),
    ("author", "wrote", "written by", "writer"),
    # a comparison's adjective asks for the measure a page states ("Which plan is cheaper?": "costs $12")
    ("cost", "price", "pricing", "cheap", "cheaper", "cheapest", "expensive", "fee"),
)


@lru_cache(maxsize=1)
def _table() -> tuple[dict[tuple[str, ...], frozenset[str]], int]:
    """Each member as its stems (the question is matched on these) -> the terms of the other
    single-word members of its groups; and the longest member's length in words."""
    table: dict[tuple[str, ...], set[str]] = {}
    for group in EQUIVALENT_GROUPS:
        singles = {term for member in group if len(member.split()) == 1 for term in tokenize(member)}
        for member in group:
            own = set(tokenize(member))
            table.setdefault(tuple(stem_words(member)), set()).update(singles - own)
    longest = max(len(key) for key in table)
    return {key: frozenset(value) for key, value in table.items()}, longest


@lru_cache(maxsize=1024)
def equivalents(question: str) -> Mapping[str, frozenset[str]]:
    """Each term of ``question`` (as ``tokenize`` gives it) that the table knows -> the terms
    that stand in for it, leaving out terms the question has itself."""
    table, longest = _table()
    words = _words(html.unescape(question))
    stems = stem_words(question)
    asked = set(tokenize(question))
    found: dict[str, set[str]] = {}
    i = 0
    while i < len(stems):
        for size in range(min(longest, len(stems) - i), 0, -1):
            key = tuple(stems[i:i + size])
            others = table.get(key)
            if others is None:
                continue
            extra = others - asked
            if extra:
                for term in tokenize(" ".join(words[i:i + size])):
                    if term in asked:
                        found.setdefault(term, set()).update(extra)
            i += size
            break
        else:
            i += 1
    return MappingProxyType({term: frozenset(extra) for term, extra in found.items()})  # cached: read-only


def query_weights(question: str) -> list[tuple[str, float]]:
    """The terms a question is ranked by: its own (weight 1, a repeated term repeated, as BM25
    counts it) and then each equivalent once at ``EQUIVALENT_WEIGHT``."""
    own = tokenize(question)
    extra = dict.fromkeys(t for others in equivalents(question).values() for t in sorted(others))
    return [(t, 1.0) for t in own] + [(t, EQUIVALENT_WEIGHT) for t in extra]
