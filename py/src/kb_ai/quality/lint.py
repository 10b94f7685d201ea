"""``kaas lint``: checks on a knowledge base, each a small function returning findings.

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
import datetime as dt
import difflib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

from kb_ai.config import Settings
from kb_ai.errors import ArticleFormatError, ConfigError, UnsafePathError
from kb_ai.llm.tokens import estimate_tokens
from kb_ai.offline.text import tokenize
from kb_ai.store.articles import (
    SUMMARY_LIMIT,
    Article,
    iter_article_paths,
    parse_article,
    read_article_text,
    scalar_text,
    split_frontmatter,
)
from kb_ai.store.catalog import Catalog, entry_from_article, parse_master_index, read_master_index, render_master_index
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.links import LinkTarget, resolve_link
from kb_ai.store.markdown_text import Link, find_links
from kb_ai.store.paths import safe_wiki_file
from kb_ai.store.users import configured_groups
from kb_ai.store.words import title_key

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES = (ERROR, WARNING, INFO)

MAX_ARTICLE_CHARS = 50_000  # a page this long is a book chapter: split it
NEAR_DUPLICATE_RATIO = 0.85  # difflib ratio of the one word two titles spell differently
# An article's file and its source written in the same minute (a git checkout, a copy) are not
# "source changed after the article" when the manifest cannot tell.
MTIME_TOLERANCE_SECONDS = 60
_TITLE_ARTICLES = {"a", "an", "the"}
KIND_ANSWER = "answer"  # saved answers: navigation pages, expected to have neither sources nor inbound links


@dataclass(frozen=True)
class Finding:
    """One problem. ``path`` is relative to ``wiki/`` (an article, or ``master-index.md``)."""

    check: str
    severity: str
    path: str
    message: str
    fixable: bool = False
    line: int | None = None

    def to_json(self) -> dict[str, Any]:
        data = {"check": self.check, "severity": self.severity, "path": self.path,
                "message": self.message, "fixable": self.fixable}
        if self.line is not None:
            data["line"] = self.line
        return data

    def render(self) -> str:
        where = f"wiki/{self.path}" + (f":{self.line}" if self.line is not None else "")
        fix = " [fixable]" if self.fixable else ""
        return f"{where}: {self.severity}: {self.check}: {self.message}{fix}"


@dataclass(frozen=True)
class LintConfig:
    summary_limit: int = SUMMARY_LIMIT
    max_article_chars: int = MAX_ARTICLE_CHARS
    max_article_tokens: int = 12_000  # the default reading budget: a longer page is read trimmed
    near_duplicate_ratio: float = NEAR_DUPLICATE_RATIO


# ---------------------------------------------------------------------------------------------
# what the checks read


@dataclass
class ArticleFile:
    """An article as read from disk: its text, and the parsed article or why it did not parse."""

    path: str
    text: str | None
    article: Article | None
    error: str | None = None


class LintContext:
    """Everything the checks need, read once. Properties that cost something are computed lazily."""

    def __init__(self, kb: KnowledgeBase, config: LintConfig):
        self.kb = kb
        self.config = config
        self.files: dict[str, ArticleFile] = {}
        for path in iter_article_paths(kb.wiki_dir):
            self.files[path] = _read_file(kb, path)
        self.articles: dict[str, Article] = {p: f.article for p, f in self.files.items() if f.article is not None}
        self.catalog_text: str | None = read_master_index(kb.wiki_dir)  # None: missing or not a file
        self.catalog = parse_master_index(self.catalog_text) if self.catalog_text is not None else None
        self.raw_exists = kb.raw_dir.is_dir()

    @cached_property
    def links(self) -> dict[str, list[tuple[Link, LinkTarget]]]:
        """Each article's links, resolved as the renderer resolves them (``store.links``)."""
        in_wiki = lambda rel: self.exists(f"wiki/{rel}")  # noqa: E731
        return {path: [(link, resolve_link(path, link.target, in_wiki)) for link in find_links(article.body)]
                for path, article in self.articles.items()}

    @cached_property
    def manifest(self):
        """The compile manifest (``compile/state.py``), or None when this KB was never compiled."""
        from kb_ai.compile.state import JOURNAL, MANIFEST, CompileState

        if not any((self.kb.state_dir / name).is_file() for name in (MANIFEST, JOURNAL)):
            return None
        return CompileState.load(self.kb.state_dir, self.kb.wiki_dir, read_only=True)

    def exists(self, kb_path: str) -> bool:
        return (self.kb.root / kb_path).exists()


def _read_file(kb: KnowledgeBase, path: str) -> ArticleFile:
    try:
        rel, file = safe_wiki_file(kb.wiki_dir, path)
        text = read_article_text(file, rel)
    except (ArticleFormatError, UnsafePathError) as exc:
        return ArticleFile(path, None, None, exc.message)
    except OSError as exc:
        return ArticleFile(path, None, None, f"{path}: cannot read ({exc.strerror or exc})")
    try:
        return ArticleFile(path, text, parse_article(text, path))
    except ArticleFormatError as exc:
        return ArticleFile(path, text, None, exc.message)


def dead_links(ctx: LintContext, path: str) -> list[tuple[Link, LinkTarget]]:
    """The links of article ``path`` that point inside the KB at nothing (what ``--fix`` removes),
    each with where it points."""
    return [(link, target) for link, target in ctx.links.get(path, [])
            if target.kind in ("wiki", "kb") and not ctx.exists(target.kb_path or "")]


# ---------------------------------------------------------------------------------------------
# the checks


def check_frontmatter(ctx: LintContext) -> list[Finding]:
    """Malformed frontmatter hides a page (error); a page without a title gets a guessed one."""
    findings: list[Finding] = []
    for path, file in ctx.files.items():
        if file.article is None:
            message = (file.error or "unreadable").removeprefix(f"{path}: ")
            findings.append(Finding("frontmatter", ERROR, path, f"{message}; the page is left out of the catalog"))
            continue
        text, meta = file.text or "", file.article.meta
        first_line = text.lstrip("\ufeff").split("\n", 1)[0].strip()
        if re.fullmatch(r"-{3,}", first_line) and not meta:
            body_after = split_frontmatter(text, path)[1]
            if body_after == text:
                findings.append(Finding("frontmatter", ERROR, path,
                                        "frontmatter is not closed by a `---` line; it is read as body text"))
                continue
        if not meta:
            findings.append(Finding("frontmatter", WARNING, path,
                                    "no frontmatter: title, summary and topic are guessed from the text"))
            continue
        if not (scalar_text(meta.get("title")) or "").strip():
            findings.append(Finding("frontmatter", WARNING, path,
                                    f"no title in frontmatter; the catalog uses {file.article.title!r}"))
        for key in ("tags", "sources"):
            value = meta.get(key)
            if value is not None and not isinstance(value, (list, str)):
                findings.append(Finding("frontmatter", WARNING, path, f"{key}: should be a list, not {type(value).__name__}"))
        if "updated" in meta and _as_date(meta["updated"]) is None:
            findings.append(Finding("frontmatter", WARNING, path, f"updated: {meta['updated']!r} is not a date (YYYY-MM-DD)"))
    return findings


def check_index_drift(ctx: LintContext) -> list[Finding]:
    """The catalog must list exactly the articles, with their frontmatter's title, summary and topic."""
    if ctx.catalog is None:
        what = "is not a file" if ctx.kb.master_index.is_symlink() or ctx.kb.master_index.exists() else "is missing"
        return [Finding("index-drift", ERROR, "master-index.md", f"master-index.md {what}", fixable=True)]
    findings = [Finding("index-drift", ERROR, "master-index.md", warning, fixable=True)
                for warning in ctx.catalog.warnings]
    expected = Catalog([entry_from_article(a) for a in ctx.articles.values()])
    for entry in ctx.catalog.entries:
        if entry.path in ctx.articles:
            want = expected.by_path[entry.path]
            diffs = [f"{name} {getattr(entry, name)!r} in the catalog, {getattr(want, name)!r} in the article"
                     for name in ("title", "summary", "topic")
                     if " ".join(getattr(entry, name).split()) != " ".join(getattr(want, name).split())]
            if entry.access != want.access:  # who may read the page: the catalog must say it right
                diffs.append(f"access {_access_text(entry.access)} in the catalog, {_access_text(want.access)} in the article")
            if entry.depends != want.depends:  # a saved answer's pages, which decide who may read it
                diffs.append(f"made from {list(entry.depends)} in the catalog, {list(want.depends)} in the article")
            if diffs:
                findings.append(Finding("index-drift", ERROR, entry.path,
                                        "catalog line differs from the frontmatter: " + "; ".join(diffs), fixable=True))
        elif entry.path in ctx.files:
            continue  # unparseable article: reported by the frontmatter check
        else:
            what = "is not an article" if (ctx.kb.wiki_dir / entry.path).exists() else "does not exist"
            findings.append(Finding("index-drift", ERROR, "master-index.md",
                                    f"lists {entry.path}, which {what}", fixable=True))
    for path in ctx.articles:
        if path not in ctx.catalog:
            findings.append(Finding("index-drift", ERROR, path, "article is not in master-index.md", fixable=True))
    if not findings and ctx.catalog_text != render_master_index(expected):
        findings.append(Finding("index-drift", INFO, "master-index.md",
                                "every line is right, but order or layout differs from what `kaas index` writes",
                                fixable=True))
    return findings


def check_links(ctx: LintContext) -> list[Finding]:
    """Relative links (to articles, or to files such as sources in raw/) that resolve to nothing."""
    findings: list[Finding] = []
    for path in ctx.articles:
        for link, target in dead_links(ctx, path):
            if link.kind == "reference":
                continue  # reported once, at its definition (``--fix`` removes the uses with it)
            what = "no such article" if target.kind == "wiki" and (target.wiki_path or "").endswith(".md") else "no such file"
            shown = target.kb_path if target.kind == "kb" else f"wiki/{target.wiki_path}"
            kind = "image" if link.image else "link"
            findings.append(Finding("broken-link", ERROR, path, f"{kind} to {link.target} ({shown}): {what}",
                                    fixable=True, line=_body_line(ctx, path, link)))
    return findings


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


def check_orphans(ctx: LintContext) -> list[Finding]:
    """Catalogued articles that no other article links to: only the catalog leads to them."""
    if len(ctx.articles) < 2:
        return []
    inbound: dict[str, int] = {}
    for path, links in ctx.links.items():
        for _link, target in links:
            if target.kind == "wiki" and target.wiki_path != path and target.wiki_path in ctx.articles:
                inbound[target.wiki_path] = inbound.get(target.wiki_path, 0) + 1
    if not inbound:
        return [Finding("orphan", INFO, "master-index.md",
                        f"no article links to another ({len(ctx.articles)} articles): pages are reached through the catalog only")]
    listed = set(ctx.catalog.by_path) if ctx.catalog is not None else set(ctx.articles)
    return [Finding("orphan", WARNING, path, "no other article links here; only the catalog does")
            for path, article in ctx.articles.items()
            if path in listed and path not in inbound and article.kind != KIND_ANSWER]


def check_summaries(ctx: LintContext) -> list[Finding]:
    """The summary is what the navigator reads: it must exist and fit in one catalog line."""
    findings: list[Finding] = []
    limit = ctx.config.summary_limit
    for path, article in ctx.articles.items():
        summary = article.meta.get("summary")
        if not isinstance(summary, str) or not summary.strip():
            findings.append(Finding("summary", WARNING, path,
                                    "no summary in frontmatter; the catalog shows the first sentence instead"))
        elif len(summary.strip()) > limit:
            findings.append(Finding("summary", WARNING, path,
                                    f"summary is {len(summary.strip())} characters, more than {limit}"))
    return findings


def check_titles(ctx: LintContext) -> list[Finding]:
    """Two pages with the same (or almost the same) title confuse the navigator and the reader.

    Same = equal after ``store.words.title_key``. Almost the same = the same word stems, articles
    aside ("Configuring a model" / "Configure the model"), or one word spelt differently
    ("Colour profiles" / "Color profiles"). Titles that differ by a number or by a disambiguating
    word ("Kiss and Tell (1945 film)", "Gasherbrum II", "National League North") are not flagged.
    Both tests work on hashed keys, so large wikis are not compared pair by pair."""
    findings: list[Finding] = []
    groups: dict[str, list[str]] = {}
    for path in sorted(ctx.articles):
        groups.setdefault(title_key(ctx.articles[path].title), []).append(path)
    for paths in groups.values():
        first = ctx.articles[paths[0]].title
        for other in paths[1:]:
            title = ctx.articles[other].title
            same = f"same title as {paths[0]}" if title == first else f"same title as {paths[0]} ({first!r})"
            findings.append(Finding("duplicate-title", WARNING, other, f"{title!r}: {same}"))
    keys = sorted(groups)
    pairs: set[tuple[str, str]] = set()
    by_stems: dict[tuple[str, ...], list[str]] = {}
    by_masked: dict[tuple[str, ...], list[str]] = {}
    for key in keys:
        stems = tuple(sorted((tokenize(w) or [w])[0] for w in key.split() if w not in _TITLE_ARTICLES))
        if stems:
            by_stems.setdefault(stems, []).append(key)
        words = key.split()
        for i in range(len(words)):
            by_masked.setdefault((*words[:i], "\x00", *words[i + 1:]), []).append(key)
    for members in by_stems.values():
        pairs.update((a, b) for n, a in enumerate(members) for b in members[n + 1:])
    ratio = ctx.config.near_duplicate_ratio
    for masked, members in by_masked.items():
        if len(members) < 2 or len(members) > 50:
            continue
        position = masked.index("\x00")
        for n, a in enumerate(members):
            for b in members[n + 1:]:
                left, right = a.split()[position], b.split()[position]
                if min(len(left), len(right)) >= 5 and difflib.SequenceMatcher(None, left, right).ratio() >= ratio:
                    pairs.add((a, b))
    for a, b in sorted(pairs):
        if re.findall(r"\d+", a) != re.findall(r"\d+", b):
            continue  # "1991 Mr. Olympia" and "1992 Mr. Olympia" are different things
        first, second = groups[a][0], groups[b][0]
        findings.append(Finding("near-duplicate-title", INFO, second,
                                f"title {ctx.articles[second].title!r} is close to {ctx.articles[first].title!r} ({first})"))
    return findings


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
                                    + "; run `kaas compile` or update the article"))
    return findings


def _newer_than_article(ctx: LintContext, path: str, article: Article, source: Path) -> bool:
    source_mtime = source.stat().st_mtime
    updated = _as_date(article.meta.get("updated"))
    if updated is not None:
        return dt.date.fromtimestamp(source_mtime) > updated
    try:
        article_mtime = (ctx.kb.wiki_dir / path).stat().st_mtime
    except OSError:
        return False
    return source_mtime > article_mtime + MTIME_TOLERANCE_SECONDS


def _as_date(value: Any) -> dt.date | None:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip()[:10])
        except ValueError:
            return None
    return None


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


def check_oversized(ctx: LintContext) -> list[Finding]:
    """A page longer than the reading budget is read trimmed; one over the size limit should be split."""
    findings: list[Finding] = []
    max_chars, max_tokens = ctx.config.max_article_chars, ctx.config.max_article_tokens
    for path, article in ctx.articles.items():
        chars, tokens = len(article.body), estimate_tokens(article.body)
        if chars > max_chars or tokens > max_tokens:
            findings.append(Finding("oversized", WARNING, path,
                                    f"{chars:,} characters (~{tokens:,} tokens): over the limit of {max_chars:,} characters "
                                    f"or the reading budget of {max_tokens:,} tokens; answers read it trimmed — split it"))
    return findings


def _body_line(ctx: LintContext, path: str, link: Link) -> int:
    """Line number in the file (frontmatter included) of a link found in the body."""
    file = ctx.files[path]
    body = ctx.articles[path].body
    text = file.text or ""
    offset = len(text) - len(body) if text.endswith(body) else 0
    return text.count("\n", 0, offset) + link.line


def _access_text(access: tuple[str, ...] | None) -> str:
    return "public" if access is None else f"[{', '.join(access)}]"


def check_access(ctx: LintContext) -> list[Finding]:
    """``access`` rules: a malformed one hides the page from everyone but admins (fail closed);
    a group that no user of kaas.toml belongs to is most likely a typo with the same effect."""
    findings = [Finding("access", WARNING, path, warning.removeprefix(f"{path}: "))
                for path, article in ctx.articles.items()
                for warning in article.warnings if warning.removeprefix(f"{path}: ").startswith("access")]
    groups = configured_groups(ctx.kb.root)
    if groups is None:
        return findings
    for path, article in ctx.articles.items():
        unknown = sorted(set(article.access or ()) - groups)
        if unknown:
            findings.append(Finding("access", WARNING, path,
                                    f"access names groups no user of kaas.toml has: {', '.join(unknown)} "
                                    "(only admins can read through them)"))
    return findings


CHECKS: list[Callable[[LintContext], list[Finding]]] = [
    check_frontmatter,
    check_index_drift,
    check_links,
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
