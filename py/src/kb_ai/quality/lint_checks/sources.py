"""Lint checks on where pages come from: ``sources:`` that exist, sources changed since, pages without any."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from kb_ai.quality.lint_context import ERROR, INFO, KIND_ANSWER, WARNING, Finding, LintContext, as_date
from kb_ai.store.articles import Article

# An article's file and its source written in the same minute (a git checkout, a copy) are not
# "source changed after the article" when the manifest cannot tell.
MTIME_TOLERANCE_SECONDS = 60


def check_sources(ctx: LintContext) -> list[Finding]:
    """``sources:`` entries must name files of the KB (an error when raw/ exists, else a warning)."""
    findings: list[Finding] = []
    severity = ERROR if ctx.raw_exists else WARNING
    for path, article in ctx.articles.items():
        for source in article.sources:
            if re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*://", source):
                continue  # a URL: not ours to check offline
            resolved = _source_path(ctx, source)
            if resolved is None:
                findings.append(Finding("broken-source", WARNING, path, f"source {source!r} is outside the knowledge base"))
            elif not resolved[1]:
                where = "" if ctx.raw_exists else " (this knowledge base has no raw/ folder)"
                findings.append(Finding("broken-source", severity, path, f"source {source} does not exist{where}"))
    return findings


def _source_path(ctx: LintContext, source: str) -> tuple[str, bool] | None:
    """(path relative to the KB, exists?) for a ``sources:`` entry; None when it leaves the KB.
    Entries are relative to the KB root (``raw/a.pdf``); ``a.pdf`` is also looked up in raw/.
    A backslash is a character of a file name (``raw/back\\slash.md``); only when no such file
    exists is it read as a Windows separator (``raw\\a.pdf``)."""
    text = source.strip()
    spellings = [text, text.replace("\\", "/")] if "\\" in text else [text]
    first: str | None = None
    outside = False
    for spelling in spellings:
        if spelling.startswith("/") or re.match(r"[A-Za-z]:", spelling):
            outside = True
            continue
        candidates = [spelling] if spelling.startswith("raw/") else [spelling, f"raw/{spelling}"]
        for candidate in candidates:
            parts = [p for p in candidate.split("/") if p not in ("", ".")]
            if ".." in parts:
                outside = True
                break
            rel = "/".join(parts)
            first = first or rel
            if rel and ctx.exists(rel):
                return rel, True
    if outside:
        return None
    return first or text, False


def check_stale(ctx: LintContext) -> list[Finding]:
    """A source changed since the article was written. The compile manifest knows exactly (the
    checksum merged); for other pages the source's mtime is compared with ``updated:`` (by day)
    or, without it, with the article file's mtime."""
    findings: list[Finding] = []
    records = ctx.manifest.articles if ctx.manifest is not None else {}
    if records:
        from kb_ai.compile.state import file_hash
    for path, article in ctx.articles.items():
        record = records.get(path)
        merged = dict(record.merged) if record is not None else {}
        changed: list[str] = []
        for source in article.sources:
            resolved = _source_path(ctx, source)
            if resolved is None or not resolved[1]:
                continue  # reported by the source check
            rel = resolved[0]
            file = ctx.kb.root / rel
            if not file.is_file():
                continue
            if rel in merged:
                if file_hash(file) != merged[rel]:
                    changed.append(f"{rel} (content changed since it was compiled in)")
            elif _newer_than_article(ctx, path, article, file):
                changed.append(f"{rel} (modified after the article)")
        if changed:
            findings.append(Finding("stale", WARNING, path,
                                    "source changed since the article was written: " + ", ".join(changed)
                                    + "; `kaas compile` merges it (hand edits kept); if its report lists this "
                                    "article as left alone, that line says why and what to change"))
    return findings


def _newer_than_article(ctx: LintContext, path: str, article: Article, source: Path) -> bool:
    source_mtime = source.stat().st_mtime
    updated = as_date(article.meta.get("updated"))
    if updated is not None:
        return dt.date.fromtimestamp(source_mtime) > updated
    try:
        article_mtime = (ctx.kb.wiki_dir / path).stat().st_mtime
    except OSError:
        return False
    return source_mtime > article_mtime + MTIME_TOLERANCE_SECONDS


def check_no_sources(ctx: LintContext) -> list[Finding]:
    """Articles that cite no source: a warning for compiled ones (their sources were removed), info
    for hand-written ones (which may legitimately have none)."""
    compiled = set(ctx.manifest.articles) if ctx.manifest is not None else set()
    missing = [p for p, a in ctx.articles.items() if not a.sources and a.kind != KIND_ANSWER]
    if not missing:
        return []
    hand_written = [p for p in missing if p not in compiled]
    findings = [Finding("no-sources", WARNING, p, "compiled article with no sources left (they were deleted or moved)")
                for p in missing if p in compiled]
    if len(hand_written) == len(ctx.articles) and len(hand_written) > 1:
        findings.append(Finding("no-sources", INFO, "master-index.md", f"no article lists its sources ({len(hand_written)} articles)"))
    else:
        findings += [Finding("no-sources", INFO, p, "no sources: frontmatter has no `sources:` list") for p in hand_written]
    return findings
