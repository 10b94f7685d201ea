"""Compile, stage 4 (write): the jobs, one per article, built from the plans, and the sources'
records settled once the jobs ran.

``article_jobs`` turns the plans into one ``ArticleJob`` per article: the sources to merge in
(their links pointed at the articles of the sources they name), the sources to remove from
``sources:`` (deleted, no longer planned, found to be copies), the sources renamed in raw/ whose
text the article already has, and the copies dedup left out (``_adopt_copies``: listed in the
``sources:`` of the articles their original feeds). ``relink_jobs`` adds the links kept as text
whose target is compiled now. ``write.ArticleWriter`` runs the jobs; ``settle_sources`` then
records which sources are compiled, into which articles.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kb_ai.compile.context import CompileRun, SourceWork
from kb_ai.compile.planners import SAME_TITLE
from kb_ai.compile.records import COMPILED, DUPLICATE, PlanTarget, SourceRecord
from kb_ai.compile.source_links import SourceLinks
from kb_ai.compile.writers import Contribution


@dataclass
class ArticleJob:
    path: str
    target: PlanTarget
    contributions: list[Contribution] = field(default_factory=list)
    detach: set[str] = field(default_factory=set)  # sources to remove from ``sources:``
    # Sources to add to ``sources:`` whose text the article already has (a source renamed in
    # raw/, same checksum): source path -> checksum. No writer is asked.
    adopt: dict[str, str] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)  # of ``detach``: the sources that left raw/
    # A renamed source whose new text is a contribution: new path -> the checksum the article
    # holds of it under its old name. Used when the merge is held (a hand edit, offline): the
    # article then takes the new name with the text it has, and the new text waits.
    renames: dict[str, str] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)  # new source path -> the path it had
    # Links kept as text when their target was not compiled, whose target is now:
    # (source, its ``unlinked`` entry, link text, the source the link names, fragment).
    relinks: list[tuple[str, str, str, str, str]] = field(default_factory=list)

    def adopt_renamed(self) -> list[tuple[str, str]]:
        """(new path, old path) of the sources this job only renames."""
        return [(new, old) for new, old in sorted(self.renamed.items()) if new in self.adopt]


def article_jobs(run: CompileRun, work: dict[str, SourceWork], deleted: list[str],
                 became_duplicate: dict[str, list[str]], links: SourceLinks | None = None) -> dict[str, ArticleJob]:
    """Article path -> what to merge into it (and which sources to remove from it). A source's
    links to other sources are pointed at their articles, relative to the article it goes into
    (``links``)."""
    state = run.state
    jobs: dict[str, ArticleJob] = {}

    def job_for(target: PlanTarget) -> ArticleJob:
        if target.path not in jobs:
            jobs[target.path] = ArticleJob(target.path, target)
        return jobs[target.path]

    def detach(path: str, article: str, gone: bool = False) -> None:
        job = job_for(PlanTarget(article, "", "", article.split("/", 1)[0], new=False))
        job.detach.add(path)
        if gone:
            job.gone.add(path)

    for path, item in sorted(work.items()):
        if not item.plan:
            continue
        for target in item.plan:
            record = state.articles.get(target.path)
            merged = record.merged.get(path) if record else None
            if merged == item.source.checksum and not run.full:
                continue
            was = None  # the checksum the article holds of the document under its old name
            if item.renamed_from and record is not None:
                was = record.merged.get(item.renamed_from) or record.former.get(item.renamed_from)
            if item.renamed_from:
                job_for(target).renamed[path] = item.renamed_from
            if was == item.source.checksum and not run.full:
                job_for(target).adopt[path] = item.source.checksum  # its text is there: a new name only
                continue
            status = "revision" if item.revision_of else ("revised" if merged or was else "new")
            if was:
                job_for(target).renames[path] = was
            source = item.source
            if links is not None:
                source = _repointed(links, source, target.path, item.renamed_from)
            join = target.reason == SAME_TITLE and not merged and not was and not item.revision_of
            job_for(target).contributions.append(Contribution(source, status, join, item.renamed_from))
        planned = {t.path for t in item.plan}
        for article in item.previous:
            if article not in planned:
                detach(path, article)
    for path in deleted:
        for article in state.sources[path].articles:
            detach(path, article, gone=True)
    for path, articles in became_duplicate.items():
        for article in articles:
            detach(path, article)
    _adopt_copies(run, work, set(deleted), job_for)
    return jobs


def _repointed(links: SourceLinks, source, article: str, was: str | None):
    """``source`` with its links pointed as they go into ``article`` (its ``guarded`` text too)."""
    moved = replace(source, text=links.repoint_source(source.path, source.text, article, was))
    if source.guarded is not None:
        moved.guarded = _repointed(links, source.guarded, article, was)
    return moved


def _adopt_copies(run: CompileRun, work: dict[str, SourceWork], deleted: set[str], job_for) -> None:
    """Every copy dedup left out is listed in the ``sources:`` of the articles its original
    feeds (adopted: its text is there already, no writer is asked), so nothing it was is lost
    from sight, whichever the mode and whether it was found now or in an earlier run."""
    state = run.state
    for path, record in sorted(state.sources.items()):
        if record.status != DUPLICATE or path in deleted or not record.duplicate_of:
            continue
        original = work.get(record.duplicate_of)
        if original is not None and original.plan is not None:
            articles = [t.path for t in original.plan]
        else:
            source = state.sources.get(record.duplicate_of)
            articles = list(source.articles) if source is not None else []
        for article in articles:
            known = state.articles.get(article)
            if known is not None and known.merged.get(path) == record.checksum and not run.full:
                continue
            job = job_for(PlanTarget(article, "", "", article.split("/", 1)[0], new=False))
            job.detach.discard(path)
            job.adopt[path] = record.checksum


def relink_jobs(run: CompileRun, links: SourceLinks, jobs: dict[str, ArticleJob], work: dict[str, SourceWork],
                 deleted: list[str]) -> None:
    """Links an unchanged source kept as text because their target was not compiled (a file
    added later, a source whose plan failed), whose target is compiled now: made links again
    in the articles of that source (a deterministic edit, no writer asked)."""
    state = run.state
    gone = set(deleted)
    waiting = {p: r.unlinked for p, r in state.sources.items()
               if r.unlinked and r.status == COMPILED and p not in work and p not in gone}
    for source, found in links.revivable(waiting).items():
        for article in state.sources[source].articles:
            job = jobs.get(article) or jobs.setdefault(
                article, ArticleJob(article, PlanTarget(article, "", "", article.split("/", 1)[0], new=False)))
            job.relinks.extend((source, entry, text, named, fragment) for entry, text, named, fragment in found)


def settle_sources(run: CompileRun, work: dict[str, SourceWork], deleted: list[str],
                    became_duplicate: dict[str, list[str]], dead: dict[str, set[str]] | None = None,
                    relinked: set[tuple[str, str]] = frozenset()) -> None:
    """The manifest after the writes: sources whose every article now holds their current
    version are compiled (with the links of theirs that lead to nothing compiled, ``unlinked``:
    ``kaas lint`` reports them); deleted sources go; copies list the articles their original feeds."""
    state = run.state
    for path, item in sorted(work.items()):
        if not item.plan:
            continue
        targets = [t.path for t in item.plan]
        done = all((state.articles.get(t) and state.articles[t].merged.get(path) == item.source.checksum)
                   for t in targets)
        record = state.sources.get(path)
        if done and record is not None:
            record = SourceRecord.from_json(record.to_json())
            record.status = COMPILED
            record.articles = targets
            record.reason = None
            record.unlinked = sorted((dead or {}).get(path, ()))
            state.record_source(record)
    for source in sorted({s for s, _ in relinked}):
        record = state.sources.get(source)
        if record is not None and source not in work:
            record = SourceRecord.from_json(record.to_json())
            record.unlinked = [e for e in record.unlinked if (source, e) not in relinked]
            state.record_source(record)
    for path in deleted:
        state.drop_source(path)
    for path in became_duplicate:
        record = state.sources.get(path)
        if record is not None and record.articles:
            record.articles = []
            state.record_source(record)
    for path, record in sorted(state.sources.items()):
        if record.status == DUPLICATE and record.duplicate_of in state.sources:
            articles = state.sources[record.duplicate_of].articles
            if record.articles != articles:
                record.articles = list(articles)
                state.record_source(record)
    run.report.orphaned = sorted(p for p, r in state.articles.items()
                                 if r.orphaned and (run.kb.wiki_dir / p).is_file())
