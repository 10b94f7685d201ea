"""``kaas compile``: raw/ -> wiki/ in seven stages (ingest, dedup, plan, write, autolink, index, topics).

``run_compile`` is the service function the CLI (and anything else) calls. Each stage is a
function in the module of its name, with its inputs and outputs explicit; they share a
``CompileRun`` (``context.py``: the KB, the ``CompileState`` of manifest + journal, the report)
so that a compile is incremental (only new, changed and deleted sources cost anything),
resumable (every finished unit of work is journaled; a rerun continues), and reproducible
(deterministic order, temperature 0, cached).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from dataclasses import replace

from kb_ai.compile.autolink import autolink
from kb_ai.compile.context import CompileRun, Engine
from kb_ai.compile.dedup import dedup
from kb_ai.compile.estimate import dry_run_plan
from kb_ai.compile.index import index, topics
from kb_ai.compile.ingest import Ingested, ingest
from kb_ai.store.lock import CompileLock
from kb_ai.compile.plan import plan
from kb_ai.compile.planners import LLMPlanner, OfflinePlanner
from kb_ai.compile.progress import Progress
from kb_ai.compile.records import DUPLICATE, SKIPPED
from kb_ai.compile.related import RelatedArticles
from kb_ai.compile.report import CompileInterrupted, CompileReport
from kb_ai.compile.state import CompileState
from kb_ai.compile.write import write
from kb_ai.compile.checked_write import CheckedWriter
from kb_ai.compile.writers import LLMWriter, OfflineWriter
from kb_ai.config import Settings
from kb_ai.errors import NoWikiError
from kb_ai.llm.config import LOCAL_CONCURRENCY
from kb_ai.store.catalog import append_log
from kb_ai.files import TEMP_PREFIX
from kb_ai.store.kb import KnowledgeBase

MANIFEST_LABEL = ".kaas/manifest.json"
PROGRESS_REFRESH_SECONDS = 0.5


def run_compile(settings: Settings, *, full: bool = False, dry_run: bool = False, progress: "bool | Progress | None" = None,
                gateway=None) -> CompileReport:
    """Compile ``settings.kb``'s raw/ into its wiki/. Raises ``LockedError`` when another compile
    holds the lock, ``NoWikiError`` when there is no raw/ folder, fatal ``LLM*Error``s (bad model,
    key, unreachable server) after saving the work done; anything else goes into the report."""
    made: list[CompileReport] = []
    try:
        return asyncio.run(compile_async(settings, full=full, dry_run=dry_run, progress=progress, gateway=gateway,
                                         on_report=made.append))
    except KeyboardInterrupt:  # Ctrl-C: say what was saved (the journal keeps it for the next run)
        if not made:
            raise
        report = made[0]
        if report.interrupted is None:
            report.interrupted = {"stage": report.stages[-1].name if report.stages else None}
        raise CompileInterrupted(report) from None


async def compile_async(settings: Settings, *, full: bool = False, dry_run: bool = False,
                        progress: "bool | Progress | None" = None, gateway=None, on_report=None) -> CompileReport:
    """``run_compile`` for callers that already run an event loop (``on_report``: called with the
    report as soon as it exists, so an interrupted compile can still say what it did)."""
    kb = KnowledgeBase(settings.kb)
    if not kb.raw_dir.is_dir():
        raise NoWikiError(f"no raw/ folder in {kb.root} (run `kaas init` there, or pass --kb DIR)")
    if gateway is None and settings.effective_compile_model:
        from kb_ai.llm.gateway import build_gateway  # noqa: PLC0415 (offline compiles never load the gateway)

        # KAAS_COMPILE_MODEL alone is enough to compile with a model
        gateway = build_gateway(settings, kb, model=settings.effective_compile_model)
    settings = replace(settings, concurrency=_units_in_parallel(settings, gateway))
    today = dt.date.today().isoformat()
    engine = make_engine(settings, gateway, today)
    report = CompileReport(kb=str(kb.root), mode=engine.mode, dry_run=dry_run, full=full,
                           model=getattr(getattr(gateway, "config", None), "model", None))
    if on_report is not None:
        on_report(report)
    if dry_run:
        return await _compile(settings, kb, engine, report, today, full=full, dry_run=True, progress=progress)
    lock = CompileLock(kb.state_dir)
    lock.acquire()
    try:
        if lock.took_over:
            report.notes.append(lock.took_over)
        if lock.replaced:
            report.warnings.append(lock.replaced)
        # The compile's model calls reuse keep-alive connections (no TCP/TLS handshake per call).
        with _on_cluster(settings, kb, engine, report.notes) as engine:
            async with _model_connections(gateway):
                return await _compile(settings, kb, engine, report, today, full=full, dry_run=False,
                                      progress=progress)
    finally:
        lock.release()


def _units_in_parallel(settings: Settings, gateway) -> int:
    """How many sources the plan stage and articles the write stage have in progress at once:
    the gateway's limit of calls in flight (``concurrency``, or its provider kind's default),
    so the stages never hold more calls than the gateway lets out. Offline: ``concurrency`` or
    the local default."""
    limit = getattr(getattr(gateway, "config", None), "concurrency", None)
    if limit:
        return int(limit)
    return settings.concurrency or LOCAL_CONCURRENCY


async def _refresh_progress(progress: Progress) -> None:
    """Keeps the progress line's calls in flight current while the stages wait on the model."""
    while True:
        await asyncio.sleep(PROGRESS_REFRESH_SECONDS)
        progress.refresh()


def _on_cluster(settings: Settings, kb: KnowledgeBase, engine: Engine,
                notes: list[str]) -> contextlib.AbstractContextManager:
    """The engine as the stages use it: itself (in this process), or, with the ``cluster``
    setting, one whose proposals and write drafts run as Ray tasks (``compile/cluster.py``; Ray
    is imported only then)."""
    if not settings.cluster:
        return contextlib.nullcontext(engine)
    from kb_ai.compile.cluster import on_cluster  # noqa: PLC0415 (the default compile never imports Ray)

    return on_cluster(settings, kb, engine, notes)


def _model_connections(gateway) -> contextlib.AbstractAsyncContextManager:
    """``gateway.pooled()`` (llm/gateway.py); nothing for an offline compile or a gateway without it."""
    pooled = getattr(gateway, "pooled", None)
    return pooled() if pooled is not None else contextlib.nullcontext()


def make_engine(settings: Settings, gateway, today: str) -> Engine:
    """The planner and writer: the model's when there is a gateway, else the offline ones."""
    if gateway is None:
        return Engine("offline", OfflinePlanner(), OfflineWriter(today))
    from kb_ai.llm.prompts import PromptLibrary  # noqa: PLC0415

    prompts = PromptLibrary(settings.prompts_dir) if settings.prompts_dir else PromptLibrary()
    engine = Engine("llm", None, None, gateway, prompts)
    engine.planner = LLMPlanner(gateway, prompts, engine.plan_meter)
    written_by_model = LLMWriter(gateway, prompts, engine.write_meter, today)
    written_by_model.related = RelatedArticles(KnowledgeBase(settings.kb), settings.link_style)
    engine.writer = CheckedWriter(written_by_model)
    return engine


async def _compile(settings: Settings, kb: KnowledgeBase, engine: Engine, report: CompileReport, today: str, *,
                   full: bool, dry_run: bool, progress: "bool | Progress | None") -> CompileReport:
    """The stages, in order, then the manifest and the log line."""
    started = time.perf_counter()
    if not dry_run:
        kb.wiki_dir.mkdir(parents=True, exist_ok=True)
        _remove_temp_files(kb)
    state = CompileState.load(kb.state_dir, kb.wiki_dir, read_only=dry_run)
    shown = progress if isinstance(progress, Progress) else Progress(progress)
    run = CompileRun(settings, kb, state, report, shown, today, full=full, dry_run=dry_run)
    refresher = None
    if engine.gateway is not None and hasattr(engine.gateway, "in_flight"):
        run.progress.in_flight = lambda: engine.gateway.in_flight
    if state.resumed_units:
        report.notes.append(f"resumed an interrupted compile: {state.resumed_units} finished units of work kept")
    if engine.mode == "llm" and not dry_run and hasattr(engine.gateway, "preflight"):
        engine.gateway.preflight()
    _check_prompts(run, engine)
    written = False
    try:
        if run.progress.in_flight is not None:
            refresher = asyncio.create_task(_refresh_progress(run.progress))
        ingested = ingest(run)
        deduped = dedup(run, ingested)
        await plan(run, engine, deduped.work)
        if dry_run:
            dry_run_plan(run, engine, deduped.work, ingested.deleted)
        else:
            before = {path: record.written_hash for path, record in run.state.articles.items()}
            written = await write(run, engine, deduped.work, ingested.deleted, deduped.became_duplicate)
            # what the model wrote this run has its links checked; every article kaas wrote, linked
            checked = set(report.created + report.updated) if engine.mode == "llm" else set()
            written = autolink(run, written, check=checked) or written
            _unchanged_after_links(run, before)
            index(run, written)
            await topics(run, engine)
        _report_partial(run, ingested, deduped.work)
        _report_offline_articles(run, engine)
    finally:
        if refresher is not None:
            refresher.cancel()
        run.progress.done()
        state.close()
        # Damaged state met while loading or later (fingerprints at dedup, kept texts at write).
        report.warnings[:0] = [w for w in state.warnings if w not in report.warnings]
    report.seconds = round(time.perf_counter() - started, 3)
    if not dry_run:
        _save(run, engine, written)
    return report


def _save(run: CompileRun, engine: Engine, written: bool) -> None:
    state, report = run.state, run.report
    versions = engine.prompt_versions()
    if any(state.prompts.get(k) != v for k, v in versions.items()):
        state.set_prompts(versions)
    state.save({"mode": engine.mode, "model": report.model,
                "compiled_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
    report.manifest = MANIFEST_LABEL
    if _eventful(report, written):
        append_log(run.kb.wiki_dir, "compile", _log_line(report))


def _unchanged_after_links(run: CompileRun, before: dict[str, str | None]) -> None:
    """An article the write stage rewrote without its mention links, which the autolink stage
    then put back, ends as it began: it was not updated (``--full`` on an unchanged wiki)."""
    same = {path for path in run.report.updated
            if (record := run.state.articles.get(path)) is not None and before.get(path) == record.written_hash}
    run.report.updated[:] = [path for path in run.report.updated if path not in same]


def _report_partial(run: CompileRun, ingested: Ingested, work: dict) -> None:
    """Sources compiled without part of their content (refused or oversized archive members,
    unreadable PDF pages, text cut, boilerplate removed), each part with its reason: the
    report, not only the manifest, says everything that was not compiled."""
    for path in sorted(ingested.present):
        item = work.get(path)
        record = run.state.sources.get(path)
        if item is not None:
            notes = item.source.notes
        elif record is not None and record.status not in (SKIPPED, DUPLICATE):
            notes = record.notes
        else:
            continue
        run.report.partial.extend({"path": path, "reason": note} for note in notes)


def _report_offline_articles(run: CompileRun, engine: Engine) -> None:
    """A compile with a model that left articles an earlier offline compile wrote (their sources
    did not change, so they cost nothing now): say that ``--full`` rewrites them with the model,
    or "0 LLM calls" reads as if the model were ignored."""
    if engine.mode != "llm" or run.full:
        return
    offline = OfflinePlanner.prompt_version
    sources = [r for r in run.state.sources.values() if r.plan_prompt == offline and r.articles]
    if sources:
        articles = len({a for r in sources for a in r.articles})
        run.report.notes.append(
            f"{articles} article{'s' if articles != 1 else ''} from {len(sources)} unchanged "
            f"source{'s' if len(sources) != 1 else ''} were written offline (without a model) and are kept as "
            "they are; run `kaas compile --full` to rewrite them with the model")


def _remove_temp_files(kb: KnowledgeBase) -> None:
    """Temp files of an atomic write cut short by a kill (we hold the lock: none is live)."""
    for folder in (kb.wiki_dir, kb.state_dir):
        if folder.is_dir():
            for tmp in folder.rglob(f"{TEMP_PREFIX}*"):
                try:
                    tmp.unlink()
                except OSError:
                    pass


def _check_prompts(run: CompileRun, engine: Engine) -> None:
    for name, version in engine.prompt_versions().items():
        old = run.state.prompts.get(name)
        if old and old != version:
            run.report.prompt_changes.append(
                f"{name} (was {old}, now {version}): only new and changed sources use it; "
                "run `kaas compile --full` to re-plan and rewrite every article with it"
            )


def _eventful(report: CompileReport, written: bool) -> bool:
    """Whether this run is worth a line in wiki/log.md: a no-op compile writes nothing."""
    r = report
    return bool(written or r.failed or r.held or r.created or r.updated or r.detached
                or any(r.sources.get(k) for k in ("new", "changed", "deleted")))


def _log_line(report: CompileReport) -> str:
    s, u = report.sources, report.usage
    text = (f"{s.get('total', 0)} sources ({s.get('new', 0)} new, {s.get('changed', 0)} changed, "
            f"{s.get('deleted', 0)} deleted, {s.get('skipped', 0)} skipped); {len(report.created)} articles "
            f"created, {len(report.updated)} updated")
    if report.held:
        text += f", {len(report.held)} left alone"
    if report.failed:
        text += f", {len(report.failed)} failed"
    if report.mode == "llm":
        text += f"; {u['llm_calls']} LLM calls, ${u['cost_usd']:.4f}"
    else:
        text += "; offline mode"
    return text
