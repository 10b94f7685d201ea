"""What the stages of one compile share, passed to each explicitly.

``CompileRun`` holds what every stage reads and writes the same way (the knowledge base, the
compile state with its journal, the report being filled, the options); ``Engine`` the planner
and writer (offline or with a model); ``SourceWork`` a source that needs work this run, as it
goes from ingest to dedup to plan to write. ``stage_timer`` is the one place a stage's time is
measured.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

from kb_ai.compile.progress import Progress
from kb_ai.compile.records import FAILED, PlanTarget, SourceRecord
from kb_ai.compile.report import CompileReport, StageReport
from kb_ai.config import Settings
from kb_ai.llm.usage import UsageMeter
from kb_ai.store.kb import KnowledgeBase

if TYPE_CHECKING:  # (ingest and state, through dedup, import this module)
    from kb_ai.compile.ingest import Source
    from kb_ai.compile.state import CompileState


@dataclass
class CompileRun:
    """One compile: what every stage reads (and the report and state they fill)."""

    settings: Settings
    kb: KnowledgeBase
    state: CompileState
    report: CompileReport
    progress: Progress
    today: str
    full: bool = False
    dry_run: bool = False


@dataclass
class Engine:
    """Who plans and writes: ``OfflinePlanner``/``OfflineWriter`` or the model's."""

    mode: str  # "llm" | "offline"
    planner: Any
    writer: Any
    gateway: Any = None
    prompts: Any = None
    plan_meter: UsageMeter = field(default_factory=UsageMeter)
    write_meter: UsageMeter = field(default_factory=UsageMeter)

    def prompt_versions(self) -> dict[str, str]:
        if self.mode == "llm":
            return {"compile_plan": self.planner.prompt_version, "compile_write": self.writer.prompt_version}
        return {"offline": self.planner.prompt_version}


@dataclass
class SourceWork:
    """A source that needs something this run (new, changed, or with unfinished work)."""

    source: Source
    change: str  # new | changed | pending | full | duplicate
    record: SourceRecord | None
    revision_of: str | None = None
    renamed_from: str | None = None  # the path this document had (``relink.find_renames``)
    renamed_same: bool = False  # ... with the same bytes: a new name only
    plan: list[PlanTarget] | None = None
    rejected: list[str] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.source.path

    @property
    def previous(self) -> list[str]:
        """The articles this source fed before this run."""
        return self.record.articles if self.record else []

    def with_articles(self, articles: list[str]) -> None:
        record = self.record or SourceRecord(self.source.path, FAILED)
        self.record = SourceRecord(**{**record.__dict__, "articles": articles})


@contextmanager
def stage_timer(report: CompileReport, name: str) -> Iterator[StageReport]:
    """``with stage_timer(report, "plan") as stage:`` — the stage's report, timed."""
    stage = report.stage(name)
    started = time.perf_counter()
    try:
        yield stage
    finally:
        stage.seconds = round(time.perf_counter() - started, 3)
