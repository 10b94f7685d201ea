"""Names of catalog pages looked up without a dict of 100,000 strings.

``NameIndex`` answers "which pages (in catalog order) have this name", where a page's names
are computed from its entry (a title key, a file stem, a path). It keeps two numpy arrays —
the names' 64-bit hashes, sorted, and the page positions — about 12 bytes a name, where a dict
of name strings to lists of paths took ~200 (at 100,000 articles: ~1 MB instead of ~20 MB per
map). A lookup finds the positions under the name's hash and recomputes the names of those
pages, so a hash collision is never a match: the answers are exactly the dict's.

It is a read-only ``Mapping`` (name -> paths, or the first path with ``first=True``):
``in``, ``[]``, ``get`` are fast; iterating recomputes every name (slow, for tests and rare
tools). ``many`` looks up a batch of names with one numpy search (``navigate/bridge.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np


class NameIndex(Mapping):
    """Name -> the paths of the ``entries`` with that name, in catalog order (``first``: the first
    path only). ``names_of(entry)`` gives an entry's names (each once)."""

    def __init__(self, entries: Sequence, names_of: Callable[[object], Iterable[str]], *, first: bool = False):
        self._entries = entries
        self._names_of = names_of
        self._first = first
        named = [(name, position) for position, entry in enumerate(entries) for name in names_of(entry)]
        h = np.fromiter((hash(name) for name, _ in named), dtype=np.int64, count=len(named))
        order = np.argsort(h, kind="stable")  # equal hashes keep catalog order
        self._hashes = h[order]
        self._positions = np.fromiter((p for _, p in named), dtype=np.int32, count=len(named))[order]
        # words in the longest name (a mention finder's longest n-gram)
        self.longest_name_words = max((name.count(" ") + 1 for name, _ in named), default=0)

    @classmethod
    def one_each(cls, entries: Sequence, names: Sequence[str | None], names_of: Callable[[object], Iterable[str]]) -> "NameIndex":
        """The index of entries with one name each, given in entry order (None: no name; a path
        per page): built without a call per entry (~20 ms for 100,000 names, not ~70).
        ``names_of`` must give the same names (it checks lookups)."""
        index = cls.__new__(cls)
        index._entries, index._names_of, index._first = entries, names_of, False
        positions = [i for i, name in enumerate(names) if name is not None]
        h = np.fromiter(map(hash, (names[i] for i in positions)), dtype=np.int64, count=len(positions))
        order = np.argsort(h, kind="stable")
        index._hashes = h[order]
        index._positions = np.array(positions, dtype=np.int32)[order]
        index.longest_name_words = max((names[i].count(" ") + 1 for i in positions), default=0)
        return index

    @classmethod
    def from_names(cls, entries: Sequence, names: Sequence[str], positions: Sequence[int],
                   names_of: Callable[[object], Iterable[str]], longest_name_words: int) -> "NameIndex":
        """The index of ``names[i]`` at ``positions[i]`` (entry positions, ascending), names
        computed already (saved with the catalog snapshot): only hashed here (~20 ms for 100,000
        names, not the ~0.4 s of computing them). ``names_of`` must give the same names (it
        checks every hit: a name not really an entry's is never answered); ``longest_name_words``
        is the most words in a name (saved with them)."""
        index = cls.__new__(cls)
        index._entries, index._names_of, index._first = entries, names_of, False
        h = np.fromiter(map(hash, names), dtype=np.int64, count=len(names))
        order = np.argsort(h, kind="stable")
        index._hashes = h[order]
        index._positions = np.asarray(positions, dtype=np.int32)[order]
        index.longest_name_words = longest_name_words
        return index

    def restricted_to(self, entries: Sequence) -> "NameIndex | None":
        """This index cut down to ``entries``, some of this index's entries (the same objects,
        in the same order: a reader's view, a topic's pages), without computing a name: the
        names of the other entries are left out (a hidden page's name is never an answer).
        None when ``entries`` are not such a part."""
        position_of = {id(entry): i for i, entry in enumerate(self._entries)}
        old = np.fromiter((position_of.get(id(e), -1) for e in entries), dtype=np.int64, count=len(entries))
        if len(old) and (old.min() < 0 or (len(old) > 1 and bool((np.diff(old) <= 0).any()))):
            return None
        new_of_old = np.full(len(self._entries), -1, dtype=np.int32)
        new_of_old[old] = np.arange(len(old), dtype=np.int32)
        moved = new_of_old[self._positions]
        keep = moved >= 0
        index = NameIndex.__new__(NameIndex)
        index._entries, index._names_of, index._first = entries, self._names_of, self._first
        index._hashes = self._hashes[keep]  # still sorted; equal hashes still in catalog order
        index._positions = moved[keep]
        index.longest_name_words = self.longest_name_words  # an upper bound: only a longer scan
        return index

    def _verified(self, name: str, lo: int, hi: int) -> list[int]:
        entries, names_of = self._entries, self._names_of
        return [p for p in self._positions[lo:hi].tolist() if name in names_of(entries[p])]

    def _paths(self, name: str, lo: int, hi: int) -> list[str]:
        return [self._entries[p].path for p in self._verified(name, lo, hi)]

    def _range(self, name: str) -> tuple[int, int]:
        h = hash(name)
        lo = int(np.searchsorted(self._hashes, h, side="left"))
        hi = int(np.searchsorted(self._hashes, h, side="right"))
        return lo, hi

    def positions(self, name: str) -> list[int]:
        """The positions (in ``entries``) of the entries named ``name``, in order."""
        lo, hi = self._range(name)
        return self._verified(name, lo, hi) if hi > lo else []

    def first_positions(self, names: Sequence[str]) -> list[int | None]:
        """The first position of each name (None for a name no entry has), looked up together."""
        lo, hi = self._ranges(names)
        out: list[int | None] = []
        for name, a, b in zip(names, lo, hi, strict=True):
            found = self._verified(name, a, b) if b > a else []
            out.append(found[0] if found else None)
        return out

    def _ranges(self, names: Sequence[str]) -> tuple[list[int], list[int]]:
        h = np.fromiter((hash(n) for n in names), dtype=np.int64, count=len(names))
        return (np.searchsorted(self._hashes, h, side="left").tolist(),
                np.searchsorted(self._hashes, h, side="right").tolist())

    def maybe(self, names: Sequence[str]) -> list[bool]:
        """For each name, whether an entry may have it (its hash is here: one numpy search for the
        batch). False is certain; True is checked by ``paths`` (a collision has no paths)."""
        if not names:
            return []
        lo, hi = self._ranges(names)
        return [b > a for a, b in zip(lo, hi, strict=True)]

    def paths(self, name: str) -> list[str]:
        """The paths of the pages named ``name``, in catalog order ([] for none)."""
        lo, hi = self._range(name)
        return self._paths(name, lo, hi) if hi > lo else []

    def many(self, names: list[str]) -> list[list[str]]:
        """``paths`` of each name, looked up together (one numpy search for the batch)."""
        if not names:
            return []
        lo, hi = self._ranges(names)
        return [self._paths(n, a, b) if b > a else [] for n, a, b in zip(names, lo, hi, strict=True)]

    # -- Mapping ------------------------------------------------------------------------------------

    def __getitem__(self, name: str):
        if not isinstance(name, str):
            raise KeyError(name)
        found = self.paths(name)
        if not found:
            raise KeyError(name)
        return found[0] if self._first else found

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and bool(self.paths(name))

    def __iter__(self) -> Iterator[str]:
        seen: set[str] = set()
        for entry in self._entries:
            for name in self._names_of(entry):
                if name not in seen:
                    seen.add(name)
                    yield name

    def __len__(self) -> int:
        return sum(1 for _ in self)
