"""Lint checks on each page by itself: frontmatter, summary, title, size and access rules."""

from __future__ import annotations

import difflib
import re

from kb_ai.llm.tokens import estimate_tokens
from kb_ai.offline.text import tokenize
from kb_ai.quality.lint_context import ERROR, WARNING, INFO, Finding, LintContext, as_date
from kb_ai.store.articles import scalar_text
from kb_ai.store.users import configured_groups
from kb_ai.store.words import title_key

# What every reader does with a page whose frontmatter cannot be read (store/frontmatter.py:
# locate_frontmatter, split_frontmatter): the catalog leaves it out and reading it fails.
UNREADABLE_PAGE = ("the page is hidden from everyone (left out of the catalog; readers get 404, admins "
                   "this error) until it reads")
_TITLE_ARTICLES = {"a", "an", "the"}


def check_frontmatter(ctx: LintContext) -> list[Finding]:
    """Frontmatter kaas cannot read hides the page, as the server and every other reader does
    (error); a page without a title gets a guessed one."""
    findings: list[Finding] = []
    for path, file in ctx.files.items():
        if file.article is None:
            message = (file.error or "unreadable").removeprefix(f"{path}: ")
            findings.append(Finding("frontmatter", ERROR, path, f"{message}; {UNREADABLE_PAGE}"))
            continue
        meta = file.article.meta
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
        if "updated" in meta and as_date(meta["updated"]) is None:
            findings.append(Finding("frontmatter", WARNING, path, f"updated: {meta['updated']!r} is not a date (YYYY-MM-DD)"))
    return findings


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
    groups: dict[str, list[str]] = {}
    for path in sorted(ctx.articles):
        groups.setdefault(title_key(ctx.articles[path].title), []).append(path)
    findings = _duplicate_titles(ctx, groups)
    keys = sorted(groups)
    pairs = _same_stem_pairs(keys) | _one_word_apart_pairs(keys, ctx.config.near_duplicate_ratio)
    for a, b in sorted(pairs):
        if re.findall(r"\d+", a) != re.findall(r"\d+", b):
            continue  # "1991 Mr. Olympia" and "1992 Mr. Olympia" are different things
        first, second = groups[a][0], groups[b][0]
        findings.append(Finding("near-duplicate-title", INFO, second,
                                f"title {ctx.articles[second].title!r} is close to {ctx.articles[first].title!r} ({first})"))
    return findings


def _duplicate_titles(ctx: LintContext, groups: dict[str, list[str]]) -> list[Finding]:
    """One warning for each page whose title key another (earlier) page already has."""
    findings: list[Finding] = []
    for paths in groups.values():
        first = ctx.articles[paths[0]].title
        for other in paths[1:]:
            title = ctx.articles[other].title
            same = f"same title as {paths[0]}" if title == first else f"same title as {paths[0]} ({first!r})"
            findings.append(Finding("duplicate-title", WARNING, other, f"{title!r}: {same}"))
    return findings


def _same_stem_pairs(keys: list[str]) -> set[tuple[str, str]]:
    """Pairs of title keys with the same word stems once "a", "an", "the" are left out."""
    by_stems: dict[tuple[str, ...], list[str]] = {}
    for key in keys:
        stems = tuple(sorted((tokenize(w) or [w])[0] for w in key.split() if w not in _TITLE_ARTICLES))
        if stems:
            by_stems.setdefault(stems, []).append(key)
    return {(a, b) for members in by_stems.values() for n, a in enumerate(members) for b in members[n + 1:]}


def _one_word_apart_pairs(keys: list[str], ratio: float) -> set[tuple[str, str]]:
    """Pairs of title keys equal but for one word of 5+ letters spelt alike (difflib ``ratio``).
    Keys are grouped by each word masked in turn; groups of more than 50 keys are skipped."""
    by_masked: dict[tuple[str, ...], list[str]] = {}
    for key in keys:
        words = key.split()
        for i in range(len(words)):
            by_masked.setdefault((*words[:i], "\x00", *words[i + 1:]), []).append(key)
    pairs: set[tuple[str, str]] = set()
    for masked, members in by_masked.items():
        if len(members) < 2 or len(members) > 50:
            continue
        position = masked.index("\x00")
        for n, a in enumerate(members):
            for b in members[n + 1:]:
                left, right = a.split()[position], b.split()[position]
                if min(len(left), len(right)) >= 5 and difflib.SequenceMatcher(None, left, right).ratio() >= ratio:
                    pairs.add((a, b))
    return pairs


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
