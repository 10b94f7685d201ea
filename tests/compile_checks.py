"""Shared helpers for the compile tests: build a KB, compile it, check it is consistent."""

from __future__ import annotations

import json
from pathlib import Path

from kb_ai.compile.pipeline import run_compile
from kb_ai.config import Settings
from kb_ai.store.articles import iter_article_paths, load_article
from kb_ai.store.catalog import parse_master_index
from kb_ai.store.files import TEMP_PREFIX

from fixtures.compile.make import write_mixed_corpus


def make_kb(root: Path) -> dict[str, str]:
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


def assert_consistent(root: Path) -> None:
    """Every catalog line resolves, every article parses and is listed, no temp file is left."""
    wiki = root / "wiki"
    catalog = parse_master_index((wiki / "master-index.md").read_text(encoding="utf-8"))
    assert not catalog.warnings, catalog.warnings
    listed = {e.path for e in catalog.entries}
    for path in listed:
        assert (wiki / path).is_file(), f"catalog line {path} does not resolve"
    articles = set(iter_article_paths(wiki))
    assert articles == listed, (articles ^ listed)
    for path in articles:
        article = load_article(wiki, path)
        assert article.title and len(article.summary) <= 200
    leftovers = [p for p in root.rglob(f"{TEMP_PREFIX}*")]
    assert not leftovers, leftovers
