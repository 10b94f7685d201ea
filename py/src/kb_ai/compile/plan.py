"""Compile, stage 3 (plan): decide, per source, which articles it updates and which it creates.

The planners (offline, model) are in ``planners.py``, the catalog they plan against in
``plan_catalog.py``. Here: every source to plan goes through the same two steps, ``propose``
(the planner's raw answer, in parallel) and ``settle`` (resolved against the catalog as it then
is, its refused parts and notes reported, a failure recorded), whether it is a source of its own
or a revision whose original has no article yet. Plans run in fixed-size waves in path order,
each wave seeing the articles the previous waves planned, so the result does not depend on
timing or concurrency; a plan journaled by an interrupted run is reused.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from kb_ai.compile.context import CompileRun, Engine, SourceWork, stage_timer
from kb_ai.compile.plan_catalog import PlanCatalog
from kb_ai.compile.records import FAILED, PLANNED, PlanTarget, SourceRecord
from kb_ai.compile.topic_rule import assign_topics
from kb_ai.errors import ArticleFormatError, LLMError, UnsafePathError
from kb_ai.faults import fault_point
from kb_ai.store.access import derived_access
from kb_ai.store.articles import load_article
from kb_ai.store.catalog import build_catalog, entry_from_article

PLAN_WAVE = 8  # sources planned in parallel per wave; fixed so plans do not depend on --concurrency


async def plan(run: CompileRun, engine: Engine, work: dict[str, SourceWork]) -> None:
    """Give every source in ``work`` its plan (``SourceWork.plan``; None when planning failed,
    reported). A dry run with a model plans nothing: it estimates what planning would cost."""
    with stage_timer(run.report, "plan") as stage:
        counts = {"planned": 0, "reused": 0, "revisions": 0, "renamed": 0, "failed": 0}
        stage.counts = counts
        renamed = [w for _, w in sorted(work.items()) if w.revision_of is None and w.renamed_same and w.previous]
        to_plan = [w for _, w in sorted(work.items()) if w.revision_of is None and w not in renamed]
        revisions = sorted((w for w in work.values() if w.revision_of is not None),
                           key=lambda w: (w.source.date or "9999", len(w.source.path), w.source.path))
        if not to_plan and not revisions and not renamed:
            return
        need, reused = _reusable(run, engine, to_plan, counts)
        catalog = plan_catalog(run, work, {t.path for w in to_plan if w.path in reused
                                           for t in (w.plan or []) if t.new})
        for item in renamed:  # the same document under a new name: its articles, no planner asked
            if all(p in catalog.items for p in item.previous):
                item.plan = [PlanTarget.update_of(catalog.items[p], reason="renamed") for p in item.previous]
                counts["renamed"] += 1
                if not run.dry_run:
                    record_planned(run, engine, item)
            else:
                to_plan.append(item)
                need.append(item)
        to_plan.sort(key=lambda w: w.path)
        need.sort(key=lambda w: w.path)
        assign_topics(run, need + revisions, catalog)
        if run.dry_run and engine.mode == "llm":
            from kb_ai.compile.estimate import estimate  # noqa: PLC0415

            run.report.estimate = estimate(run, engine, need, revisions, catalog)
            stage.counts = {"to_plan": len(need), "reused": counts["reused"], "revisions": len(revisions)}
            return
        if hasattr(engine.planner, "use_corpus"):  # an update must share enough with its source
            engine.planner.use_corpus([w.source.text for w in work.values()])
        planning = _Planning(run, engine, catalog, counts)
        run.progress.start("plan", len(need) + len(revisions))
        await planning.waves(to_plan, reused)
        await planning.revisions(revisions, work)
        run.progress.done()
        stage.add_usage(engine.plan_meter)


def _reusable(run: CompileRun, engine: Engine, to_plan: list[SourceWork],
              counts: dict[str, int]) -> tuple[list[SourceWork], set[str]]:
    """(the sources to plan now, the paths whose plan an interrupted run journaled and that is
    reused). An article such a plan was to update that has since been deleted by hand makes the
    source plan again, against the wiki as it now is."""
    planned_new = {t.path for w in to_plan if w.record is not None and w.record.status == PLANNED
                   for t in (w.record.plan or []) if t.new}

    def still_there(target: PlanTarget) -> bool:
        return target.new or target.path in planned_new or (run.kb.wiki_dir / target.path).is_file()

    need: list[SourceWork] = []
    reused: set[str] = set()
    for work in to_plan:
        record = work.record
        if (record is not None and record.status == PLANNED and record.checksum == work.source.checksum
                and record.plan and record.plan_prompt == engine.planner.prompt_version and work.change == "pending"
                and all(still_there(t) for t in record.plan)):
            work.plan = record.plan
            reused.add(work.path)
            counts["reused"] += 1
        else:
            need.append(work)
    return need, reused


def plan_catalog(run: CompileRun, work: dict[str, SourceWork], replayed: set[str] = frozenset()) -> PlanCatalog:
    """The wiki as the planner starts from. ``replayed``: new articles of reused plans, left
    out here because replaying those plans adds them where an uninterrupted run did."""
    kb = run.kb
    if not kb.wiki_dir.is_dir():
        catalog = None
    elif kb.master_index.exists():
        catalog = kb.catalog_store.get()
    else:
        catalog = build_catalog(kb.wiki_dir)
    items = list(catalog.entries) if catalog else []
    known = {i.path for i in items}
    # Articles written by a run that was killed before it re-indexed, and articles sources
    # were linked to again (``relink``) that the catalog does not list yet.
    linked = {a for w in work.values() for a in w.previous}
    for path in sorted(set(run.state.articles) | linked):
        if path in known or path in replayed:
            continue
        try:
            article = load_article(kb.wiki_dir, path)
        except (FileNotFoundError, ArticleFormatError, UnsafePathError, OSError):
            continue
        items.append(entry_from_article(article))
    catalog = PlanCatalog(items)
    for path, record in sorted(run.state.sources.items()):
        for article in record.articles:
            catalog.add_source(article, path)
    return catalog


class _Planning:
    """One plan stage: the catalog grows as plans are settled, in a fixed order."""

    def __init__(self, run: CompileRun, engine: Engine, catalog: PlanCatalog, counts: dict[str, int]):
        self.run = run
        self.engine = engine
        self.catalog = catalog
        self.counts = counts
        self.semaphore = asyncio.Semaphore(run.settings.concurrency)

    async def propose(self, work: SourceWork):
        """The planner's raw answer for ``work``, or the (non-fatal) ``LLMError`` it failed with."""
        async with self.semaphore:
            try:
                return await self.engine.planner.propose(work.source, self.catalog, work.previous)
            except LLMError as exc:
                if exc.stops_compile:
                    raise
                return exc

    def settle(self, work: SourceWork, proposal) -> list[PlanTarget] | None:
        """Resolve a proposal against the catalog as it is now: its new articles join the
        catalog, what was refused of the model's answer and the planner's notes go into the
        report. A new article of a source that includes restricted files gets their rule too
        (``Source.access``, with the plan's own). A failed proposal is recorded as the source's
        failure (None)."""
        if isinstance(proposal, LLMError):
            self.counts["failed"] += 1
            record_failed(self.run, work, f"plan failed: {proposal.message}")
            return None
        result = self.engine.planner.resolve(proposal, work.source, self.catalog, work.previous)
        for target in result.targets:
            if target.new and work.source.access is not None:  # it includes restricted files
                rule = derived_access([tuple(target.access) if target.access is not None else None,
                                       work.source.access])
                target.access = list(rule)
            self.catalog.add_target(target, work.path)
        for detail in result.rejected:
            self.run.report.rejected.append({"source": work.path, "detail": detail})
        for note in result.notes:
            self.run.report.notes.append(f"{work.path}: {note}")
        return result.targets

    async def waves(self, to_plan: list[SourceWork], reused: set[str]) -> None:
        """Waves over *every* source to plan, the reused ones included, so that a resumed compile
        sees, source for source, the catalog an uninterrupted one saw: each wave is proposed
        against the articles planned by the waves before it, then settled in path order (a
        reused plan adds its new articles to the catalog exactly where it was made)."""
        for start in range(0, len(to_plan), PLAN_WAVE):
            wave = to_plan[start:start + PLAN_WAVE]
            fresh = [w for w in wave if w.path not in reused]
            proposals = dict(zip((w.path for w in fresh), await asyncio.gather(*(self.propose(w) for w in fresh)),
                                 strict=True))
            for work in wave:
                if work.path in reused:
                    for target in work.plan or []:
                        self.catalog.add_target(target, work.path)
                    continue
                self.run.progress.advance(work.path)
                targets = self.settle(work, proposals[work.path])
                if targets is None:
                    continue
                work.plan = targets
                self.counts["planned"] += 1
                record_planned(self.run, self.engine, work)

    async def revisions(self, revisions: list[SourceWork], work: dict[str, SourceWork]) -> None:
        """A revision goes into the articles of its original; when the original has none (yet),
        it is planned as a source of its own, by the same ``propose`` and ``settle``."""
        for item in revisions:
            self.run.progress.advance(item.path)
            targets = self._original_targets(item, work)
            if not targets:
                targets = self.settle(item, await self.propose(item))
                if targets is None:
                    continue
            item.plan = [replace(t, reason="revision") for t in targets]
            self.counts["revisions"] += 1
            record_planned(self.run, self.engine, item)

    def _original_targets(self, item: SourceWork, work: dict[str, SourceWork]) -> list[PlanTarget] | None:
        original = work.get(item.revision_of)
        targets = original.plan if original is not None else None
        if targets is None:
            record = self.run.state.sources.get(item.revision_of)
            targets = [PlanTarget.update_of(self.catalog.items[p]) for p in (record.articles if record else [])
                       if p in self.catalog.items] or None
        return targets


def record_planned(run: CompileRun, engine: Engine, work: SourceWork) -> None:
    """Journal a source's plan: a killed run resumes from it."""
    source = work.source
    record = SourceRecord(source.path, PLANNED, source.checksum, source.size, source.mtime_ns, source.kind,
                          source.title, source.date, revision_of=work.revision_of, articles=list(work.previous),
                          plan=work.plan, plan_prompt=engine.planner.prompt_version, notes=source.notes)
    if not run.dry_run:
        run.state.record_source(record)
    fault_point("compile.plan.after_record")


def record_failed(run: CompileRun, work: SourceWork, reason: str) -> None:
    """A source whose plan failed: reported, and retried on the next run."""
    source = work.source
    run.report.failed.append({"path": source.path, "reason": reason})
    work.plan = None
    if not run.dry_run:
        run.state.record_source(SourceRecord(source.path, FAILED, source.checksum, source.size, source.mtime_ns,
                                             source.kind, source.title, source.date, reason=reason,
                                             articles=list(work.previous)))
