"""What is computed from one catalog version, kept on that version.

Every artefact derived from a catalog — a reader's view of it, its keyword index (or a topic
subset's mask of its root's index), its topic index, the catalog of some chosen topics' pages —
is kept in the catalog object's own ``Derived`` map. It lives exactly as long as that catalog
version: when ``CatalogStore`` hands out a new catalog (master-index.md changed), nothing of the
old one is found again, and all of it goes with the old object. One rule bounds how much one
version keeps: at most ``Derived.KEPT`` artefacts, the least recently used going first (kinds of
readers and chosen topic sets come and go; the catalog's own index is used by every question).

Keys are tuples whose first element names the kind of artefact (``("lexical", cache)``,
``("topic-index", cache)``, ...). Builds run in worker threads: each key is built once (a
thread that misses while another builds the same key waits for it); different keys build at
the same time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable, TypeVar

from kb_ai.heap import release_free_memory

T = TypeVar("T")


class Derived:
    """Artefacts computed from one catalog version, by key, least recently used evicted first."""

    # Per version: the full catalog's index and topic index, a few readers' views (each a catalog
    # with its own index), the topic subsets asked about lately. (Before: 8 keyword indexes in
    # all, 32 subset masks, 16 topic indexes, 64 subsets per topic index, views unbounded.)
    KEPT = 16

    def __init__(self) -> None:
        self._items: OrderedDict[Hashable, object] = OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[Hashable, threading.Lock] = {}

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        """The artefact under ``key``, built by ``build()`` when missing (once, however many
        threads ask at the same time; outside the map's lock, so other keys are not held up)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]  # type: ignore[return-value]
            building = self._building.setdefault(key, threading.Lock())
        with building:
            with self._lock:
                if key in self._items:  # built by the thread this one waited for
                    self._items.move_to_end(key)
                    return self._items[key]  # type: ignore[return-value]
            try:
                value = build()
            except BaseException:
                with self._lock:
                    self._building.pop(key, None)
                raise
            with self._lock:  # stored and no longer building in one step: no thread builds it again
                self._items[key] = value
                self._building.pop(key, None)
                while len(self._items) > self.KEPT:
                    self._items.popitem(last=False)
            release_free_memory()  # what the build allocated and freed (kb_ai/heap.py)
        return value

    def __len__(self) -> int:
        return len(self._items)
