"""Offline navigation: BM25 selection and extractive answers. Useful, fast, and it says what it is.

Every step is keyword work on page text (index loads and builds, searches, sentence scoring):
it runs in a worker thread, never on the event loop a server shares between readers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import AsyncIterator

import anyio

from kb_ai.llm.usage import UsageMeter
from kb_ai.navigate import bridge
from kb_ai.navigate.navigator import LexicalIndexCache
from kb_ai.navigate.records import ReadPage, Selection, Turn
from kb_ai.offline.compare import ComparedPage, derive
from kb_ai.offline.coverage import Coverage, coverage
from kb_ai.offline.extractive import PageText, best_units
from kb_ai.offline.feedback import expanded_query
from kb_ai.offline.lexical import page_body, page_terms
from kb_ai.offline.units import Unit
from kb_ai.offline.text import tokenize
from kb_ai.store.catalog import Catalog
from kb_ai.store.links import resolve
from kb_ai.store.markdown_text import find_links
from kb_ai.store.words import title_key

RELATIVE_CUTOFF = 0.35  # a page scoring under 35% of the best match is noise, not a second source
# The answer's text is the answer only: that it is offline (``usage.mode``, the ``offline`` event
# of a model that failed) and the notices travel beside it, for each interface to show its way.
NOT_COVERED = "The wiki does not cover this. No page holds enough of the question's informative words."
# A keyword match under ``offline.coverage.COVERED_SHARE``: answered, and said to be weak.
WEAK_MATCH = "Weak keyword match: the closest passages, not a sure answer."
RELATED_PAGES = 3  # closest pages shown with an abstention (related, not an answer)


def lexical_selection(index, question, max_pages: int, method: str) -> Selection:
    """The best ``max_pages`` keyword hits of ``question`` (a question, or weighted terms:
    ``offline.feedback``), less those scoring under ``RELATIVE_CUTOFF`` of the best."""
    hits = index.search(question, max_pages)
    if hits:
        top = hits[0].score
        hits = [h for h in hits if h.score >= top * RELATIVE_CUTOFF]
    return Selection(paths=[h.path for h in hits], method=method)


def answer_lines(unit: Unit, text: str | None = None) -> list[str]:
    """One unit as lines of the answer (``text``: as shown, its subject named; default the
    unit's text): a bullet ending with its citation; code as a code span, or (several lines) a
    fenced block under the bullet."""
    cite = f"[{unit.title}]({unit.path})"
    if unit.kind != "code":
        return [f"- {text or unit.text} {cite}"]
    lead = f"{unit.lead} " if unit.lead else ""
    if "\n" not in unit.text and "`" not in unit.text:
        return [f"- {lead}`{unit.text}` {cite}"]
    longest = max((len(run) for run in re.findall(r"~+", unit.text)), default=0)
    fence = "~" * max(3, longest + 1)  # longer than any run of tildes in the code: it cannot close early
    head = f"- {lead}{cite}" if lead else f"- {cite}:"
    return [head, "", f"  {fence}", *[f"  {line}" for line in unit.text.splitlines()], f"  {fence}", ""]


def _is_saved_answer(entry) -> bool:
    """A page filed by ``ask --save`` (navigation, never evidence): its title is a question
    someone asked, not a subject to suggest."""
    return bool(entry.depends) or entry.path.startswith("answers/")


def _folder(path: str) -> str:
    return path.rpartition("/")[0]


QUESTION_WORDS = frozenset("why how what when where which who whom whose is are was were can could do does did "
                           "should would will shall may might must has have had".split())
MAX_SUBJECT_WORDS = 8  # a title longer than this is a sentence, not a subject to ask about


def about(title: str) -> str | None:
    """The follow-up question about a page, or None when its title makes none. A title that is
    a question (it ends with "?" or starts with a question word: "Why not pip", "How to
    migrate") is the question, with its "?"; a title that names a subject (a noun phrase: at
    most MAX_SUBJECT_WORDS words, not ending as a sentence does) gives "What does the wiki say
    about <title>?"; a title that is a sentence gives none."""
    title = " ".join(title.split()).rstrip(":;, ")
    words = title.split()
    if not words:
        return None
    if title.endswith("?") or words[0].lower().strip("'\"") in QUESTION_WORDS:
        return title.rstrip(".!?") + "?"
    if len(words) > MAX_SUBJECT_WORDS or title.endswith((".", "!")):
        return None
    return f"What does the wiki say about {title}?"


def related_questions(index, question: str, pages: list[ReadPage], catalog: Catalog, count: int = 3) -> list[str]:
    """Follow-up questions about pages related to the answer: first the pages linked from the
    quoted passages (nearest link first), then from the rest of the pages quoted, then the best
    keyword matches of the question and the passages in the quoted pages' topic folders, then
    those folders' other pages, then keyword matches elsewhere scoring at least RELATIVE_CUTOFF of
    the best. Never a page already read, a saved answer,
    a page whose title the question already names, or two suggestions about the same title."""
    evidence = [p for p in pages if p.is_evidence]
    units = [e.unit for e in best_units(question, [PageText(p.path, p.title, p.text) for p in evidence])]
    by_path = {p.path: p for p in evidence}
    candidates: list[tuple[int, int, str]] = []  # (tier, distance, path)
    for unit in units:
        page = by_path[unit.path]
        for link in find_links(page.text):
            target = resolve(page.path, link, lambda rel: rel in catalog, catalog.wiki_page).page
            if target is None or link.image:
                continue
            distance = 0 if unit.start <= link.start < unit.end else abs(link.start - unit.start)
            candidates.append((0 if distance < 2_000 else 1, distance, target))
    # Near the quoted passages: pages of the same topic folder (keyword matches first, then the
    # folder's other pages); a match from elsewhere only when it scores at least RELATIVE_CUTOFF
    # of the best (a long release-notes page matching common words is no follow-up of a crypto page).
    hits = index.search(question + " " + " ".join(u.text for u in units), 12)
    top = hits[0].score if hits else 0.0
    folders = {_folder(u.path) for u in units} or {_folder(p.path) for p in evidence}
    for rank, h in enumerate(hits):
        if _folder(h.path) in folders:
            candidates.append((2, rank, h.path))
        elif h.score >= top * RELATIVE_CUTOFF:
            candidates.append((4, rank, h.path))
    candidates += [(3, n, entry.path) for n, entry in enumerate(catalog.entries) if _folder(entry.path) in folders]
    asked = set(tokenize(question))
    read = {p.path for p in pages}
    seen_titles = {title_key(p.title) for p in pages}
    questions: list[str] = []
    for _tier, _distance, path in sorted(candidates):
        entry = catalog.by_path.get(path)
        if entry is None or path in read or _is_saved_answer(entry):
            continue
        key = title_key(entry.title)
        terms = set(tokenize(entry.title))
        if not key or key in seen_titles or (terms and terms <= asked):
            continue
        follow_up = about(entry.title)
        if follow_up is None:
            continue
        seen_titles.add(key)
        questions.append(follow_up)
        if len(questions) == count:
            break
    return questions


def question_coverage(index, catalog: Catalog, question: str, wiki_dir: Path | None) -> Coverage:
    """``offline.coverage`` of ``question`` over the reader's ``catalog``: the pages the question
    names by title are looked at too, and (with ``wiki_dir``) page text tells whether a page names
    what the question names."""
    def title_of(path: str) -> str:
        return catalog.by_path[path].title if path in catalog else ""

    def text_of(path: str) -> str:
        entry = catalog.by_path.get(path)
        return page_body(wiki_dir, entry) if entry is not None and wiki_dir is not None else ""

    mentions = bridge.TitleMentions.of(catalog)

    def names_in(path: str) -> list[str]:
        return mentions.find(text_of(path))

    return coverage(index, title_of, question, named=mentions.find(question),
                    text_of=text_of if wiki_dir is not None else None,
                    names_in=names_in if wiki_dir is not None else None)


def abstention_selection(index, catalog: Catalog, question: str, wiki_dir: Path | None = None,
                         verdict: Coverage | None = None) -> Selection | None:
    """No page, when nothing in the wiki matches ``question`` (``Coverage.abstain``; ``verdict``:
    its ``question_coverage`` when known): the pages that came closest are named as related, with
    the question's words no page holds. None when something matches (selection goes on)."""
    verdict = verdict or question_coverage(index, catalog, question, wiki_dir)
    if not verdict.abstain:
        return None
    related = [h.path for h in index.search(question, RELATED_PAGES)]
    return Selection(paths=[], method="lexical", notices=_missing_notice(verdict), abstained=True, related=related,
                     match="none")


def _missing_notice(verdict: Coverage) -> list[str]:
    """The question's words no page holds, named (with an abstention and with a weak or strong match)."""
    return [f"No page of the wiki mentions: {', '.join(verdict.missing)}."] if verdict.missing else []


class OfflineNavigator:
    mode = "offline"

    def __init__(self, lexical: LexicalIndexCache, *, rounds: int = 1):
        self.lexical = lexical
        self.rounds = rounds  # rounds of reading (settings.max_rounds): later ones follow bridges

    def preflight(self) -> None:
        """Nothing to check: no model, no key."""

    async def rewrite(self, question: str, history: list[Turn], meter: UsageMeter) -> tuple[str, list[str]]:
        previous = [t.content for t in history if t.role == "user"]
        if not previous:
            return question, []
        return f"{previous[-1]} {question}", ["Offline rewrite: the previous question was added to the query."]

    async def select(self, question: str, catalog: Catalog, max_pages: int, meter: UsageMeter) -> Selection:
        return await anyio.to_thread.run_sync(self._select, question, catalog, max_pages)

    def _select(self, question: str, catalog: Catalog, max_pages: int) -> Selection:
        """No page when nothing in the wiki matches the question (``abstention_selection``); else
        the keyword hits, with how strongly they match (a weak match says so in a notice), and and the pages the question names by title, leaving a page for each later
        round (``navigate.bridge.first_round``)."""
        index = self.lexical.get(catalog)
        verdict = question_coverage(index, catalog, question, self.lexical.wiki_dir)
        abstention = abstention_selection(index, catalog, question, verdict=verdict)
        if abstention:
            return abstention
        wiki_dir = self.lexical.wiki_dir
        # RM3 on the reader's own index: the pages read back are pages this reader may read.
        query = expanded_query(index, question, lambda path: page_terms(wiki_dir, catalog.by_path[path]))
        selection = lexical_selection(index, query, max_pages, "lexical")
        selection.match = verdict.match
        selection.notices = ([WEAK_MATCH] if verdict.match == "weak" else []) + _missing_notice(verdict)
        reserve = min(self.rounds - 1, max_pages - 1)
        selection.paths, named = bridge.first_round(selection.paths, question, index, catalog, max_pages, reserve)
        if named:
            selection.why = "keyword search and the pages the question names: " + "; ".join(
                catalog.by_path[p].title for p in named)
        return selection

    async def follow_up(self, question: str, catalog: Catalog, pages: list[ReadPage], latest: list[ReadPage],
                        max_pages: int, meter: UsageMeter) -> Selection:
        """The pages the latest round's pages name or link to (``navigate.bridge.next_round``)."""
        def run() -> Selection:
            paths = bridge.next_round(question, latest, {p.path for p in pages}, self.lexical.get(catalog), catalog,
                                      max_pages)
            why = "pages the pages read name: " + "; ".join(catalog.by_path[p].title for p in paths)
            return Selection(paths=paths, method="lexical-bridge", why=why)

        return await anyio.to_thread.run_sync(run)

    async def answer(self, question: str, history: list[Turn], pages: list[ReadPage], catalog: Catalog,
                     meter: UsageMeter) -> AsyncIterator[str]:
        lines = await anyio.to_thread.run_sync(self._answer_lines, question, pages, catalog)
        for line in lines:
            yield line + "\n"

    def _answer_lines(self, question: str, pages: list[ReadPage], catalog: Catalog) -> list[str]:
        read = [p for p in pages if p.is_evidence]
        evidence = best_units(question, [PageText(p.path, p.title, p.text) for p in read])
        lines: list[str] = []
        verdict = derive(question, [ComparedPage(p.path, p.title, p.text) for p in read])
        if verdict is not None:  # a comparison settled by quoted passages: the verdict, then them
            lines += [verdict.text, ""]
            for unit in verdict.units:
                lines += answer_lines(unit)
            quoted = {(u.path, u.start) for u in verdict.units}
            evidence = [e for e in evidence if (e.unit.path, e.unit.start) not in quoted]
        if evidence or verdict is not None:
            for e in evidence:
                lines += answer_lines(e.unit, e.sentence)
        else:
            lines += ["No single sentence matches the question; these pages are the closest:"]
            lines += [f"- [{p.title}]({p.path})" for p in pages if p.is_evidence]
        return lines

    async def suggest(self, question: str, answer: str, pages: list[ReadPage], catalog: Catalog,
                      meter: UsageMeter) -> tuple[list[str], list[str]]:
        return await anyio.to_thread.run_sync(self._suggestions, question, pages, catalog)

    def _suggestions(self, question: str, pages: list[ReadPage], catalog: Catalog) -> tuple[list[str], list[str]]:
        return related_questions(self.lexical.get(catalog), question, pages, catalog), []

    def not_covered(self) -> str:
        return NOT_COVERED
