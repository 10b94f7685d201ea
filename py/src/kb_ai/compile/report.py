"""What a compile did, per stage, for a person (``render_text``) and for programs (``to_dict``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kb_ai.compile.kaasignore import left_out_lines
from kb_ai.llm.usage import UsageMeter


EMPTY_RAW_HINT = ("raw/ is empty: nothing to compile. Put documents there (md, rst, txt, html, pdf, docx, pptx, xlsx, csv, odt, epub, rtf, zip/tar) "
                  "or run `kaas add FILE|URL ...`, then `kaas compile` again.")


LEFT_OUT_HINT = ("(not documents: images, code, build files, hidden files; to compile one, add a line "
                 "!PATTERN to raw/.kaasignore)")


@dataclass
class StageReport:
    name: str
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    llm_calls: int = 0  # every request sent, failed ones included
    failed_calls: int = 0
    probes: int = 0  # response_format shapes the server refused (asked again in the next): not failures
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def add_usage(self, meter: UsageMeter) -> None:
        self.llm_calls += meter.llm_calls
        self.failed_calls += meter.failed_calls
        self.probes += meter.probes
        self.cache_hits += meter.cache_hits
        self.prompt_tokens += meter.prompt_tokens
        self.completion_tokens += meter.completion_tokens
        self.cost_usd = round(self.cost_usd + meter.cost_usd, 8)


@dataclass
class CompileReport:
    kb: str
    mode: str  # "llm" | "offline"
    model: str | None = None
    dry_run: bool = False
    full: bool = False
    seconds: float = 0.0
    stages: list[StageReport] = field(default_factory=list)
    sources: dict[str, int] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    # Files that are not documents (by type, content or raw/.kaasignore), one entry per reason:
    # {reason, count, examples}; not one line per file (a docs folder has hundreds of images).
    left_out: list[dict[str, Any]] = field(default_factory=list)
    partial: list[dict[str, str]] = field(default_factory=list)  # compiled, but part of the file left out
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    detached: list[str] = field(default_factory=list)
    orphaned: list[str] = field(default_factory=list)
    held: list[dict[str, str]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    rejected: list[dict[str, str]] = field(default_factory=list)
    prompt_changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    plan: list[dict[str, Any]] = field(default_factory=list)
    estimate: dict[str, Any] | None = None
    manifest: str | None = None
    # Set when the compile was interrupted (Ctrl-C): {stage, saved: [article paths written],
    # not_written: [article paths still to write]} (the write stage; earlier stages save no article).
    interrupted: dict[str, Any] | None = None

    def stage(self, name: str) -> StageReport:
        for stage in self.stages:
            if stage.name == name:
                return stage
        stage = StageReport(name)
        self.stages.append(stage)
        return stage

    @property
    def llm_calls(self) -> int:
        return sum(s.llm_calls for s in self.stages)

    @property
    def usage(self) -> dict[str, Any]:
        return {
            "llm_calls": self.llm_calls,
            "failed_calls": sum(s.failed_calls for s in self.stages),
            "probes": sum(s.probes for s in self.stages),
            "cache_hits": sum(s.cache_hits for s in self.stages),
            "prompt_tokens": sum(s.prompt_tokens for s in self.stages),
            "completion_tokens": sum(s.completion_tokens for s in self.stages),
            "cost_usd": round(sum(s.cost_usd for s in self.stages), 6),
            "mode": self.mode,
        }

    @property
    def ok(self) -> bool:
        return not self.failed and not self.held

    @property
    def exit_code(self) -> int:
        """``kaas compile``'s exit status (README, ``kaas compile --help``): 0 when every source and
        article that needed work got it (skipped files and duplicates are not failures); 1 when a
        source or article failed or was left alone (refused model output, an article changed
        on disk meanwhile): the report says which and why, finished work is saved, the next run
        retries. (2: usage or configuration error, 3: another compile holds the lock — raised
        as errors before a report exists.)"""
        return 0 if self.ok else 1

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.nothing_to_compile:
            data["notes"] = [*data["notes"], EMPTY_RAW_HINT]
        data["usage"] = self.usage
        data["exit_code"] = self.exit_code
        return data

    @property
    def nothing_to_compile(self) -> bool:
        """raw/ holds no file and no earlier source was removed: the compile had nothing to do."""
        s = self.sources
        return bool(s) and not s.get("total") and not s.get("deleted") and not self.failed and not self.held

    def render_text(self) -> str:
        """A human summary: what happened, what it cost, and everything that needs attention."""
        if self.nothing_to_compile:  # an all-zero table tells a new user nothing: say what to do
            lines = [self._summary_lines()[0], EMPTY_RAW_HINT]
            lines += [f"warning: {w}" for w in self.warnings]
            return "\n".join(lines)
        lines = self._summary_lines() + self._stage_lines() + self._estimate_lines() + self._plan_lines()
        for title, items in self._sections():
            if not items:
                continue
            lines += ["", f"{title}:"]
            shown = items if len(items) <= 50 else items[:50] + [f"... and {len(items) - 50} more"]
            lines += [f"  {item}" for item in shown]
        if self.manifest:
            lines += ["", f"coverage manifest: {self.manifest}"]
        return "\n".join(lines)

    def _summary_lines(self) -> list[str]:
        if self.mode == "offline":
            head = "kaas compile — offline mode (no model configured): deterministic structuring, no LLM calls"
        else:
            head = f"kaas compile — model {self.model}"
        if self.dry_run:
            head += " — DRY RUN: nothing was written"
        s = self.sources
        lines = [head, (
            f"sources: {s.get('total', 0)} in raw/ — {s.get('new', 0)} new, {s.get('changed', 0)} changed, "
            f"{s.get('unchanged', 0)} unchanged, {s.get('deleted', 0)} deleted; {s.get('skipped', 0)} skipped, "
            + (f"{s['left_out']} left out (not documents), " if s.get("left_out") else "")
            + f"{s.get('duplicates', 0)} duplicates, {s.get('revisions', 0)} revisions"
        )]
        if not self.dry_run:
            lines.append(
                f"articles: {len(self.created)} created, {len(self.updated)} updated, "
                f"{len(self.detached)} with sources removed, {len(self.held)} left alone, "
                f"{len(self.orphaned)} orphaned, {len(self.failed)} failed"
            )
        if self.skipped:  # exit status 0 does not mean every file of raw/ is in the wiki: say so
            lines.append(f"not everything compiled: {len(self.skipped)} file{'s' if len(self.skipped) != 1 else ''} "
                         "skipped, each with its reason under 'skipped' (fix or remove it, or leave it out in "
                         "raw/.kaasignore)")
        u = self.usage
        if self.mode == "llm":
            lines.append(
                f"LLM: {u['llm_calls']} calls ({u['cache_hits']} cached"
                + (f", {u['failed_calls']} failed" if u["failed_calls"] else "")
                + (f", {u['probes']} response-format probes" if u["probes"] else "")
                + f"), {u['prompt_tokens']:,} prompt + "
                f"{u['completion_tokens']:,} completion tokens, ${u['cost_usd']:.4f}"
            )
        lines.append(f"time: {self.seconds:.2f}s")
        return lines

    def _stage_lines(self) -> list[str]:
        if not self.stages:
            return []
        lines = ["", f"  {'stage':<8}{'time':>8}  {'LLM calls':>9}  {'tokens in/out':>15}  {'cost':>9}  counts"]
        for st in self.stages:
            counts = ", ".join(f"{k} {v}" for k, v in st.counts.items() if v)
            lines.append(
                f"  {st.name:<8}{st.seconds:>7.2f}s  {st.llm_calls:>9}  "
                f"{st.prompt_tokens:>7,}/{st.completion_tokens:<7,}  ${st.cost_usd:>8.4f}  {counts}"
            )
        return lines

    def _estimate_lines(self) -> list[str]:
        if not self.estimate:
            return []
        e = self.estimate
        cost = "unknown (no price for this model)" if e.get("cost_usd") is None else f"${e['cost_usd']:.4f}"
        return ["", f"estimate: {e.get('llm_calls', 0)} LLM calls ({e.get('plan_calls', 0)} plan, "
                f"{e.get('write_calls', 0)} write, ~{e.get('topic_calls', 0)} topic summaries), "
                f"~{e.get('prompt_tokens', 0):,} prompt + "
                f"~{e.get('completion_tokens', 0):,} completion tokens, cost {cost}"]

    def _plan_lines(self) -> list[str]:
        if not self.plan:
            return []
        lines = ["", "plan:"]
        for item in self.plan[:200]:
            arts = ", ".join(item.get("articles") or []) or "-"
            lines.append(f"  {item['source']}: {item['action']} -> {arts}")
        if len(self.plan) > 200:
            lines.append(f"  ... and {len(self.plan) - 200} more")
        return lines

    def _left_out_lines(self) -> list[str]:
        if not self.left_out:
            return []
        return left_out_lines(self.left_out) + [LEFT_OUT_HINT]

    def _sections(self) -> list[tuple[str, list[str]]]:
        return [
            ("created", [f"{p}" for p in self.created]),
            ("updated", [f"{p}" for p in self.updated]),
            ("sources removed from", self.detached),
            ("orphaned (no source left; flagged, not deleted)", self.orphaned),
            ("left alone", [f"{h['path']}: {h['reason']}" for h in self.held]),
            ("failed (retried next run)", [f"{f['path']}: {f['reason']}" for f in self.failed]),
            ("skipped", [f"{x['path']}: {x['reason']}" for x in self.skipped] + self._left_out_lines()),
            ("compiled in part (what was left out)", [f"{x['path']}: {x['reason']}" for x in self.partial]),
            ("duplicates", [_dup_line(d) for d in self.duplicates]),
            ("model output rejected", [f"{r['source']}: {r['detail']}" for r in self.rejected]),
            ("prompt files changed since the last compile", self.prompt_changes),
            ("notes", self.notes),
            ("warnings", self.warnings),
        ]


class CompileInterrupted(Exception):
    """The compile was interrupted (Ctrl-C); ``report`` says what was saved (``render_interrupted``)."""

    exit_code = 130  # 128 + SIGINT, as a shell reports it

    def __init__(self, report: CompileReport):
        super().__init__("compile interrupted")
        self.report = report


def render_interrupted(report: CompileReport) -> str:
    """What an interrupted compile saved and what it left to do (the next run resumes there)."""
    info = report.interrupted or {}
    stage = info.get("stage") or "the start"
    saved, left = info.get("saved") or [], info.get("not_written") or []
    lines = [f"kaas compile — interrupted (Ctrl-C) during {stage}"]
    if stage == "write":
        lines.append(f"articles: {len(saved)} written and saved, {len(left)} not written yet")
    else:
        lines.append("no article was written; the plans made so far are kept")
    lines += [f"  saved: {p}" for p in saved[:50]] + [f"  not written: {p}" for p in left[:50]]
    lines.append("Finished work is kept: run `kaas compile` again to do the rest.")
    return "\n".join(lines)


def _dup_line(d: dict[str, Any]) -> str:
    if d["kind"] == "revision":
        return f"{d['path']}: revision of {d['of']} (similarity {d['similarity']}); compiled into the same articles"
    kind = "exact copy" if d["kind"] == "exact" else f"near copy (similarity {d['similarity']})"
    return f"{d['path']}: {kind} of {d['of']}; not compiled again"
