"""The k best of a score array, in O(n) numpy whatever the ties.

The order is by descending score, then by ascending path (Python's ``str`` order, code point by
code point): the order ``sorted(hits, key=lambda i: (-score[i], paths[i]))[:k]`` gives. Only the
pages tied with the k-th score need the path at all, and of those only as many as fill the k: a
few are compared as strings; many (every page of a wiki of look-alike pages ties on the
question's common words) are chosen by a rank of each position's path, computed once per index
(``PathRank``) and partitioned in numpy, never sorted one by one in Python.
"""

from __future__ import annotations

import numpy as np

# Up to this many pages tied at the k-th score are ordered as strings (cheaper than a rank, and
# no rank is computed); past it, by the rank.
FEW_TIED = 512


class PathRank:
    """Each position's place in the sorted order of its path (a position without a path last),
    computed at the first call and kept while the paths are the same length (positions are only
    ever appended; a page taken out never scores, so its rank does not matter)."""

    def __init__(self) -> None:
        self._rank: np.ndarray | None = None

    def of(self, paths: list[str | None]) -> np.ndarray:
        if self._rank is None or len(self._rank) != len(paths):
            live = [i for i, p in enumerate(paths) if p is not None]
            order = sorted(live, key=paths.__getitem__)  # stable: equal paths by position
            rank = np.full(len(paths), len(paths), dtype=np.int64)
            rank[np.asarray(order, dtype=np.int64)] = np.arange(len(order), dtype=np.int64)
            self._rank = rank
        return self._rank


def top_k(scores: np.ndarray, k: int, paths: list[str | None], rank: PathRank) -> list[int]:
    """Positions of the ``k`` best pages scoring > 0: by descending score, ties by path."""
    hits = np.nonzero(scores > 0)[0]
    if len(hits) > k:
        part = scores[hits]
        kth = np.partition(part, len(hits) - k)[len(hits) - k]
        above, tied = hits[part > kth], hits[part == kth]
        need = k - len(above)  # >= 1: fewer than k pages score above the k-th
        if len(tied) > need:
            tied = _first_by_path(tied, need, paths, rank)
        hits = np.sort(np.concatenate([above, tied]))  # by position, as equal keys were kept
    return sorted(hits.tolist(), key=lambda i: (-float(scores[i]), paths[i]))


def _first_by_path(tied: np.ndarray, need: int, paths: list[str | None], rank: PathRank) -> np.ndarray:
    """The ``need`` positions of ``tied`` whose paths come first."""
    if len(tied) <= FEW_TIED:
        return np.asarray(sorted(tied.tolist(), key=paths.__getitem__)[:need], dtype=np.int64)
    ranks = rank.of(paths)[tied]
    return tied[np.argpartition(ranks, need - 1)[:need]]
