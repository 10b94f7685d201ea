"""A source keeps the articles it feeds when the manifest's link to them was lost.

So an article is updated in place, never forked into a ``-2`` copy beside it: a source renamed in
raw/, an article moved by hand in wiki/, or no compile state at all (.kaas/ deleted): the
articles are found again by checksum and by their frontmatter's ``sources:``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kb_ai.compile.context import CompileRun, SourceWork
from kb_ai.compile.records import ArticleRecord, file_hash
from kb_ai.errors import ArticleFormatError, UnsafePathError
from kb_ai.store.articles import iter_article_paths, load_article
from kb_ai.store.words import title_key


def relink(run: CompileRun, work: dict[str, SourceWork], deleted: list[str]) -> None:
    """Give the sources in ``work`` back the articles they feed:

    * a source renamed or moved in raw/ (``find_renames``: the same document under a new path,
      its text the same or revised) takes over the articles of the source it was; the old path
      is removed from their ``sources:``;
    * a document that left raw/ and came back (there or elsewhere) gets back the article it was
      compiled into (``ArticleRecord.former``);
    * an article moved or renamed by hand in wiki/: an article whose frontmatter names the
      source in ``sources:`` stands for the ones the manifest names that no longer exist (its
      record moves with it when the file is what kaas wrote).
    (No state at all is handled by ``ingest`` the same way, through ``sources:``.)"""
    wiki = run.kb.wiki_dir

    def linked(item: SourceWork) -> list[str]:
        return [a for a in item.previous if (wiki / a).is_file()]

    lost = [w for w in work.values() if not w.previous or len(linked(w)) < len(w.previous)]
    if not lost:
        return
    renames = find_renames(run, [w for w in lost if not w.previous], deleted)
    named: list[dict[str, list[str]]] = []  # articles_naming_sources, read once when first needed
    for item in sorted(lost, key=lambda w: w.source.path):
        _relink_one(run, item, linked(item), renames.get(item.source.path), named)


@dataclass(frozen=True)
class Rename:
    """A new path of a document kaas compiled before: what it was, and its articles."""

    old: str
    articles: tuple[str, ...]
    same: bool  # the same bytes (a pure rename: nothing to write, no model call)
    why: str


def find_renames(run: CompileRun, new: list[SourceWork], deleted: list[str]) -> dict[str, Rename]:
    """New source path -> the document it was, by this rule (each old document taken once, the
    strongest match first, then in path order):

    1. the same checksum as a source deleted in this run, or as a source an article remembers
       (``ArticleRecord.former``: it left raw/ in an earlier run) -> the same document;
    2. a source deleted in this run whose text is this one revised: estimated similarity (MinHash
       of word 3-shingles, ``dedup.similarity``) of at least ``dedup.NEAR_THRESHOLD`` (0.8), or of
       at least ``dedup.REVISION_TITLE_THRESHOLD`` (0.5) with the same title;
    3. a document too short to measure (under ``dedup.MIN_WORDS_FOR_NEAR`` words) with the same
       title as exactly one source deleted in this run, and no other new source with that title;
    4. the same path as a source an article remembers (it left raw/ and came back, edited).
    Anything else is a new document. Only articles whose file still exists count."""
    # (dedup imports ingest, which imports this module)
    from kb_ai.compile.dedup import NEAR_THRESHOLD, REVISION_TITLE_THRESHOLD, fingerprint, similarity  # noqa: PLC0415

    if not new:
        return {}
    state, wiki = run.state, run.kb.wiki_dir
    olds: dict[str, tuple[str | None, str, tuple[str, ...]]] = {}  # old path -> (checksum, title, articles)
    for path in deleted:
        record = state.sources[path]
        articles = tuple(a for a in record.articles if (wiki / a).is_file())
        if articles:
            olds[path] = (record.checksum, record.title or "", articles)
    for article, record in sorted(state.articles.items()):
        if (wiki / article).is_file():
            for path, checksum in record.former.items():
                if path not in olds and path not in state.sources:
                    olds[path] = (checksum, "", (article,))
    if not olds:
        return {}
    pairs: list[tuple[float, str, str, str]] = []  # (strength, new path, old path, why)
    fingerprints = state.fingerprints()
    new_titles = _count(title_key(w.source.title) for w in new)
    old_titles = _count(title_key(olds[p][1]) for p in olds if p in deleted)
    by_checksum: dict[str, list[str]] = {}
    for old, (checksum, _title, _articles) in olds.items():
        if checksum:
            by_checksum.setdefault(checksum, []).append(old)
    revisable = [old for old in olds if old in deleted]
    for item in new:
        source = item.source
        exact = by_checksum.get(source.checksum, [])
        for old in exact:
            pairs.append((3.0, source.path, old, "back in raw/" if old == source.path else "renamed"))
        if exact:
            continue
        if source.path in olds:
            pairs.append((1.5, source.path, source.path, "back in raw/, revised"))
        key = title_key(source.title)
        fp = fingerprint(source.text) if revisable else None
        for old in revisable:
            same_title = bool(key) and title_key(olds[old][1]) == key
            other = fingerprints.get(old)
            if other is not None and other.minhash and fp.minhash:
                value = similarity(np.frombuffer(fp.minhash, dtype=np.uint32),
                                   np.frombuffer(other.minhash, dtype=np.uint32))
                if value >= NEAR_THRESHOLD or (same_title and value >= REVISION_TITLE_THRESHOLD):
                    pairs.append((1.0 + value, source.path, old, f"renamed and revised ({value:.2f} similar)"))
            elif same_title and new_titles[key] == 1 and old_titles[key] == 1:
                pairs.append((1.0, source.path, old, "renamed and revised (same title)"))
    found: dict[str, Rename] = {}
    taken: set[str] = set()
    for strength, path, old, why in sorted(pairs, key=lambda p: (-p[0], p[1], p[2])):
        if path in found or old in taken:
            continue
        taken.add(old)
        found[path] = Rename(old, olds[old][2], strength >= 3.0, why)
    return found


def _count(keys) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    return counts


def _relink_one(run: CompileRun, item: SourceWork, articles: list[str], rename: Rename | None,
                named: list[dict[str, list[str]]]) -> None:
    before = list(item.previous)
    if rename is not None and not before:
        articles += [a for a in rename.articles if a not in articles]
        item.renamed_from = rename.old
        item.renamed_same = rename.same
        run.report.notes.append(f"{item.source.path}: {rename.why} from {rename.old}; it keeps its article(s)")
    if before and any(a not in articles for a in before):  # an article of it is gone from its path
        if not named:
            named.append(articles_naming_sources(run))
        found = [a for a in named[0].get(item.source.path, []) if a not in articles]
        for gone in (a for a in before if a not in articles):
            _move_record(run, gone, found)
        articles += found
    if articles != before:
        item.with_articles(articles)


def _move_record(run: CompileRun, gone: str, candidates: list[str]) -> None:
    """The record of article ``gone`` (its file no longer exists) moves to the candidate that
    holds exactly the text kaas last wrote there (the same file, moved by hand)."""
    state = run.state
    record = state.articles.get(gone)
    if record is None or not record.written_hash:
        return
    for path in candidates:
        if path not in state.articles and file_hash(run.kb.wiki_dir / path) == record.written_hash:
            state.record_article(ArticleRecord(path, record.written_hash, dict(record.merged),
                                               record.hand_edited, record.orphaned, list(record.hand_lines),
                                               dict(record.former)))
            state.drop_article(gone)
            run.report.notes.append(f"{gone} was moved to {path}; kaas follows it")
            return


def articles_naming_sources(run: CompileRun) -> dict[str, list[str]]:
    """raw/ path -> the articles whose frontmatter lists it in ``sources`` (saved answers and
    unreadable pages aside). An article whose exact text is still kept in .kaas/written/ was
    written by kaas, not by hand: its record is rebuilt too (only the manifest was lost)."""
    named: dict[str, list[str]] = {}
    wiki, state = run.kb.wiki_dir, run.state
    if not wiki.is_dir():
        return named
    for path in iter_article_paths(wiki):
        try:
            article = load_article(wiki, path)
        except (ArticleFormatError, UnsafePathError, OSError):
            continue
        if article.kind != "article":
            continue
        for source in dict.fromkeys(article.sources):
            if source.startswith("raw/"):
                named.setdefault(source, []).append(path)
        digest = file_hash(wiki / path)
        if path not in state.articles and state.written_text(digest, quiet=True) is not None:
            state.articles[path] = ArticleRecord(path, written_hash=digest)
    if named and not state.sources:
        run.report.notes.append(
            f"no compile state: {len(named)} sources found again in the `sources:` of the articles they feed")
    return named
