"""The title keys a text can mention a catalog page by (``navigate/bridge.py`` finds them in
page text and questions).

A page is mentioned by its title's ``title_key``, by that of its title without a trailing
parenthetical ("Kiss and Tell (1945 film)" -> "kiss and tell") and by those of its ``aliases:``
(``CatalogEntry.aliases``); a key longer than
``MAX_TITLE_WORDS`` words, shorter than ``MIN_KEY_CHARS`` characters or made only of stop words is
not looked for. Computing them costs ~4 µs a page (~0.4 s at 100,000 pages), so the catalog
snapshot keeps them (``store/snapshot.py``) and a cold process only hashes them
(``Catalog.mention_names``). A change to what ``mention_keys`` gives must bump
``store/snapshot.py: SNAPSHOT_FORMAT`` (a snapshot keeps its keys; a hit is always checked
against the page's keys computed now, so an old key never names a wrong page, but a new key
would be missing until the snapshot is rewritten).
"""

from __future__ import annotations

import re

from kb_ai.store.words import STOP_WORDS, title_key

MAX_TITLE_WORDS = 8  # longer titles are not looked for as mentions
MIN_KEY_CHARS = 3
_PARENTHETICAL = re.compile(r"\s*\([^()]*\)\s*$")


def mention_keys(entry) -> set[str]:
    """The title keys a text can mention ``entry`` (a catalog entry) by (see the docstring)."""
    keys = set()
    for variant in {entry.title, _PARENTHETICAL.sub("", entry.title), *getattr(entry, "aliases", ())}:
        key = title_key(variant)
        words = key.split()
        if (not words or len(words) > MAX_TITLE_WORDS or len(key) < MIN_KEY_CHARS
                or all(w in STOP_WORDS for w in words)):
            continue
        keys.add(key)
    return keys
