"""Lint checks on how pages reach each other: the catalog against the articles, dead links, orphans."""

from __future__ import annotations

from kb_ai.compile.source_links import parse_dead_entry
from kb_ai.quality.lint_context import ERROR, INFO, KIND_ANSWER, WARNING, Finding, LintContext, dead_links
from kb_ai.store.catalog import Catalog, entry_from_article, render_master_index
from kb_ai.store.markdown_text import Link


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
            if entry.aliases != want.aliases:  # names wikilinks and mentions find the page by
                diffs.append(f"aliases {list(entry.aliases)} in the catalog, {list(want.aliases)} in the article")
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


def _access_text(access: tuple[str, ...] | None) -> str:
    return "public" if access is None else f"[{', '.join(access)}]"


def check_links(ctx: LintContext) -> list[Finding]:
    """Relative links (to articles, or to files such as sources in raw/) that resolve to nothing."""
    findings: list[Finding] = []
    for path in ctx.articles:
        for link, target in dead_links(ctx, path):
            if link.kind == "reference":
                continue  # reported once, at its definition (``--fix`` removes the uses with it)
            if link.kind == "wikilink":
                what = f"no page has the name {link.target.partition('#')[0]!r} (path, file name, title or alias)"
                findings.append(Finding("broken-link", ERROR, path, f"wikilink [[{link.target}]]: {what}",
                                        fixable=True, line=_body_line(ctx, path, link)))
                continue
            what = "no such article" if target.kind == "wiki" and (target.wiki_path or "").endswith(".md") else "no such file"
            shown = target.kb_path if target.kind == "kb" else f"wiki/{target.wiki_path}"
            kind = "image" if link.image else "link"
            findings.append(Finding("broken-link", ERROR, path, f"{kind} to {link.target} ({shown}): {what}",
                                    fixable=True, line=_body_line(ctx, path, link)))
    return findings


def check_unlinked(ctx: LintContext) -> list[Finding]:
    """Links of a source to something that was not compiled (a missing file, a file outside raw/,
    not a document): the compile kept their text, without the link (``compile.source_links``).
    Worth knowing, nothing is broken."""
    state = ctx.manifest
    if state is None:
        return []
    findings: list[Finding] = []
    for source, record in sorted(state.sources.items()):
        for article in (a for a in record.articles if a in ctx.articles):
            for entry in record.unlinked:
                text, target = parse_dead_entry(entry)
                shown = f" ({text!r})" if text else ""
                findings.append(Finding("unlinked", INFO, article,
                                        f"{source} links to {target}{shown}, which was not compiled: kept as plain text"))
    return findings


def _body_line(ctx: LintContext, path: str, link: Link) -> int:
    """Line number in the file (frontmatter included) of a link found in the body."""
    file = ctx.files[path]
    body = ctx.articles[path].body
    text = file.text or ""
    offset = len(text) - len(body) if text.endswith(body) else 0
    return text.count("\n", 0, offset) + link.line


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
