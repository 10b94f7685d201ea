"""How likely an answer unit is to hold what a question asks: a logistic model over general features.

Each candidate unit of the pages read gets a vector of ``FEATURES`` (every one general: shares of
the question's term weight, the kind of thing the question asks for and whether the unit holds
it, the unit's kind and size, where it sits on its page, the page's rank). Its score is
``sigmoid(w · x)`` with the weights of ``scorer_weights.json``, shipped as data and written by
``benchmarks/fit_scorer.py`` (a logistic regression fitted on labelled units of a declared dev
split: a unit's label is the share of the gold answer strings it holds). ``selection()`` gives the
four parameters of the greedy choice (``offline.extractive``), fitted by the same script: the
floor of the bonus for question terms no earlier pick covered (``new_floor``), the bonus for a unit
of a page an earlier pick names by its title (``bridge``), and how many units of one page an
answer quotes at most (``per_page``), the share of the best unit's score a unit needs to be
quoted at all (``min_share``).

Features (each in [0, 1]):

* ``cover``: the share of the question's term weight (IDF over the candidate units, times the
  term's weight in the question) that the unit holds; ``bm25``: its BM25 score over the candidate
  units, divided by the best one's; ``best``: it has the best BM25 score; ``cover_top``: its
  ``cover`` divided by the best candidate's; ``cover_asked``: ``cover_top`` when the unit holds
  something of what the question asks for, else 0;
* ``asked_<kind>``: the question asks for ``kind`` (``offline.asked``: number, date, name, code,
  list, identifier, bound, version) and the unit holds one; ``asked_none``: the question asks
  for something and the unit holds nothing of it; ``asked_share``: the share of the kinds asked
  for that it holds; ``code_unasked``: code, and the question asks
  for neither code nor a name written as code;
* ``kind_<kind>``: the unit's kind (sentence, pair: a sentence with its neighbour, list-item,
  definition, heading, table-row, list, code, code with its lead-in);
* ``length``: its size, up to ``units.MAX_UNIT_CHARS``; ``short``: under eight words;
* ``first``: the first unit of its page; ``position``: how far down its page it starts;
  ``heading``: the share of the question's term weight the heading it sits under holds;
  ``title``: the same for its page's title;
* ``page_first``, ``page_rank``: its page is the best ranked; 1 / (1 + the page's rank);
* ``question``: the unit is itself a question (it ends in "?": it states nothing);
  ``lead_in``: it ends in ":" (it introduces what it does not show); ``refers_back``: it opens
  with a pronoun.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

FEATURES: tuple[str, ...] = (
    "bias", "cover", "cover_top", "cover_asked", "bm25", "best",
    "asked_number", "asked_date", "asked_name", "asked_code", "asked_list", "asked_identifier", "asked_bound",
    "asked_version", "asked_none", "asked_share", "code_unasked",
    "kind_sentence", "kind_pair", "kind_list-item", "kind_definition", "kind_heading", "kind_table-row",
    "kind_list", "kind_code", "kind_code-lead",
    "length", "short", "first", "position", "heading", "title", "page_first", "page_rank",
    "question", "lead_in", "refers_back",
)
WEIGHTS_FILE = Path(__file__).with_name("scorer_weights.json")


@lru_cache(maxsize=1)
def model() -> tuple[tuple[float, ...], dict[str, float]]:
    """The shipped weights, in ``FEATURES`` order, and the selection parameters (read once)."""
    data = json.loads(WEIGHTS_FILE.read_text(encoding="utf-8"))
    weights = data["weights"]
    missing = [name for name in FEATURES if name not in weights]
    if missing:
        raise ValueError(f"{WEIGHTS_FILE.name} has no weight for {', '.join(missing)}")
    return tuple(float(weights[name]) for name in FEATURES), {k: float(v) for k, v in data["selection"].items()}


def score(features: dict[str, float]) -> float:
    """``sigmoid(w · x)`` for a unit's features (a name left out counts 0)."""
    weights, _selection = model()
    logit = sum(w * features.get(name, 0.0) for name, w in zip(FEATURES, weights, strict=True))
    return 1.0 / (1.0 + math.exp(-max(min(logit, 30.0), -30.0)))


def selection() -> dict[str, float]:
    """The greedy choice's fitted parameters: ``new_floor``, ``bridge``, ``per_page``, ``min_share``."""
    return model()[1]
