"""``kaas lint``: checks on a knowledge base, each a small function returning findings
(``quality/lint_checks/``, reading ``quality/lint_context.py``).

Every check reads the same ``LintContext`` (the articles, the catalog, the compile manifest, read
once) and returns ``Finding`` records with a severity:

* **error** — something is broken for readers or the navigator: malformed frontmatter (the page
  is invisible), index drift (the catalog lists missing pages or misses real ones), broken links,
  sources that do not exist while ``raw/`` does. ``kaas lint`` exits non-zero.
* **warning** — worth fixing: orphans, missing or overlong summaries, duplicate titles, stale and
  oversized articles, compiled articles without sources.
* **info** — for the record: near-duplicate titles, hand-written pages without sources, a
  catalog whose lines are right but whose layout is not what ``kaas index`` writes.

``fixable`` findings are the mechanical ones ``--fix`` repairs (``fix.py``): re-index, and dead
links replaced by their text. The checks never write.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Callable

from kb_ai.config import Settings
from kb_ai.errors import ConfigError
from kb_ai.quality.lint_checks.links import check_index_drift, check_links, check_orphans, check_unlinked
from kb_ai.quality.lint_checks.pages import check_access, check_frontmatter, check_oversized, check_summaries, check_titles
from kb_ai.quality.lint_checks.sources import check_no_sources, check_sources, check_stale
from kb_ai.quality.lint_context import (  # noqa: F401  (INFO, WARNING: re-exported with the report's names)
    ERROR,
    INFO,
    SEVERITIES,
    WARNING,
    Finding,
    LintConfig,
    LintContext,
)
from kb_ai.store.kb import KnowledgeBase

CHECKS: list[Callable[[LintContext], list[Finding]]] = [
    check_frontmatter,
    check_index_drift,
    check_links,
    check_unlinked,
    check_sources,
    check_orphans,
    check_summaries,
    check_titles,
    check_stale,
    check_no_sources,
    check_oversized,
    check_access,
]


# ---------------------------------------------------------------------------------------------
# running


@dataclass
class LintReport:
    findings: list[Finding]
    articles: int
    fixed: list[str] = field(default_factory=list)
    usage: dict[str, Any] | None = None

    def count(self, severity: str) -> int:
        return sum(1 for f in self.findings if f.severity == severity)

    @property
    def exit_code(self) -> int:
        """1 when any error remains, else 0."""
        return 1 if self.count(ERROR) else 0

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "findings": [f.to_json() for f in self.findings],
            "counts": {s: self.count(s) for s in SEVERITIES},
            "articles": self.articles,
            "fixed": self.fixed,
        }
        if self.usage is not None:
            data["usage"] = self.usage
        return data

    def to_json_text(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False, indent=2)

    def render_text(self) -> str:
        lines = [f.render() for f in self.findings]
        lines += [f"fixed: {item}" for item in self.fixed]
        counts = ", ".join(f"{self.count(s)} {s}{'s' if self.count(s) != 1 else ''}" for s in SEVERITIES)
        fixable = sum(1 for f in self.findings if f.fixable)
        hint = f"; {fixable} fixable with `kaas lint --fix`" if fixable else ""
        lines.append(f"{self.articles} articles: {counts}{hint}")
        return "\n".join(lines)


_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}


def sort_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (_ORDER.get(f.severity, 3), f.path, f.line or 0, f.check, f.message))


def lint_kb(kb: KnowledgeBase, config: LintConfig | None = None, ctx: LintContext | None = None) -> LintReport:
    """Run every check (no model needed, nothing written) on ``ctx``, or on the KB as it is now."""
    kb.require_wiki()
    ctx = ctx or LintContext(kb, config or LintConfig())
    findings: list[Finding] = []
    for check in CHECKS:
        findings.extend(check(ctx))
    return LintReport(sort_findings(findings), len(ctx.files))


def run_lint(settings: Settings, *, fix: bool = False, contradictions: bool = False,
             max_pairs: int | None = None) -> LintReport:
    """What ``kaas lint`` does: lint, optionally fix the mechanical findings and lint again,
    optionally ask the model about contradictions."""
    kb = KnowledgeBase(settings.kb)
    kb.require_wiki()
    if contradictions and settings.offline:
        raise ConfigError("the contradictions check needs a model: set KAAS_MODEL (or model in kaas.toml)")
    config = LintConfig(max_article_tokens=settings.read_budget)
    ctx = LintContext(kb, config)
    report = lint_kb(kb, config, ctx)
    if fix:
        from kb_ai.quality.fix import apply_fixes

        fixed = apply_fixes(kb, ctx, report.findings)
        if fixed:
            ctx = LintContext(kb, config)
            report = lint_kb(kb, config, ctx)
        report.fixed = fixed
    if contradictions:
        from kb_ai.quality.contradictions import DEFAULT_MAX_PAIRS, find_contradictions

        found, usage = asyncio.run(find_contradictions(settings, ctx, max_pairs or DEFAULT_MAX_PAIRS))
        report.findings = sort_findings(report.findings + found)
        report.usage = usage
    return report
