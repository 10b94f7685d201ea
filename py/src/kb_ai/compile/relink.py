"""A source keeps the articles it feeds when the manifest's link to them was lost.

So an article is updated in place, never forked into a ``-2`` copy beside it: a source renamed in
raw/, an article moved by hand in wiki/, or no compile state at all (.kaas/ deleted): the
articles are found again by checksum and by their frontmatter's ``sources:``.
"""

from __future__ import annotations

from kb_ai.compile.context import CompileRun, SourceWork
from kb_ai.compile.records import ArticleRecord, file_hash
from kb_ai.errors import ArticleFormatError, UnsafePathError
from kb_ai.store.articles import iter_article_paths, load_article


def relink(run: CompileRun, work: dict[str, SourceWork], deleted: list[str]) -> None:
    """Give the sources in ``work`` back the articles they feed:

    * a source renamed (or moved) in raw/: a new path with the checksum of a deleted source
      takes over that source's articles (the old path is removed from their ``sources:``);
    * an article moved or renamed by hand in wiki/: an article whose frontmatter names the
      source in ``sources:`` stands for the ones the manifest names that no longer exist (its
      record moves with it when the file is what kaas wrote).
    (No state at all is handled by ``ingest`` the same way, through ``sources:``.)"""
    state, wiki = run.state, run.kb.wiki_dir

    def linked(item: SourceWork) -> list[str]:
        return [a for a in item.previous if (wiki / a).is_file()]

    lost = [w for w in work.values() if not w.previous or len(linked(w)) < len(w.previous)]
    if not lost:
        return
    renamed: dict[str, str] = {}
    for path in deleted:
        record = state.sources[path]
        if record.articles and record.checksum:
            renamed.setdefault(record.checksum, path)
    named: list[dict[str, list[str]]] = []  # articles_naming_sources, read once when first needed
    for item in sorted(lost, key=lambda w: w.source.path):
        _relink_one(run, item, linked(item), renamed, named)


def _relink_one(run: CompileRun, item: SourceWork, articles: list[str], renamed: dict[str, str],
                named: list[dict[str, list[str]]]) -> None:
    state, wiki = run.state, run.kb.wiki_dir
    before = list(item.previous)
    old = renamed.pop(item.source.checksum, None) if not before else None
    if old is not None:
        articles += [a for a in state.sources[old].articles if (wiki / a).is_file() and a not in articles]
        item.renamed_from = old
        run.report.notes.append(f"{item.source.path}: renamed from {old}; it keeps its article(s)")
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
                                               record.hand_edited, record.orphaned, list(record.hand_lines)))
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
