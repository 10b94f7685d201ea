"""Bridge expansion: after reading the first pages, the pages they lead to.

A multi-hop question names one thing and asks about another that only the first page names
("the waterfall in the country where the Bubye River is found": the Bubye River page names
Zimbabwe; the question never does). The pages read so far hold the bridge, in two forms:

* **title mentions**: words of the page text that are the title of another catalog page
  (``TitleMentions``: word n-grams looked up in the catalog's map of title keys, ``mention_names``; a title's trailing
  parenthetical, "Kiss and Tell (1945 film)", may be left out of the mention; the mention must
  start with a capital letter or a digit, so "life" in running text does not name the page "Life");
* **wiki links** out of the pages read (``store.markdown_text.find_links`` + ``store.links.resolve``: Markdown links and wikilinks).

Only pages of ``catalog`` are ever candidates: the catalog handed in is the reader's view, so a
page the reader may not read is neither a candidate nor named (nor is its title looked for).

``bridge_candidates`` lists them; ``rank_bridges`` orders them by how well they match the question
(BM25 of the question on the reader's index), which is what "the page that completes the
question" means without a model. ``expansion_query`` is the question plus the bridge titles, which
the model's second-round shortlist ranks with (``navigate.select``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from kb_ai.navigate.records import ReadPage
from kb_ai.offline.lexical import LexicalIndex
from kb_ai.store.catalog import Catalog
from kb_ai.store.links import resolve
from kb_ai.store.markdown_text import find_links
from kb_ai.store.mention_keys import MAX_TITLE_WORDS, MIN_KEY_CHARS, mention_keys  # noqa: F401 (re-exported)

_WORD = re.compile(r"\w+", re.UNICODE)
# Characters of a page looked through for mentions: ~1 ms per 1,000 here, so a huge page costs
# a bounded ~20 ms; a page's bridges are usually early in it (a lead names its subject's links).
MAX_SCAN_CHARS = 20_000


class TitleMentions:
    """The catalog's titles as word sequences, to find which of them a text mentions. The keys
    are the catalog's ``mention_names`` (a ``NameIndex``: hashes in numpy, ~1 MB at 100,000
    pages; made from the keys the catalog snapshot keeps, or cut from the full catalog's for a
    reader's view: no per-title work in a cold process); a text's candidate mentions are looked
    up in one batch."""

    def __init__(self, catalog: Catalog):
        self.keys = catalog.mention_names
        self.longest = self.keys.longest_name_words

    @classmethod
    def of(cls, catalog: Catalog) -> "TitleMentions":
        """Built once per catalog version (and reader's view): kept on the catalog."""
        return catalog.derived.get(("title-mentions",), lambda: cls(catalog))

    def find(self, text: str) -> list[str]:
        """Paths of the pages whose title ``text`` (its first ``MAX_SCAN_CHARS``) mentions, in
        order of first mention; at each position the longest title wins (``New York City`` over
        ``New York``)."""
        found: dict[str, None] = {}
        tokens = [(m.group(0), m.group(0).casefold()) for m in _WORD.finditer(text[:MAX_SCAN_CHARS])]
        # the word sequences that could be a mention (from each word starting with a capital or a
        # digit, longest first), looked up at once; then, left to right, the longest one that
        # names a page at each position
        starts = [(i, [" ".join(t for _, t in tokens[i:i + n]) for n in range(min(self.longest, len(tokens) - i), 0, -1)])
                  for i, (word, _) in enumerate(tokens) if word[0].isupper() or word[0].isdigit()]
        present = iter(self.keys.maybe([key for _, keys in starts for key in keys]))
        after = 0  # the first position not inside a mention found already
        for i, keys in starts:
            hits = [next(present) for _ in keys]
            if i < after:
                continue
            for key, hit in zip(keys, hits, strict=True):
                paths = self.keys.paths(key) if hit else None
                if paths:
                    found.update(dict.fromkeys(paths))
                    after = i + key.count(" ") + 1
                    break
        return list(found)


def linked_pages(page: ReadPage, catalog: Catalog) -> list[str]:
    """Catalog pages a page links to, in order."""
    out: dict[str, None] = {}
    for link in find_links(page.text):
        if link.kind == "definition":
            continue
        target = resolve(page.path, link, None, catalog.wiki_page).page
        if target is not None and target in catalog:
            out[target] = None
    return list(out)


@dataclass(frozen=True)
class BridgeOptions:
    """Which expansion to use (measured on HotpotQA: docs/benchmarks.md, "Multi-hop (issue 16)")."""

    mentions: bool = True
    links: bool = True
    seeds: int = 2  # how many of the pages read (best first) to expand from
    # The link graph first: the pages the seeds link to come before those they only mention
    # (what the model's further round is shown first, and ``expansion_query``'s titles); offline,
    # ``next_round`` adds ``link_preference`` x the linking page's score to a linked page's.
    links_first: bool = True
    link_preference: float = 0.0


def bridge_candidates(pages: list[ReadPage], catalog: Catalog, options: BridgeOptions = BridgeOptions()) -> list[str]:
    """Catalog pages that the first ``options.seeds`` evidence pages read mention or link to,
    not already read, in order of first mention."""
    read = {p.path for p in pages}
    seeds = [p for p in pages if p.is_evidence][: options.seeds]
    mentions = TitleMentions.of(catalog) if options.mentions else None
    linked: dict[str, None] = {}
    found: dict[str, None] = {}
    for page in seeds:
        if options.links:
            (linked if options.links_first else found).update(dict.fromkeys(linked_pages(page, catalog)))
        if mentions is not None:
            found.update(dict.fromkeys(mentions.find(page.text)))
    return [p for p in {**linked, **found} if p not in read and p in catalog]


def rank_bridges(question: str, candidates: Iterable[str], index: LexicalIndex) -> list[tuple[str, float]]:
    """The candidates by descending BM25 score of ``question`` (ties: order of mention)."""
    candidates = list(candidates)
    if not candidates:
        return []
    scores = index.scores(question)  # {path: score}, pages that score 0 left out
    scored = [(p, scores.get(p, 0.0)) for p in candidates]
    order = sorted(range(len(scored)), key=lambda i: (-scored[i][1], i))
    return [scored[i] for i in order]


def expansion_query(question: str, pages: list[ReadPage], catalog: Catalog, options: BridgeOptions = BridgeOptions(),
                    limit: int = 12) -> str:
    """The question plus the titles of the pages the pages read lead to (at most ``limit``)."""
    titles = [catalog.by_path[p].title for p in bridge_candidates(pages, catalog, options)[:limit]]
    return " ".join([question, *titles])


# The offline rounds (measured on HotpotQA: docs/benchmarks.md, "Multi-hop (issue 16)").
LEAD_HITS = 0  # keyword hits read in round 1 before the pages the question names by title (measured: 0, 1, 2)
VIA_WEIGHT = 1.0  # weight of the leading page's score (measured 0, 0.5, 1 on HotpotQA: 89.8%, 90.6%, 90.6%)
SEEDS = 8  # pages of the latest round whose mentions and links are followed (all of them: measured)
# A page a page read links to, over one it only mentions: + this x the linking page's score.
# Measured on HotpotQA compiled with its mentions linked (docs/benchmarks.md, "Autolinks"): 0.5
# read both gold pages for 77.0% of 200 questions, 0 for 78.0%: off until a corpus shows a gain.
LINK_PREFERENCE = 0.0


def first_round(ranked: list[str], question: str, index: LexicalIndex, catalog: Catalog, max_pages: int,
                reserve: int) -> tuple[list[str], list[str]]:
    """Round 1 without a model: the best ``LEAD_HITS`` keyword hits, then the pages the question
    names by title (best match first, each sharing a word with the question), then the other hits,
    leaving ``reserve`` of ``max_pages`` for later rounds. Returns (paths, pages named)."""
    named = [p for p, score in rank_bridges(question, TitleMentions.of(catalog).find(question), index) if score > 0]
    order = list(dict.fromkeys([*ranked[:LEAD_HITS], *named, *ranked[LEAD_HITS:]]))
    limit = max(1, max_pages - reserve)
    chosen = order[:limit]
    return chosen, [p for p in named if p in chosen]


def next_round(question: str, latest: list[ReadPage], read: set[str], index: LexicalIndex, catalog: Catalog,
               max_pages: int, options: BridgeOptions | None = None) -> list[str]:
    """The pages a further round reads without a model: those the best ``options.seeds`` pages
    of the latest round mention or link to, not read yet, ranked by their own BM25 score for the
    question plus that of the best page read that leads to them: a page named by the page that
    matches the question best comes first, and a middle page of a chain, which may share no word
    with the question, is still reached; a page linked from a page read gets ``link_preference``
    x that page's score more (the bridge page is usually one link away); at most ``max_pages``."""
    options = options or BridgeOptions(seeds=SEEDS, link_preference=LINK_PREFERENCE)
    scores = index.scores(question)  # {path: score}, pages that score 0 left out

    def score(path: str) -> float:
        return scores.get(path, 0.0)

    via: dict[str, float] = {}
    for page in [p for p in latest if p.is_evidence][: options.seeds]:
        links = set(linked_pages(page, catalog)) if options.links and options.link_preference else set()
        for path in bridge_candidates([page], catalog, options):
            if path not in read:
                lead = score(page.path) * (VIA_WEIGHT + (options.link_preference if path in links else 0.0))
                via[path] = max(via.get(path, 0.0), lead)
    ranked = sorted(((p, score(p) + via[p]) for p in via), key=lambda ps: -ps[1])
    return [p for p, total in ranked if total > 0][:max_pages]
