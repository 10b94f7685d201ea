"""Compile, stage 4 (write): create or merge articles, one article at a time, safely.

What each article gets (one ``ArticleJob`` per article) is built from the plans in
``article_jobs.py``. Per article (articles run in parallel; the sources feeding one article are
merged one batch after another, oldest first), kaas:

1. reads the file as it is *now* and compares its sha256 with the hash of the text kaas last
   wrote: a mismatch means a person edited it. The merge then works on the edited text; offline,
   the source's new text is merged around the person's edits (``hand_text.merge_around_hand``).
2. asks a writer for the new text: ``OfflineWriter`` (the source itself, cleaned, with
   supersession trail lines by diff) or ``LLMWriter`` (the model rewrites small articles whole
   and edits only the affected sections of large or hand-edited ones).
3. guards it (``guard_body``, one check whatever the writer and mode): every line a person wrote
   (``HandText``) and every supersession trail line is still there, and model output does not
   drop half the article; frontmatter is rebuilt by kaas (a hand-written summary or tag is kept),
   the text passes the reader's own checks (``store.articles.validate_article_text``), the file
   is still what was read (else a person is editing it: left alone), then the new record is
   journaled and the file replaced atomically.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kb_ai.compile.autolink import dropped_link_notes
from kb_ai.compile.article_jobs import ArticleJob, article_jobs, relink_jobs, settle_sources
from kb_ai.compile.context import CompileRun, Engine, SourceWork, stage_timer
from kb_ai.compile.hand_text import HandText, _present, _string_list
from kb_ai.compile.writers import (
    WRITE_SOURCE_TOKENS,
    ArticleChanged,
    Contribution,
    CurrentArticle,
    LinkRefused,
    WriteRefused,
    guard_body,
    renamed_section,
)
from kb_ai.compile.records import DUPLICATE, ArticleRecord, text_hash
from kb_ai.compile.source_links import SourceLinks, run_links
from kb_ai.compile.state import CompileState
from kb_ai.errors import ArticleFormatError, KaasError, LLMError, UnsafePathError
from kb_ai.faults import fault_point
from kb_ai.llm.plausible import one_line
from kb_ai.llm.tokens import estimate_tokens
from kb_ai.store.articles import (
    RESERVED_NAMES,
    parse_article,
    link_on_path,
    link_refusal,
    read_article_text,
    render_article,
    validate_article_text,
    write_article_text,
)
from kb_ai.store.access import parse_access
from kb_ai.store.paths import safe_wiki_file

@dataclass
class ArticleOutcome:
    path: str
    action: str  # created, updated, unchanged, held, failed, detached
    reason: str = ""
    merged: list[str] = field(default_factory=list)
    orphaned: bool = False
    trails: int = 0
    warnings: list[str] = field(default_factory=list)




def _as_the_page_may_hold(article: CurrentArticle, job: ArticleJob, chunk: list[Contribution]) -> list[Contribution]:
    """THE rule for included text: each source as this article may hold it (``Source.for_page``).
    A source that includes restricted files goes whole only into an article at least as
    restricted (its own ``access``, or the one a new article is created with); any other gets the
    source without them."""
    if article.body is not None:
        page = parse_access(article.meta)[0]
    else:
        page = tuple(job.target.access) if job.target.access is not None else None
    return [c if c.source.guarded is None else replace(c, source=c.source.for_page(page)) for c in chunk]


def compose_meta(existing: dict[str, Any], *, title: str, summary: Any, topic: str, tags: Any,
                 sources: list[str], updated: str, access: list[str] | None = None) -> dict[str, Any]:
    """The article's frontmatter: kaas's keys in the documented order, then any other keys a
    person added, in their order. An existing title and topic are never changed, whatever their
    form (``title: 1984`` stays the number a person wrote). ``access``: the rule a *new* article
    is created with (an existing article keeps whatever its frontmatter says)."""
    if _present(existing.get("title")):
        title = existing["title"]
    if _present(existing.get("topic")):
        topic = existing["topic"]
    meta: dict[str, Any] = {
        "title": title,
        "summary": summary,
        "topic": topic,
        "tags": tags,
        "sources": sources,
        "updated": dt.date.fromisoformat(updated),
    }
    if access is not None and "access" not in existing:
        meta["access"] = list(access)
    for key, value in existing.items():
        if key not in meta:
            meta[key] = value
    return meta


# ---------------------------------------------------------------------------------------------
# the per-article unit of work


class ArticleWriter:
    """Runs the jobs of one compile: reads, asks the writer, validates, journals, writes."""

    def __init__(self, wiki_dir: Path, state: CompileState, writer, today: str, dry_run: bool = False,
                 links: SourceLinks | None = None):
        self.wiki_dir = wiki_dir
        self.state = state
        self.writer = writer
        self.today = today
        self.dry_run = dry_run
        self.links = links
        self.relinked: set[tuple[str, str]] = set()  # (source, unlinked entry) made links again

    def current(self, job: ArticleJob) -> tuple[CurrentArticle, str | None]:
        rel, file = safe_wiki_file(self.wiki_dir, job.path)
        if Path(rel).name in RESERVED_NAMES:
            raise UnsafePathError(f"{rel} is a reserved file name")
        if link_on_path(self.wiki_dir, rel):
            # An alias of another file: reading or writing through it would merge this article's
            # sources into the page it points to. Left alone, and said (exit 1) until resolved.
            raise LinkRefused(link_refusal(self.wiki_dir, rel))
        record = self.state.articles.get(rel)
        text = _read(file, rel)
        merged_dates = [self.state.sources[s].date for s in (record.merged if record else {})
                        if s in self.state.sources and self.state.sources[s].date]
        latest = max(merged_dates) if merged_dates else None
        rejected = self.state.rejections.get(rel)
        if text is None:
            if job.target is not None and not job.target.new and job.contributions:
                # Planned as an update of an article that existed; its file is gone: a person
                # deleted it. It is not brought back with only the new material in it.
                raise ArticleChanged("deleted since it was planned (by hand?); not recreated: the source is "
                                     "planned again on the next run")
            return CurrentArticle(rel, job.target.title, job.target.topic, job.target.summary, {}, None, False, None,
                                  rejected), None
        article = parse_article(text, rel)  # malformed frontmatter: ArticleFormatError, the file is left alone
        hand_edited = bool(record and record.hand_edited) or record is None or text_hash(text) != record.written_hash
        written = self.state.written_text(record.written_hash) if record is not None else None
        hand = HandText.of(article.meta, article.body, written, record.hand_lines if record else [],
                           record is None or text_hash(text) != record.written_hash, rel)
        title = article.title if _present(article.meta.get("title")) else job.target.title
        topic = article.topic if _present(article.meta.get("topic")) else job.target.topic
        listed = article.meta.get("sources")
        copies = frozenset(s for s in (listed if isinstance(listed, list) else []) if isinstance(s, str)
                           and s in self.state.sources and self.state.sources[s].status == DUPLICATE)
        return CurrentArticle(rel, one_line(title), one_line(topic), article.summary, dict(article.meta),
                              article.body, hand_edited, latest, rejected, hand, copies), text

    def _commit(self, article: CurrentArticle, old_text: str | None, meta: dict[str, Any], body: str,
                merged: dict[str, str], orphaned: bool, former: dict[str, str] | None = None) -> tuple[bool, str]:
        """Check, keep, journal, then replace the file. Returns (file changed, text now on disk).

        Refused (``WriteRefused``) when the text would not read back as an article (the reader's
        own checks) or the file is no longer what was read (a person is editing it)."""
        text = render_article(meta, body, like=old_text)  # a person's frontmatter stays as written
        try:
            validate_article_text(text, article.path)
        except ArticleFormatError as exc:
            raise WriteRefused(f"the new text is not a valid article ({exc.message})") from None
        record = self.state.articles.get(article.path)
        same = old_text is not None and _without_updated(old_text) == _without_updated(text)
        if same:
            text = old_text  # keep the old date: nothing changed
        hand_lines = article.hand.keys() if article.hand else []
        if former is None:
            former = dict(record.former) if record is not None else {}
        new_record = ArticleRecord(article.path, text_hash(text), merged, article.hand_edited, orphaned, hand_lines,
                                   former)
        if same and record is not None and record.to_json() == new_record.to_json():
            return False, text
        _, file = safe_wiki_file(self.wiki_dir, article.path)
        try:
            now = _read(file, article.path)
        except ArticleFormatError:
            now = "\x00unreadable"
        if now != old_text:
            what = "deleted" if now is None else "created" if old_text is None else "changed"
            raise ArticleChanged(f"{what} on disk while kaas was writing it (a hand edit?); left as it is, "
                                 "the new material is merged on the next run")
        self.state.keep_written(text)
        self.state.record_article(new_record)
        if not same:
            fault_point("compile.write.before_file")  # journaled, file not replaced yet
            try:
                write_article_text(self.wiki_dir, article.path, text)
            except UnsafePathError as exc:  # a link put in its place since it was read
                if record is not None:
                    self.state.record_article(record)
                else:
                    self.state.drop_article(article.path)
                raise LinkRefused(exc.message) from None
            fault_point("compile.write.after_file")  # file replaced, source not marked compiled yet
        return not same, text

    async def run(self, job: ArticleJob) -> ArticleOutcome:
        try:
            outcome = await self._run(job)
        except WriteRefused as exc:
            if exc.tell_model and getattr(self.writer, "mode", "") == "llm":
                self.state.set_rejection(job.path, str(exc))
            await self._names_only(job)
            return ArticleOutcome(job.path, "held", str(exc))
        except LLMError as exc:
            if exc.stops_compile:
                raise
            return ArticleOutcome(job.path, "failed", exc.message)
        except KaasError as exc:
            return ArticleOutcome(job.path, "failed", exc.message)
        if job.path in self.state.rejections:
            self.state.set_rejection(job.path, None)
        return outcome

    async def _run(self, job: ArticleJob) -> ArticleOutcome:
        article, old_text = self.current(job)
        record = self.state.articles.get(article.path)
        merged = dict(record.merged) if record else {}
        existed = article.body is not None
        outcome = ArticleOutcome(article.path, "unchanged")
        wrote = False
        model = getattr(self.writer, "mode", "") == "llm"
        for chunk in _chunks(sorted(job.contributions, key=lambda c: (c.source.date or "", c.path))):
            chunk = _as_the_page_may_hold(article, job, chunk)
            draft = await self.writer.write(article, chunk)
            draft.body = self._settle_links(article, chunk, draft.body)
            for new, old in job.adopt_renamed():  # a same-title section follows its source's new name
                draft.body = renamed_section(draft.body, article.title, old, new)
            draft.body, relinked = self._relink(job, article, draft.body)
            guard_body(article, draft.body, model=model)
            summary, tags = _kept_by_hand(article, draft.summary, draft.tags)
            sources = _sources_after(article, job, chunk, merged)
            meta = compose_meta(article.meta, title=article.title, summary=summary, topic=article.topic,
                                tags=tags, sources=sources, updated=self.today,
                                access=job.target.access if article.body is None else None)
            if draft.questions and not (article.hand_edited and "questions" in article.meta):
                meta["questions"] = draft.questions  # a list a person wrote is theirs
            changed, old_text = self._commit(article, old_text, meta, draft.body, dict(merged), orphaned=not sources,
                                             former=_former_after(record, job, merged))
            self.relinked.update(relinked)
            wrote = wrote or changed
            outcome.merged.extend(c.path for c in chunk)
            outcome.trails += draft.trails
            outcome.warnings.extend(draft.warnings)
            dates = [c.source.date for c in chunk if c.source.date]
            latest = max([article.latest_date or "", *dates]) or None
            hand = replace(article.hand, base=draft.body) if article.hand is not None else None  # kaas wrote it now
            article = CurrentArticle(article.path, article.title, article.topic, summary, meta,
                                     draft.body, article.hand_edited, latest, None, hand, article.copies)
        if (job.detach or job.adopt or job.relinks) and not job.contributions:
            return self._detach(job, article, old_text, merged)
        if wrote:
            outcome.action = "updated" if existed else "created"
        return outcome

    async def _names_only(self, job: ArticleJob) -> None:
        """A held merge still renames: the article's ``sources:`` follow a source renamed or
        moved in raw/ and drop the ones that left it, its text unchanged."""
        if not job.contributions or not (job.renames or job.gone):
            return
        names = ArticleJob(job.path, job.target, [], set(job.detach), dict(job.renames), set(job.gone),
                           renamed=dict(job.renamed))
        try:
            await self._run(names)
        except (WriteRefused, KaasError):
            pass

    def _relink(self, job: ArticleJob, article: CurrentArticle, body: str) -> tuple[str, list[tuple[str, str]]]:
        """``body`` with the links of ``job.relinks`` made again where their text is (once, as a
        whole phrase), never in a line a person wrote; and the (source, entry) made again."""
        done: list[tuple[str, str]] = []
        if self.links is None:
            return body, done
        for source, entry, text, target, fragment in job.relinks:
            new = self.links.relinked(body, article.path, text, target, fragment)
            if new is not None and not (article.hand and article.hand.lost_in(new)):
                body = new
                done.append((source, entry))
        return body, done

    def _settle_links(self, article: CurrentArticle, chunk: list[Contribution], body: str) -> str:
        """Links of the new body that lead nowhere (a model's guess, a source path) pointed at
        their target's article or made plain text (``SourceLinks.settle``); a line a person
        wrote is never touched (the body is kept as the writer made it then)."""
        if self.links is None:
            return body
        sources = [c.path for c in chunk] + _string_list(article.meta.get("sources"))
        settled = self.links.settle(body, article.path, sources)
        if settled != body and article.hand and article.hand.lost_in(settled):
            return body
        return settled

    def _detach(self, job: ArticleJob, article: CurrentArticle, old_text: str | None,
                merged: dict[str, str]) -> ArticleOutcome:
        """Remove deleted (or no longer planned) sources from ``sources:``, add renamed ones
        (``job.adopt``); flag an orphan."""
        if article.body is None:
            if article.path in self.state.articles:
                self.state.drop_article(article.path)
            return ArticleOutcome(article.path, "unchanged", "file no longer exists")
        sources = [s for s in _string_list(article.meta.get("sources")) if s not in job.detach]
        for path in job.detach:
            merged.pop(path, None)
        for path, checksum in job.adopt.items():
            if path not in sources:
                sources.append(path)
            merged[path] = checksum
        meta = dict(article.meta)
        meta["sources"] = sources
        orphaned = not sources
        body = article.body
        for new, old in job.adopt_renamed():
            body = renamed_section(body, article.title, old, new)
        body, relinked = self._relink(job, article, body)
        wrote, _ = self._commit(article, old_text, meta, body, merged, orphaned,
                                former=_former_after(self.state.articles.get(article.path), job, merged))
        self.relinked.update(relinked)
        reason = "no source left: flagged, not deleted" if orphaned else ""
        action = "unchanged" if not wrote else "detached" if job.detach or job.adopt else "updated"
        return ArticleOutcome(article.path, action, reason, orphaned=orphaned)


MAX_FORMER = 32  # sources remembered per article after they left raw/


def _former_after(record: ArticleRecord | None, job: ArticleJob, merged: dict[str, str]) -> dict[str, str]:
    """``ArticleRecord.former`` once ``job`` is done: the sources that left raw/ in this job
    join it (with the checksum the article last merged), the ones merged again leave it."""
    former = dict(record.former) if record is not None else {}
    for path in sorted(job.gone):
        checksum = record.merged.get(path) if record is not None else None
        if checksum:
            former.pop(path, None)
            former[path] = checksum
    for path in merged:
        former.pop(path, None)
    return dict(list(former.items())[-MAX_FORMER:])


def _kept_by_hand(article: CurrentArticle, summary: Any, tags: Any) -> tuple[Any, Any]:
    """A summary or tag a person wrote is theirs, whatever its form: (summary, tags) to write."""
    if not article.hand:
        return summary, tags
    written_summary = article.meta.get("summary")
    if article.hand.summary_kept(written_summary):
        summary = written_summary
    written_tags = article.meta.get("tags")
    if article.hand.tags_value_kept(written_tags):
        return summary, written_tags
    kept = article.hand.tags_kept(_string_list(written_tags) if isinstance(written_tags, list) else [])
    return summary, kept + [t for t in tags if t not in kept]


def _sources_after(article: CurrentArticle, job: ArticleJob, chunk: list[Contribution],
                   merged: dict[str, str]) -> list[str]:
    """The article's ``sources:`` once ``chunk`` is merged (and ``merged`` updated to match)."""
    sources = _string_list(article.meta.get("sources"))
    for contribution in chunk:
        if contribution.path not in sources:
            sources.append(contribution.path)
        merged[contribution.path] = contribution.source.checksum
    for path, checksum in job.adopt.items():
        if path not in sources:
            sources.append(path)
        merged[path] = checksum
    for path in job.detach:
        merged.pop(path, None)
    return sorted(s for s in sources if s not in job.detach)


def _read(file: Path, rel: str) -> str | None:
    """An article's text as the reader reads it (size limit, UTF-8), None when there is none."""
    try:
        return read_article_text(file, rel)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise ArticleFormatError(f"{rel}: unreadable ({exc.strerror or exc})") from None


def _without_updated(text: str) -> str:
    return re.sub(r"^updated: .*$", "", text, count=1, flags=re.M)


def _chunks(contributions: list[Contribution]) -> list[list[Contribution]]:
    """Batches of contributions whose text fits one write call."""
    chunks: list[list[Contribution]] = []
    size = 0
    for contribution in contributions:
        tokens = min(estimate_tokens(contribution.source.text), WRITE_SOURCE_TOKENS)
        if chunks and size + tokens <= WRITE_SOURCE_TOKENS and len(chunks[-1]) < 4:
            chunks[-1].append(contribution)
            size += tokens
        else:
            chunks.append([contribution])
            size = tokens
    return chunks



# ---------------------------------------------------------------------------------------------
# the stage


OUTCOME_LISTS = {"created": "created", "updated": "updated", "detached": "detached"}


async def write(run: CompileRun, engine: Engine, work: dict[str, SourceWork], deleted: list[str],
                became_duplicate: dict[str, list[str]]) -> bool:
    """Write every article the plans name (in parallel, one job per article), remove deleted
    sources and copies from the articles they fed; returns whether any article file changed."""
    with stage_timer(run.report, "write") as stage:
        links = run_links(run, work, deleted)
        jobs = article_jobs(run, work, deleted, became_duplicate, links)
        relink_jobs(run, links, jobs, work, deleted)
        if hasattr(engine.writer, "use_corpus"):  # the model's articles are checked against their sources
            engine.writer.use_corpus([w.source.text for w in work.values()])
        writer = ArticleWriter(run.kb.wiki_dir, run.state, engine.writer, run.today, links=links)
        semaphore = asyncio.Semaphore(run.settings.concurrency)
        run.progress.start("write", len(jobs))

        finished: dict[str, ArticleOutcome] = {}

        async def one(job: ArticleJob) -> ArticleOutcome:
            async with semaphore:
                outcome = await writer.run(job)
                finished[job.path] = outcome
                run.progress.advance(job.path)
                return outcome

        try:
            outcomes = list(await asyncio.gather(*(one(jobs[p]) for p in sorted(jobs))))
        except asyncio.CancelledError:  # Ctrl-C: what was saved, what was not (``CompileReport.interrupted``)
            run.report.interrupted = {
                "stage": "write",
                "saved": sorted(p for p, o in finished.items() if o.action in OUTCOME_LISTS),
                "not_written": sorted(p for p in jobs if p not in finished)}
            raise
        stage.counts = {"articles": len(jobs), "created": 0, "updated": 0, "unchanged": 0, "held": 0, "failed": 0,
                        "detached": 0, "trail_lines": 0}
        written = _report_outcomes(run, outcomes, stage.counts)
        if engine.mode == "llm":  # a link the model wrote to no page is said (compile/autolink.py)
            run.report.warnings.extend(dropped_link_notes(links.dropped, run.report.created + run.report.updated))
        settle_sources(run, work, deleted, became_duplicate, links.dead, writer.relinked)
        run.progress.done()
        stage.add_usage(engine.write_meter)
    return written


def _report_outcomes(run: CompileRun, outcomes: list[ArticleOutcome], counts: dict[str, int]) -> bool:
    report = run.report
    written = False
    for outcome in outcomes:
        counts[outcome.action] = counts.get(outcome.action, 0) + 1
        counts["trail_lines"] += outcome.trails
        if outcome.action in OUTCOME_LISTS:
            getattr(report, OUTCOME_LISTS[outcome.action]).append(outcome.path)
            written = True
        elif outcome.action in ("held", "failed"):
            getattr(report, outcome.action).append({"path": outcome.path, "reason": outcome.reason})
        for warning in outcome.warnings:
            report.warnings.append(f"{outcome.path}: {warning}")
    return written
