"""A model's page selection kept honest by the keyword ranking of the same catalog.

A weak model derails selection in two ways: it names the first lines of the catalog whatever the
question (positional answers), and it misses the page the question names. Both are checked here,
against the keyword ranking of the reader's view (``offline_navigator.lexical_selection``: BM25,
hits under 35% of the best dropped):

- ``positional_reason``: the model's picks are the first N (N >= 2) lines it was shown, or the
  same set (of 2 or more) it picked for a different question in this process (``PickMemory``),
  and the keyword ranking's best page is not among them. Then the picks are not a judgement of
  the question: the selection falls back to the keyword ranking, with a notice.
- ``fuse``: otherwise, when the keyword ranking's best page is not among the picks, the picks
  and the keyword ranking are fused by reciprocal rank fusion (score = sum of 1 / (k + rank) over
  the two lists, k = 60, ties by rank, the model's first), one page more than the model picked
  (within ``max_pages``): a page both name comes first, and the page the question names by its
  words cannot be dropped. Picks that include the keyword ranking's best page are kept as they
  are (the pages left free are a further round's to fill).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

RRF_K = 60
MIN_POSITIONAL = 2  # one page is a plausible answer to any question; a run of lines from the top is not


def fuse(model: list[str], lexical: list[str], limit: int, k: int = RRF_K) -> list[str]:
    """Reciprocal rank fusion of two rankings, at most ``limit`` paths, best first."""
    score: dict[str, float] = {}
    order: dict[str, tuple[int, int]] = {}
    for leg, ranking in enumerate((model, lexical)):
        for rank, path in enumerate(dict.fromkeys(ranking), start=1):
            score[path] = score.get(path, 0.0) + 1.0 / (k + rank)
            order.setdefault(path, (rank, leg))
    return sorted(score, key=lambda p: (-score[p], order[p]))[:limit]


class PickMemory:
    """The page sets a model picked for recent questions of this process (a few dozen), to tell
    a model that answers every question alike. Thread-safe."""

    SIZE = 32

    def __init__(self) -> None:
        self._picks: OrderedDict[str, frozenset[str]] = OrderedDict()
        self._lock = threading.Lock()

    def same_for_other(self, question: str, picks: list[str]) -> bool:
        """Whether ``picks`` (2 or more) were picked for a different question lately; remembers them."""
        key = " ".join(question.lower().split())
        chosen = frozenset(picks)
        with self._lock:
            seen = len(chosen) >= MIN_POSITIONAL and any(q != key and s == chosen for q, s in self._picks.items())
            self._picks[key] = chosen
            self._picks.move_to_end(key)
            while len(self._picks) > self.SIZE:
                self._picks.popitem(last=False)
        return seen


def positional_reason(picks: list[str], shown: list[str], question: str, lexical: list[str],
                      memory: PickMemory) -> str | None:
    """Why ``picks`` look positional rather than chosen for ``question`` (None: they do not).
    ``shown``: the catalog paths in the order the model saw them; ``lexical``: the keyword ranking."""
    repeated = memory.same_for_other(question, picks)
    if not lexical or lexical[0] in picks:
        return None  # the keyword ranking agrees on the best page: nothing to correct
    if len(picks) >= MIN_POSITIONAL and set(picks) == set(shown[:len(picks)]) and len(shown) > len(picks):
        return f"the model named the first {len(picks)} lines of the catalog"
    if repeated:
        return "the model named the same pages it named for a different question"
    return None
