"""Who may read the text of a file of raw/, for what other sources include of it.

``raw/`` itself has no access rules; a source is restricted by the articles made from it
(docs/compile.md, "Restricted articles"): its rule is ``store.access.derived_access`` of the
``access`` of every restricted article it feeds, by the compile manifest (``SourceRecord.articles``,
and for a copy dedup left out, those of its original) or by the article's own ``sources:`` (so the
rule holds with ``.kaas/`` deleted). A source that feeds no restricted article is public.

The same rule then holds for what an include brings into another source (``ReadContext``):
an article is at least as restricted as every file whose text it holds.
"""

from __future__ import annotations

from kb_ai.compile.context import CompileRun
from kb_ai.errors import ArticleFormatError, UnsafePathError
from kb_ai.store.access import derived_access
from kb_ai.store.articles import load_article
from kb_ai.store.catalog import build_catalog


def restricted_articles(run: CompileRun) -> dict[str, tuple[str, ...]]:
    """Article path -> its access rule, for every article of the wiki that has one."""
    kb = run.kb
    if not kb.wiki_dir.is_dir():
        return {}
    catalog = kb.catalog_store.get() if kb.master_index.exists() else build_catalog(kb.wiki_dir)
    return {e.path: e.access for e in catalog.entries if e.access is not None}


def source_rules(run: CompileRun) -> dict[str, tuple[str, ...]]:
    """raw/ path -> the access rule of its text, for every restricted source (see the module)."""
    restricted = restricted_articles(run)
    if not restricted:
        return {}
    rules: dict[str, list[tuple[str, ...]]] = {}
    for path, access in sorted(restricted.items()):
        try:
            article = load_article(run.kb.wiki_dir, path)
        except (FileNotFoundError, ArticleFormatError, UnsafePathError, OSError):
            continue
        for source in dict.fromkeys(article.sources):
            if source.startswith("raw/"):
                rules.setdefault(source, []).append(access)
    records = run.state.sources
    for path, record in sorted(records.items()):
        articles = list(record.articles)
        if record.duplicate_of and record.duplicate_of in records:
            articles += records[record.duplicate_of].articles
        rules.setdefault(path, []).extend(restricted[a] for a in articles if a in restricted)
    return {path: derived_access(found) for path, found in rules.items() if found}
