"""Shared helpers for the compile tests: build a KB, compile it, check it is consistent."""

from __future__ import annotations

import json
import re
from pathlib import Path

from kb_ai.compile.pipeline import run_compile
from kb_ai.config import Settings
from kb_ai.store.articles import iter_article_paths, load_article
from kb_ai.store.catalog import parse_master_index
from kb_ai.files import TEMP_PREFIX

from fixtures.compile.make import write_mixed_corpus


def make_source_kb(root: Path) -> dict[str, str]:
    """A knowledge base with the mixed corpus of fixtures/compile/make.py in raw/ and no wiki yet
    (a wiki of articles: helpers.build_kb). Returns {kind: path} for the interesting files."""
    (root / "raw").mkdir(parents=True, exist_ok=True)
    return write_mixed_corpus(root / "raw")


def compile_offline(root: Path, **kwargs):
    return run_compile(Settings(kb=root), progress=False, **kwargs)


def manifest(root: Path) -> dict:
    return json.loads((root / ".kaas" / "manifest.json").read_text(encoding="utf-8"))


def wiki_snapshot(root: Path) -> dict[str, str]:
    """Every file of wiki/ except the append-only log, by relative path."""
    wiki = root / "wiki"
    return {p.relative_to(wiki).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(wiki.rglob("*")) if p.is_file() and p.name != "log.md"}


def temp_files(root: Path) -> list[Path]:
    """Leftovers of an interrupted write under wiki/ or .kaas/: atomic-write temp files
    (``files.py``) and the lexical index's ``<dir>.tmp-<pid>`` / ``<dir>.old-<pid>`` folders."""
    found: list[Path] = []
    for folder in (root / "wiki", root / ".kaas"):
        if folder.is_dir():
            found += [p for p in folder.rglob("*")
                      if p.name.startswith(TEMP_PREFIX) or re.search(r"\.(tmp|old)-\d+$", p.name)]
    return sorted(found)


def invariant_violations(root: Path, *, complete: bool = True) -> list[tuple[str, str]]:
    """What is wrong with the KB at ``root`` on disk, as (kind, detail) pairs; [] when consistent.

    Always (even right after a compile was killed): every catalog line resolves to an existing
    article and every article file parses: frontmatter with a title and a summary
    (a torn file parses leniently, with warnings). ``complete=True`` (a compile finished) also
    requires: a catalog without warnings that lists exactly the articles, summaries of at most 200
    characters, and no temp file left anywhere under wiki/ or .kaas/. (A SIGKILL between an atomic
    write's temp file and its rename necessarily leaves the temp file; the next compile removes it.)"""
    wiki = root / "wiki"
    problems: list[tuple[str, str]] = []
    index = wiki / "master-index.md"
    listed: set[str] = set()
    if index.is_file():
        try:
            catalog = parse_master_index(index.read_text(encoding="utf-8"))
        except Exception as exc:  # noqa: BLE001 (any failure to read the catalog is the finding)
            return [("catalog-unreadable", f"{type(exc).__name__}: {exc}")]
        if complete and catalog.warnings:
            problems += [("catalog-warning", str(w)) for w in catalog.warnings]
        listed = {e.path for e in catalog.entries}
        problems += [("catalog-unresolved", path) for path in sorted(listed) if not (wiki / path).is_file()]
    elif complete:
        problems.append(("catalog-missing", "wiki/master-index.md"))
    articles = set(iter_article_paths(wiki)) if wiki.is_dir() else set()
    for path in sorted(articles):
        try:
            article = load_article(wiki, path)
        except Exception as exc:  # noqa: BLE001
            problems.append(("article-unparsable", f"{path}: {type(exc).__name__}: {exc}"))
            continue
        if article.warnings or not article.title:  # a compiled article always has its frontmatter
            problems.append(("article-unparsable", f"{path}: {'; '.join(article.warnings) or 'no title'}"))
        elif complete and len(article.summary) > 200:
            problems.append(("article-summary-too-long", path))
    if complete:
        problems += [("article-unlisted", path) for path in sorted(articles - listed)]
        problems += [("temp-file", p.relative_to(root).as_posix()) for p in temp_files(root)]
    return problems


def assert_consistent(root: Path) -> None:
    """Every catalog line resolves, every article parses and is listed, no temp file is left."""
    problems = invariant_violations(root)
    assert not problems, problems
