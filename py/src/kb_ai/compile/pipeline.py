"""``kaas compile``: raw/ -> wiki/ in six stages (ingest, dedup, plan, write, index, report).

``run_compile`` is the service function the CLI (and anything else) calls. The stages share a
``CompileState`` (manifest + journal, see ``state.py``) so that a compile is incremental (only
new, changed and deleted sources cost anything), resumable (every finished unit of work is
journaled; a rerun continues), and reproducible (deterministic order, temperature 0, cached).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from dataclasses import dataclass, field

from kb_ai.compile.dedup import Boilerplate, DedupIndex, classify, fingerprint
from kb_ai.compile.ingest import RawFile, SkippedSource, Source, read_source, walk_raw
from kb_ai.store.lock import CompileLock
from kb_ai.compile.plan import (
    PLAN_WAVE,
    LLMPlanner,
    OfflinePlanner,
    PlanCatalog,
    PlanResult,
)
from kb_ai.compile.progress import Progress
from kb_ai.compile.report import CompileReport
from kb_ai.compile.state import (
    COMPILED,
    DUPLICATE,
    FAILED,
    FINAL_STATUSES,
    PLANNED,
    SKIPPED,
    ArticleRecord,
    CompileState,
    PlanTarget,
    SourceRecord,
    file_hash,
)
from kb_ai.compile.write import (
    WRITE_PROMPT,
    WRITE_SOURCE_TOKENS,
    ArticleJob,
    ArticleOutcome,
    ArticleWriter,
    Contribution,
    LLMWriter,
    OfflineWriter,
)
from kb_ai.config import Settings
from kb_ai.errors import ArticleFormatError, LLMError, NoWikiError, UnsafePathError
from kb_ai.faults import fault_point
from kb_ai.llm.tokens import estimate_tokens
from kb_ai.llm.usage import UsageMeter
from kb_ai.store.articles import iter_article_paths, load_article, read_article_text
from kb_ai.store.catalog import append_log, build_catalog, entry_from_article
from kb_ai.files import TEMP_PREFIX
from kb_ai.store.kb import KnowledgeBase

log = logging.getLogger(__name__)

MANIFEST_LABEL = ".kaas/manifest.json"


def run_compile(settings: Settings, *, full: bool = False, dry_run: bool = False, progress: bool | None = None,
                gateway=None) -> CompileReport:
    """Compile ``settings.kb``'s raw/ into its wiki/. Raises ``LockedError`` when another compile
    holds the lock, ``NoWikiError`` when there is no raw/ folder, fatal ``LLM*Error``s (bad model,
    key, unreachable server) after saving the work done; anything else goes into the report."""
    return asyncio.run(compile_async(settings, full=full, dry_run=dry_run, progress=progress, gateway=gateway))


async def compile_async(settings: Settings, *, full: bool = False, dry_run: bool = False,
                        progress: bool | None = None, gateway=None) -> CompileReport:
    """``run_compile`` for callers that already run an event loop."""
    kb = KnowledgeBase(settings.kb)
    if not kb.raw_dir.is_dir():
        raise NoWikiError(f"no raw/ folder in {kb.root} (run `kaas init` there, or pass --kb DIR)")
    if gateway is None and settings.effective_compile_model:
        from kb_ai.llm.gateway import build_gateway  # noqa: PLC0415 (offline compiles never load the gateway)

        # KAAS_COMPILE_MODEL alone is enough to compile with a model
        gateway = build_gateway(settings, kb, model=settings.effective_compile_model)
    compiler = Compiler(settings, kb, gateway=gateway, full=full, dry_run=dry_run, progress=Progress(progress))
    if dry_run:
        return await compiler.run()
    lock = CompileLock(kb.state_dir)
    lock.acquire()
    try:
        if lock.took_over:
            compiler.report.notes.append(lock.took_over)
        if lock.replaced:
            compiler.report.warnings.append(lock.replaced)
        return await compiler.run()
    finally:
        lock.release()


TOPIC_SUMMARY_PROMPT_TOKENS = 1_500  # estimate: instructions + a topic's catalog lines (capped at 3,000)


def _prompt_library(settings: Settings):
    from kb_ai.llm.prompts import PromptLibrary  # noqa: PLC0415

    return PromptLibrary(settings.prompts_dir) if settings.prompts_dir else PromptLibrary()


@dataclass
class SourceWork:
    """A source that needs something this run (new, changed, or with unfinished work)."""

    source: Source
    change: str  # new | changed | pending | full
    record: SourceRecord | None
    revision_of: str | None = None
    renamed_from: str | None = None  # a deleted source with this one's checksum (``_relink``)
    plan: list[PlanTarget] | None = None
    rejected: list[str] = field(default_factory=list)


class Compiler:
    """One compile run. Stages are methods; each fills its part of ``self.report``."""

    def __init__(self, settings: Settings, kb: KnowledgeBase, *, gateway, full: bool, dry_run: bool,
                 progress: Progress):
        self.settings = settings
        self.kb = kb
        self.gateway = gateway
        self.full = full
        self.dry_run = dry_run
        self.progress = progress
        self.mode = "llm" if gateway is not None else "offline"
        self.today = dt.date.today().isoformat()
        self.report = CompileReport(kb=str(kb.root), mode=self.mode, dry_run=dry_run, full=full,
                                    model=getattr(getattr(gateway, "config", None), "model", None))
        self.state: CompileState | None = None
        self.work: dict[str, SourceWork] = {}
        self.present: dict[str, RawFile] = {}
        self.deleted: list[str] = []
        self.became_duplicate: dict[str, list[str]] = {}
        self.written = False
        self.prompts = None
        self.plan_meter = UsageMeter()
        self.write_meter = UsageMeter()
        if self.mode == "llm":
            self.prompts = _prompt_library(settings)
            self.planner = LLMPlanner(gateway, self.prompts, self.plan_meter)
            self.writer = LLMWriter(gateway, self.prompts, self.write_meter, self.today)
        else:
            self.planner = OfflinePlanner()
            self.writer = OfflineWriter(self.today)

    # -- the run ------------------------------------------------------------------------------

    async def run(self) -> CompileReport:
        started = time.perf_counter()
        kb = self.kb
        if not self.dry_run:
            kb.wiki_dir.mkdir(parents=True, exist_ok=True)
            self._remove_temp_files()
        self.state = CompileState.load(kb.state_dir, kb.wiki_dir, read_only=self.dry_run)
        if self.state.resumed_units:
            self.report.notes.append(
                f"resumed an interrupted compile: {self.state.resumed_units} finished units of work kept"
            )
        if self.mode == "llm" and not self.dry_run and hasattr(self.gateway, "preflight"):
            self.gateway.preflight()
        self._check_prompts()
        try:
            self._stage_ingest()
            self._stage_dedup()
            await self._stage_plan()
            if self.dry_run:
                self._dry_run_plan()
            else:
                await self._stage_write()
                self._stage_index()
                await self._stage_topics()
            self._report_partial()
        finally:
            self.progress.done()
            self.state.close()
            # Damaged state met while loading or later (fingerprints at dedup, kept texts at write).
            self.report.warnings[:0] = [w for w in self.state.warnings if w not in self.report.warnings]
        self.report.seconds = round(time.perf_counter() - started, 3)
        if not self.dry_run:
            versions = self._prompt_versions()
            if any(self.state.prompts.get(k) != v for k, v in versions.items()):
                self.state.set_prompts(versions)
            self.state.save({"mode": self.mode, "model": self.report.model,
                             "compiled_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
            self.report.manifest = MANIFEST_LABEL
            if self._eventful():
                append_log(kb.wiki_dir, "compile", self._log_line())
        return self.report

    def _report_partial(self) -> None:
        """Sources compiled without part of their content (refused or oversized archive members,
        unreadable PDF pages, text cut, boilerplate removed), each part with its reason: the
        report, not only the manifest, says everything that was not compiled."""
        for path in sorted(self.present):
            work = self.work.get(path)
            record = self.state.sources.get(path)
            if work is not None:
                notes = work.source.notes
            elif record is not None and record.status not in (SKIPPED, DUPLICATE):
                notes = record.notes
            else:
                continue
            self.report.partial.extend({"path": path, "reason": note} for note in notes)

    def _remove_temp_files(self) -> None:
        """Temp files of an atomic write cut short by a kill (we hold the lock: none is live)."""
        for folder in (self.kb.wiki_dir, self.kb.state_dir):
            if folder.is_dir():
                for tmp in folder.rglob(f"{TEMP_PREFIX}*"):
                    try:
                        tmp.unlink()
                    except OSError:
                        pass

    def _prompt_versions(self) -> dict[str, str]:
        if self.mode == "llm":
            return {"compile_plan": self.planner.prompt_version, "compile_write": self.writer.prompt_version}
        return {"offline": OfflinePlanner.prompt_version}

    def _check_prompts(self) -> None:
        for name, version in self._prompt_versions().items():
            old = self.state.prompts.get(name)
            if old and old != version:
                self.report.prompt_changes.append(
                    f"{name} (was {old}, now {version}): only new and changed sources use it; "
                    "run `kaas compile --full` to re-plan and rewrite every article with it"
                )

    # -- 1. ingest ----------------------------------------------------------------------------

    def _stage_ingest(self) -> None:
        stage = self.report.stage("ingest")
        t0 = time.perf_counter()
        state = self.state
        raws = walk_raw(self.kb.root)
        self.present = {r.path: r for r in raws}
        counts = {"found": len(raws), "read": 0, "new": 0, "changed": 0, "unchanged": 0, "skipped": 0}
        # No state at all (a first compile, or .kaas/ deleted or damaged): a source that an article
        # names in its `sources:` feeds that article again instead of a duplicate of it.
        named = self._articles_naming_sources() if not state.sources and raws else {}
        self.progress.start("ingest", len(raws))
        for raw in raws:
            record = state.sources.get(raw.path)
            if record is None and raw.path in named:
                record = SourceRecord(raw.path, FAILED, articles=named[raw.path])  # no checksum: "changed"
            self.progress.advance(raw.path)
            fast = (not self.full and record is not None and record.status in FINAL_STATUSES
                    and record.size == raw.size and record.mtime_ns == raw.mtime_ns and not raw.skip_reason)
            if fast:
                counts["unchanged"] += 1
                if record.status == SKIPPED:
                    counts["skipped"] += 1
                    self.report.skipped.append({"path": raw.path, "reason": record.reason or ""})
                continue
            result = read_source(raw)
            counts["read"] += 1
            if isinstance(result, SkippedSource):
                counts["skipped"] += 1
                self.report.skipped.append({"path": raw.path, "reason": result.reason})
                # The file is still there: unreadable for now (saved as UTF-16, emptied while an
                # editor rewrites it), not deleted. It keeps its articles (their text is its last
                # readable version), so when it reads again it updates them, never a copy of them.
                new_record = SourceRecord(raw.path, SKIPPED, result.checksum, result.size, result.mtime_ns,
                                          reason=result.reason, articles=list(record.articles) if record else [])
                if record is None or record.to_json() != new_record.to_json():
                    state.record_source(new_record)
                    state.set_fingerprint(raw.path, None)
                continue
            if (record is not None and record.checksum == result.checksum and record.status in FINAL_STATUSES
                    and record.status != SKIPPED and not self.full):
                counts["unchanged"] += 1
                if (record.size, record.mtime_ns) != (result.size, result.mtime_ns):
                    record.size, record.mtime_ns = result.size, result.mtime_ns
                    state.record_source(record)
                continue
            if record is None or record.status == SKIPPED:
                change = "new"  # (a skipped file that now reads, e.g. after a fix, counts as new)
            elif record.checksum != result.checksum:
                change = "changed"
            elif self.full:
                change = "full"
            else:
                change = "pending"
            counts["new" if change == "new" else "changed" if change == "changed" else "unchanged"] += 1
            self.work[raw.path] = SourceWork(result, change, record)
        self.deleted = sorted(p for p in state.sources if p not in self.present)
        self._relink()
        self.progress.done()
        stage.counts = counts
        stage.seconds = round(time.perf_counter() - t0, 3)
        self.report.sources = {
            "total": len(raws), "new": counts["new"], "changed": counts["changed"],
            "unchanged": counts["unchanged"], "deleted": len(self.deleted), "skipped": counts["skipped"],
            "duplicates": 0, "revisions": 0,
        }

    def _relink(self) -> None:
        """A source keeps the articles it feeds when the manifest's link to them was lost, so an
        article is updated in place, never forked into a ``-2`` copy beside it:

        * a source renamed (or moved) in raw/: a new path with the checksum of a deleted source
          takes over that source's articles (the old path is removed from their ``sources:``);
        * an article moved or renamed by hand in wiki/: an article whose frontmatter names the
          source in ``sources:`` stands for the ones the manifest names that no longer exist (its
          record moves with it when the file is what kaas wrote).
        (No state at all is handled in ``_stage_ingest`` the same way, through ``sources:``.)"""
        state, wiki = self.state, self.kb.wiki_dir
        linked = lambda work: [a for a in (work.record.articles if work.record else []) if (wiki / a).is_file()]  # noqa: E731
        lost = [w for w in self.work.values()
                if w.record is None or not w.record.articles or len(linked(w)) < len(w.record.articles)]
        if not lost:
            return
        renamed: dict[str, str] = {}
        for path in self.deleted:
            record = state.sources[path]
            if record.articles and record.checksum:
                renamed.setdefault(record.checksum, path)
        named: dict[str, list[str]] | None = None
        for work in sorted(lost, key=lambda w: w.source.path):
            before = list(work.record.articles) if work.record else []
            articles = linked(work)
            old = renamed.pop(work.source.checksum, None) if work.record is None or not before else None
            if old is not None:
                articles += [a for a in state.sources[old].articles if (wiki / a).is_file() and a not in articles]
                work.renamed_from = old
                self.report.notes.append(f"{work.source.path}: renamed from {old}; it keeps its article(s)")
            if before and any(a not in articles for a in before):  # an article of it is gone from its path
                if named is None:
                    named = self._articles_naming_sources()
                found = [a for a in named.get(work.source.path, []) if a not in articles]
                for gone in (a for a in before if a not in articles):
                    self._move_record(gone, found)
                articles += found
            if articles != before:
                record = work.record or SourceRecord(work.source.path, FAILED)
                work.record = SourceRecord(**{**record.__dict__, "articles": articles})

    def _move_record(self, gone: str, candidates: list[str]) -> None:
        """The record of article ``gone`` (its file no longer exists) moves to the candidate that
        holds exactly the text kaas last wrote there (the same file, moved by hand)."""
        record = self.state.articles.get(gone)
        if record is None or not record.written_hash:
            return
        for path in candidates:
            if path not in self.state.articles and file_hash(self.kb.wiki_dir / path) == record.written_hash:
                self.state.record_article(ArticleRecord(path, record.written_hash, dict(record.merged),
                                                        record.hand_edited, record.orphaned, list(record.hand_lines)))
                self.state.drop_article(gone)
                self.report.notes.append(f"{gone} was moved to {path}; kaas follows it")
                return

    def _articles_naming_sources(self) -> dict[str, list[str]]:
        """raw/ path -> the articles whose frontmatter lists it in ``sources`` (saved answers and
        unreadable pages aside). An article whose exact text is still kept in .kaas/written/ was
        written by kaas, not by hand: its record is rebuilt too (only the manifest was lost)."""
        named: dict[str, list[str]] = {}
        if not self.kb.wiki_dir.is_dir():
            return named
        for path in iter_article_paths(self.kb.wiki_dir):
            try:
                article = load_article(self.kb.wiki_dir, path)
            except (ArticleFormatError, UnsafePathError, OSError):
                continue
            if article.kind != "article":
                continue
            for source in dict.fromkeys(article.sources):
                if source.startswith("raw/"):
                    named.setdefault(source, []).append(path)
            digest = file_hash(self.kb.wiki_dir / path)
            if path not in self.state.articles and self.state.written_text(digest, quiet=True) is not None:
                self.state.articles[path] = ArticleRecord(path, written_hash=digest)
        if named and not self.state.sources:
            self.report.notes.append(
                f"no compile state: {len(named)} sources found again in the `sources:` of the articles they feed")
        return named

    # -- 2. dedup -----------------------------------------------------------------------------

    def _stage_dedup(self) -> None:
        stage = self.report.stage("dedup")
        t0 = time.perf_counter()
        state = self.state
        for path in self.deleted:
            state.set_fingerprint(path, None)
        # Copies whose original vanished or changed are compiled in their own right now.
        for path, record in sorted(state.sources.items()):
            if record.status == DUPLICATE and path in self.present and path not in self.work:
                original = record.duplicate_of
                if original not in self.present or original in self.work or \
                        state.sources.get(original, record).status == DUPLICATE:
                    result = read_source(self.present[path])
                    if isinstance(result, Source):
                        self.work[path] = SourceWork(result, "changed", record)
        counts = {"checked": len(self.work), "exact": 0, "near": 0, "revisions": 0, "boilerplate_paragraphs": 0}
        if not self.work:
            self._report_known_duplicates()
            stage.counts = counts
            stage.seconds = round(time.perf_counter() - t0, 3)
            return
        fingerprints = state.fingerprints()
        index = DedupIndex()
        for path in sorted(state.sources):
            record = state.sources[path]
            if path in self.work or path not in self.present or record.status not in (COMPILED, PLANNED, FAILED):
                continue
            fp = fingerprints.get(path)
            if fp is None:  # state from a run killed before it saved fingerprints
                result = read_source(self.present[path])
                if not isinstance(result, Source):
                    continue
                fp = fingerprint(result.text)
                state.set_fingerprint(path, fp)
            index.add(path, fp, record.title or "")
        self.progress.start("dedup", len(self.work))
        # Oldest first, then the simplest name: "faq.html" is the original of "faq (copy).html",
        # and a later-dated near copy is a revision of the earlier one, not the other way round.
        for path in sorted(self.work, key=lambda p: (self.work[p].source.date or "9999", len(p), p)):
            work = self.work[path]
            self.progress.advance(path)
            fp = fingerprint(work.source.text)
            state.set_fingerprint(path, fp)
            match = index.match(fp, work.source.title)
            verdict = None
            if match is not None:
                other = match[0]
                other_date = self.work[other].source.date if other in self.work else \
                    (state.sources[other].date if other in state.sources else None)
                verdict = classify(match, work.source.date, other_date)
            if verdict is not None and verdict.kind == "revision":
                work.revision_of = verdict.of
                counts["revisions"] += 1
                index.add(path, fp, work.source.title)
                self.report.duplicates.append({"path": path, "of": verdict.of, "kind": "revision",
                                               "similarity": verdict.similarity})
            elif verdict is not None:
                counts[verdict.kind] += 1
                self._mark_duplicate(work, verdict.of, verdict.kind, verdict.similarity)
            else:
                index.add(path, fp, work.source.title)
        for path in [p for p, w in self.work.items() if w.change == "duplicate"]:
            del self.work[path]
        boilerplate = Boilerplate.from_fingerprints(
            {p: fp for p, fp in fingerprints.items()
             if p in self.present and (p in self.work or state.sources.get(p, SourceRecord(p, "")).status != DUPLICATE)}
        )
        for path, work in self.work.items():
            text, removed = boilerplate.strip(path, work.source.text)
            if removed:
                work.source.text = text
                work.source.notes.append(f"{removed} boilerplate paragraph(s) removed")
                counts["boilerplate_paragraphs"] += removed
        if not self.dry_run:
            state.save_fingerprints()
        self._report_known_duplicates()
        self.progress.done()
        stage.counts = counts
        stage.seconds = round(time.perf_counter() - t0, 3)

    def _mark_duplicate(self, work: SourceWork, of: str, kind: str, similarity: float) -> None:
        source = work.source
        previous = work.record.articles if work.record else []
        if previous:
            self.became_duplicate[source.path] = list(previous)
        record = SourceRecord(source.path, DUPLICATE, source.checksum, source.size, source.mtime_ns, source.kind,
                              source.title, source.date, duplicate_of=of, duplicate_kind=kind,
                              similarity=similarity, notes=source.notes)
        self.state.record_source(record)
        work.change = "duplicate"

    def _report_known_duplicates(self) -> None:
        for path, record in sorted(self.state.sources.items()):
            if record.status == DUPLICATE and path in self.present:
                self.report.duplicates.append({"path": path, "of": record.duplicate_of,
                                               "kind": record.duplicate_kind or "exact",
                                               "similarity": record.similarity or 1.0})
        revisions = sum(1 for d in self.report.duplicates if d["kind"] == "revision")
        self.report.sources["duplicates"] = len(self.report.duplicates) - revisions
        self.report.sources["revisions"] = revisions + sum(
            1 for p, r in self.state.sources.items() if r.revision_of and p in self.present and p not in self.work
        )

    # -- 3. plan ------------------------------------------------------------------------------

    def _plan_catalog(self, replayed: set[str] = frozenset()) -> PlanCatalog:
        """The wiki as the planner starts from. ``replayed``: new articles of reused plans, left
        out here because replaying those plans adds them where an uninterrupted run did."""
        if not self.kb.wiki_dir.is_dir():
            catalog = None
        elif self.kb.master_index.exists():
            catalog = self.kb.catalog_store.get()
        else:
            catalog = build_catalog(self.kb.wiki_dir)
        items = list(catalog.entries) if catalog else []
        known = {i.path for i in items}
        # Articles written by a run that was killed before it re-indexed, and articles sources
        # were linked to again (``_relink``) that the catalog does not list yet.
        linked = {a for w in self.work.values() if w.record for a in w.record.articles}
        for path in sorted(set(self.state.articles) | linked):
            if path in known or path in replayed:
                continue
            try:
                article = load_article(self.kb.wiki_dir, path)
            except (FileNotFoundError, ArticleFormatError, UnsafePathError, OSError):
                continue
            items.append(entry_from_article(article))
        return PlanCatalog(items)

    async def _stage_plan(self) -> None:
        stage = self.report.stage("plan")
        t0 = time.perf_counter()
        counts = {"planned": 0, "reused": 0, "revisions": 0, "failed": 0}
        state = self.state
        to_plan = [w for p, w in sorted(self.work.items()) if w.revision_of is None]
        revisions = sorted((w for w in self.work.values() if w.revision_of is not None),
                           key=lambda w: (w.source.date or "9999", len(w.source.path), w.source.path))
        if not to_plan and not revisions:
            stage.counts = counts
            stage.seconds = round(time.perf_counter() - t0, 3)
            return
        need: list[SourceWork] = []
        reused: set[str] = set()
        planned_new = {t.path for w in to_plan if w.record is not None and w.record.status == PLANNED
                       for t in (w.record.plan or []) if t.new}

        def still_there(target: PlanTarget) -> bool:
            return target.new or target.path in planned_new or (self.kb.wiki_dir / target.path).is_file()

        for work in to_plan:
            record = work.record
            if (record is not None and record.status == PLANNED and record.checksum == work.source.checksum
                    and record.plan and record.plan_prompt == self.planner.prompt_version and work.change == "pending"
                    and all(still_there(t) for t in record.plan)):
                # Planned by an interrupted run (an article it was to update that has since been
                # deleted by hand makes it plan again, against the wiki as it now is).
                work.plan = record.plan
                reused.add(work.source.path)
                counts["reused"] += 1
            else:
                need.append(work)
        catalog = self._plan_catalog({t.path for w in to_plan if w.source.path in reused
                                      for t in (w.plan or []) if t.new})
        self.catalog = catalog
        if self.dry_run and self.mode == "llm":
            self._estimate(need, revisions, catalog)
            stage.counts = {"to_plan": len(need), "reused": counts["reused"], "revisions": len(revisions)}
            stage.seconds = round(time.perf_counter() - t0, 3)
            return
        semaphore = asyncio.Semaphore(self.settings.concurrency)
        self.progress.start("plan", len(need) + len(revisions))

        async def propose(work: SourceWork):
            async with semaphore:
                previous = work.record.articles if work.record else []
                try:
                    return await self.planner.propose(work.source, catalog, previous)
                except LLMError as exc:
                    if exc.stops_compile:
                        raise
                    return exc

        # Waves over *every* source to plan, the reused ones included, so that a resumed compile
        # sees, source for source, the catalog an uninterrupted one saw: each wave is proposed
        # against the articles planned by the waves before it, then resolved in path order (a
        # reused plan adds its new articles to the catalog exactly where it was made).
        for start in range(0, len(to_plan), PLAN_WAVE):
            wave = to_plan[start:start + PLAN_WAVE]
            fresh = [w for w in wave if w.source.path not in reused]
            proposals = dict(zip((w.source.path for w in fresh), await asyncio.gather(*(propose(w) for w in fresh))))
            for work in wave:
                if work.source.path in reused:
                    for target in work.plan or []:
                        if target.new:
                            catalog.add_target(target)
                    continue
                proposal = proposals[work.source.path]
                self.progress.advance(work.source.path)
                if isinstance(proposal, LLMError):
                    counts["failed"] += 1
                    self._record_failed(work, f"plan failed: {proposal.message}")
                    continue
                previous = work.record.articles if work.record else []
                result: PlanResult = self.planner.resolve(proposal, work.source, catalog, previous)
                for target in result.targets:
                    if target.new:
                        catalog.add_target(target)
                for detail in result.rejected:
                    self.report.rejected.append({"source": work.source.path, "detail": detail})
                for note in result.notes:
                    self.report.notes.append(f"{work.source.path}: {note}")
                work.plan = result.targets
                counts["planned"] += 1
                self._record_planned(work)
        for work in revisions:
            self.progress.advance(work.source.path)
            original = self.work.get(work.revision_of)
            targets = original.plan if original is not None else None
            if targets is None:
                record = state.sources.get(work.revision_of)
                targets = [self._target_for(p, catalog) for p in (record.articles if record else [])]
                targets = [t for t in targets if t is not None] or None
            if not targets:
                # The original has no article (yet): plan the revision as a source of its own.
                proposal = await propose(work)
                if isinstance(proposal, LLMError):
                    self._record_failed(work, f"plan failed: {proposal.message}")
                    continue
                targets = self.planner.resolve(proposal, work.source, catalog,
                                               work.record.articles if work.record else []).targets
                for target in targets:
                    if target.new:
                        catalog.add_target(target)
            work.plan = [PlanTarget(t.path, t.title, t.summary, t.topic, t.new, "revision", t.access) for t in targets]
            counts["revisions"] += 1
            self._record_planned(work)
        self.progress.done()
        stage.counts = counts
        stage.add_usage(self.plan_meter)
        stage.seconds = round(time.perf_counter() - t0, 3)

    def _target_for(self, path: str, catalog: PlanCatalog) -> PlanTarget | None:
        item = catalog.items.get(path)
        return PlanTarget.update_of(item) if item else None

    def _record_planned(self, work: SourceWork) -> None:
        source = work.source
        previous = work.record.articles if work.record else []
        record = SourceRecord(source.path, PLANNED, source.checksum, source.size, source.mtime_ns, source.kind,
                              source.title, source.date, revision_of=work.revision_of, articles=list(previous),
                              plan=work.plan, plan_prompt=self.planner.prompt_version, notes=source.notes)
        if not self.dry_run:
            self.state.record_source(record)
        fault_point("compile.plan.after_record")

    def _record_failed(self, work: SourceWork, reason: str) -> None:
        source = work.source
        self.report.failed.append({"path": source.path, "reason": reason})
        work.plan = None
        if not self.dry_run:
            previous = work.record.articles if work.record else []
            self.state.record_source(SourceRecord(source.path, FAILED, source.checksum, source.size, source.mtime_ns,
                                                  source.kind, source.title, source.date, reason=reason,
                                                  articles=list(previous)))

    # -- dry run ------------------------------------------------------------------------------

    def _dry_run_plan(self) -> None:
        for path, work in sorted(self.work.items()):
            action = {"new": "create/update", "changed": "re-plan (changed)", "pending": "finish (interrupted)",
                      "full": "re-plan (--full)"}.get(work.change, work.change)
            if work.revision_of:
                action = f"revision of {work.revision_of}"
            articles = [t.path + (" (new)" if t.new else "") for t in (work.plan or [])]
            if not articles and self.mode == "llm":
                articles = ["(decided by the model)"]
            self.report.plan.append({"source": path, "action": action, "articles": articles})
        for path in self.deleted:
            record = self.state.sources[path]
            self.report.plan.append({"source": path, "action": "deleted: remove from sources:",
                                     "articles": list(record.articles)})
        if self.mode == "offline":
            self.report.estimate = {"llm_calls": 0, "plan_calls": 0, "write_calls": 0, "prompt_tokens": 0,
                                    "completion_tokens": 0, "cost_usd": 0.0}

    def _estimate(self, need: list[SourceWork], revisions: list[SourceWork], catalog: PlanCatalog) -> None:
        """Tokens and calls a real run would spend: plan prompts are rendered exactly; writes are
        estimated from source and article sizes (one write per article fed)."""
        prompt_tokens = completion_tokens = 0
        for work in need:
            previous = work.record.articles if work.record else []
            messages, _ = self.planner.messages(work.source, catalog, previous)
            prompt_tokens += sum(estimate_tokens(m["content"]) for m in messages)
            completion_tokens += 150
        write_calls = 0
        overhead = sum(estimate_tokens(m["content"]) for m in self.prompts.render(
            WRITE_PROMPT, mode="create", article={"path": "", "title": "", "topic": "", "summary": "", "text": "",
                                                  "outline": [], "partial": False, "hand_edited": False},
            contributions=[], today=self.today, summary_limit=200, rejected=None))
        for work in need + revisions:
            source_tokens = min(estimate_tokens(work.source.text), WRITE_SOURCE_TOKENS)
            targets = (work.record.articles if work.record else []) or [None]
            if work.revision_of and work.revision_of in self.state.sources:
                targets = self.state.sources[work.revision_of].articles or [None]
            for target in targets:
                article_tokens = 0
                if target:
                    try:
                        article_tokens = estimate_tokens(read_article_text(self.kb.wiki_dir / target, target))
                    except (OSError, ArticleFormatError):  # missing, a FIFO, not UTF-8: estimated without it
                        article_tokens = 0
                write_calls += 1
                prompt_tokens += overhead + source_tokens + article_tokens
                completion_tokens += min(article_tokens + source_tokens // 2 + 200, 4000)
        # Topic summaries: one call per topic whose articles change; the topics a source will
        # feed are known only after planning, so its folder's topic stands in for them.
        topic_calls = len({work.source.topic_hint for work in need + revisions})
        prompt_tokens += topic_calls * TOPIC_SUMMARY_PROMPT_TOKENS
        completion_tokens += topic_calls * 60
        cost = None
        model = self.report.model
        if model:
            from kb_ai.llm.transports.litellm import token_cost  # noqa: PLC0415

            cost = token_cost(model, prompt_tokens, completion_tokens)
            cost = None if cost is None else round(cost, 6)
        self.report.estimate = {"llm_calls": len(need) + write_calls + topic_calls, "plan_calls": len(need),
                                "write_calls": write_calls, "topic_calls": topic_calls, "prompt_tokens": prompt_tokens,
                                "completion_tokens": completion_tokens, "cost_usd": cost}

    # -- 4. write -----------------------------------------------------------------------------

    def _jobs(self) -> dict[str, ArticleJob]:
        state = self.state
        jobs: dict[str, ArticleJob] = {}

        def job_for(target: PlanTarget) -> ArticleJob:
            if target.path not in jobs:
                jobs[target.path] = ArticleJob(target.path, target)
            return jobs[target.path]

        def detach(path: str, article: str) -> None:
            target = PlanTarget(article, "", "", article.split("/", 1)[0], new=False)
            job_for(target).detach.add(path)

        for path, work in sorted(self.work.items()):
            if not work.plan:
                continue
            for target in work.plan:
                record = state.articles.get(target.path)
                merged = record.merged.get(path) if record else None
                if merged == work.source.checksum and not self.full:
                    continue
                if (work.renamed_from and record is not None and not self.full
                        and record.merged.get(work.renamed_from) == work.source.checksum):
                    job_for(target).adopt[path] = work.source.checksum  # its text is there: a new name only
                    continue
                status = "revision" if work.revision_of else ("revised" if merged else "new")
                job_for(target).contributions.append(Contribution(work.source, status))
            previous = work.record.articles if work.record else []
            for article in previous:
                if article not in {t.path for t in work.plan}:
                    detach(path, article)
        for path in self.deleted:
            record = state.sources[path]
            for article in record.articles:
                detach(path, article)
        for path, articles in self.became_duplicate.items():
            for article in articles:
                detach(path, article)
        return jobs

    async def _stage_write(self) -> None:
        stage = self.report.stage("write")
        t0 = time.perf_counter()
        state = self.state
        jobs = self._jobs()
        writer = ArticleWriter(self.kb.wiki_dir, state, self.writer, self.today)
        semaphore = asyncio.Semaphore(self.settings.concurrency)
        self.progress.start("write", len(jobs))
        outcomes: list[ArticleOutcome] = []

        async def run(job: ArticleJob) -> ArticleOutcome:
            async with semaphore:
                outcome = await writer.run(job)
                self.progress.advance(job.path)
                return outcome

        outcomes = list(await asyncio.gather(*(run(jobs[p]) for p in sorted(jobs))))
        counts = {"articles": len(jobs), "created": 0, "updated": 0, "unchanged": 0, "held": 0, "failed": 0,
                  "detached": 0, "trail_lines": 0}
        for outcome in outcomes:
            counts[outcome.action] = counts.get(outcome.action, 0) + 1
            counts["trail_lines"] += outcome.trails
            if outcome.action == "created":
                self.report.created.append(outcome.path)
            elif outcome.action == "updated":
                self.report.updated.append(outcome.path)
            elif outcome.action == "detached":
                self.report.detached.append(outcome.path)
            elif outcome.action == "held":
                self.report.held.append({"path": outcome.path, "reason": outcome.reason})
            elif outcome.action == "failed":
                self.report.failed.append({"path": outcome.path, "reason": outcome.reason})
            for warning in outcome.warnings:
                self.report.warnings.append(f"{outcome.path}: {warning}")
            if outcome.action in ("created", "updated", "detached"):
                self.written = True
        # Sources whose every article now holds their current version are compiled.
        for path, work in sorted(self.work.items()):
            if not work.plan:
                continue
            targets = [t.path for t in work.plan]
            done = all((state.articles.get(t) and state.articles[t].merged.get(path) == work.source.checksum)
                       for t in targets)
            record = state.sources.get(path)
            if done and record is not None:
                record = SourceRecord.from_json(record.to_json())
                record.status = COMPILED
                record.articles = targets
                record.reason = None
                state.record_source(record)
        for path in self.deleted:
            state.drop_source(path)
        for path in self.became_duplicate:
            record = state.sources.get(path)
            if record is not None and record.articles:
                record.articles = []
                state.record_source(record)
        # Coverage for duplicates: the articles their original feeds.
        for path, record in sorted(state.sources.items()):
            if record.status == DUPLICATE and record.duplicate_of in state.sources:
                articles = state.sources[record.duplicate_of].articles
                if record.articles != articles:
                    record.articles = list(articles)
                    state.record_source(record)
        self.report.orphaned = sorted(p for p, r in state.articles.items()
                                      if r.orphaned and (self.kb.wiki_dir / p).is_file())
        self.progress.done()
        stage.counts = counts
        stage.add_usage(self.write_meter)
        stage.seconds = round(time.perf_counter() - t0, 3)

    # -- 5. index -----------------------------------------------------------------------------

    def _stage_index(self) -> None:
        stage = self.report.stage("index")
        t0 = time.perf_counter()
        if self.written or self.full or not self.kb.master_index.exists() or self.state.resumed_units:
            result = self.kb.reindex()
            stage.counts = {"articles": result.articles, "topics": result.topics, "written": int(result.written)}
            self.report.warnings.extend(w for w in result.warnings if "no summary" not in w)
        else:
            stage.counts = {"skipped": 1}
        stage.seconds = round(time.perf_counter() - t0, 3)

    # -- 6. topic summaries (with a model) -------------------------------------------------------

    async def _stage_topics(self) -> None:
        if self.mode != "llm":
            return  # offline: kaas index wrote the deterministic summaries
        from kb_ai.compile.topic_summaries import refresh_topic_summaries  # noqa: PLC0415

        stage = self.report.stage("topics")
        t0 = time.perf_counter()
        meter = UsageMeter()
        written, warnings = await refresh_topic_summaries(self.kb, self.gateway, self.prompts, meter)
        self.report.warnings.extend(warnings)
        stage.counts = {"summaries": written}
        stage.add_usage(meter)
        stage.seconds = round(time.perf_counter() - t0, 3)

    def _eventful(self) -> bool:
        """Whether this run is worth a line in wiki/log.md: a no-op compile writes nothing."""
        r = self.report
        return bool(self.written or r.failed or r.held or r.created or r.updated or r.detached
                    or any(r.sources.get(k) for k in ("new", "changed", "deleted")))

    def _log_line(self) -> str:
        s, u = self.report.sources, self.report.usage
        text = (f"{s.get('total', 0)} sources ({s.get('new', 0)} new, {s.get('changed', 0)} changed, "
                f"{s.get('deleted', 0)} deleted, {s.get('skipped', 0)} skipped); {len(self.report.created)} articles "
                f"created, {len(self.report.updated)} updated")
        if self.report.held:
            text += f", {len(self.report.held)} left alone"
        if self.report.failed:
            text += f", {len(self.report.failed)} failed"
        if self.mode == "llm":
            text += f"; {u['llm_calls']} LLM calls, ${u['cost_usd']:.4f}"
        else:
            text += "; offline mode"
        return text
