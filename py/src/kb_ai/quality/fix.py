"""``kaas lint --fix``: the mechanical repairs, and nothing else.

* **Dead links** are first pointed at the article that now holds their target: the article
  compiled from the source the link names (read relative to the article's ``sources:``, as a
  source wrote it, through the compile manifest: ``compile.source_links``), else the one article
  with the file name the link names (an article moved or renamed), else the one article whose
  title is the link's text or file name. Only a link none of these finds is replaced by its
  text: ``see [Old page](old.md)`` becomes ``see Old page``. A dead reference definition
  (``[r1]: old.md``) is removed with its line, and its uses (``[Old page][r1]``) become their text. Links in code are not links and stay. Only the link
  spans change; the frontmatter and the rest of the file stay byte for byte, and the file is
  replaced atomically.
* **Index drift** is repaired by re-indexing (``KnowledgeBase.reindex``), which regenerates
  ``master-index.md`` from the articles' frontmatter.

Judgement calls (a summary to write, a duplicate to merge, a stale page to recompile) are left
to a person or to ``kaas compile``. Fixes run under the compile lock, so they never interleave
with a compile writing the same files.
"""

from __future__ import annotations

import posixpath

from kb_ai.compile.source_links import SourceLinks, apply_link_changes, manifest_links
from kb_ai.quality.lint_context import KIND_ANSWER, Finding, LintContext, dead_links
from kb_ai.store.articles import write_article, write_article_text
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.links import link_to, wikilink_to
from kb_ai.store.lock import CompileLock
from kb_ai.store.markdown_text import Link, find_links
from kb_ai.store.words import title_key


def apply_fixes(kb: KnowledgeBase, ctx: LintContext, findings: list[Finding]) -> list[str]:
    """Repair the fixable findings. Returns one line per change made."""
    fixable = [f for f in findings if f.fixable]
    if not fixable:
        return []
    done: list[str] = []
    with CompileLock(kb.state_dir):
        link_pages = sorted({f.path for f in fixable if f.check == "broken-link"})
        named: dict[str, list[str]] = {}
        for page, article in sorted(ctx.articles.items()):
            if article.kind != KIND_ANSWER:
                for source in dict.fromkeys(article.sources):
                    named.setdefault(source, []).append(page)
        links = manifest_links(kb, ctx.manifest, named) if link_pages else None
        for path in link_pages:
            repointed, removed = _fix_dead_links(kb, ctx, path, links)
            if repointed:
                done.append(f"wiki/{path}: pointed {repointed} dead link{'s' if repointed != 1 else ''} "
                            "at the article that now holds the target")
            if removed:
                done.append(f"wiki/{path}: removed {removed} dead link{'s' if removed != 1 else ''}, kept the text")
        if any(f.check == "index-drift" for f in fixable):
            result = kb.reindex()
            done.append(f"wiki/master-index.md: re-indexed {result.articles} articles in {result.topics} topics")
    return done


def _fix_dead_links(kb: KnowledgeBase, ctx: LintContext, path: str, sources: SourceLinks) -> tuple[int, int]:
    """(links pointed elsewhere, links removed) in article ``path``."""
    links = [link for link, _target in dead_links(ctx, path)]
    article, file = ctx.articles.get(path), ctx.files.get(path)
    if not links or article is None or file is None or file.text is None:
        return 0, 0
    changes: list[tuple[Link, str | None]] = []
    for link in links:
        if link.kind == "wikilink":
            changes.append((link, _wikilink_holder(ctx, path, link)))
        elif link.kind != "reference":
            changes.append((link, sources.repoint(link.target, path, article.sources) or _holder(ctx, path, link)))
    body = apply_link_changes(article.body, changes, find_links(article.body))
    text = file.text
    if text.endswith(article.body):
        # Keep the frontmatter exactly as written (comments, quoting, key order).
        write_article_text(kb.wiki_dir, path, text[: len(text) - len(article.body)] + body)
    else:
        write_article(kb.wiki_dir, path, article.meta, body)
    repointed = sum(1 for _link, new in changes if new is not None)
    return repointed, len(changes) - repointed  # (references are counted at their definition, as lint does)


def _holder(ctx: LintContext, path: str, link: Link) -> str | None:
    """The link from ``path`` to the one article that holds what ``link`` pointed at when the
    compile manifest does not say: the only article with that file name (moved or renamed by
    hand), else the only article titled like the link's text or file name."""
    target, _, fragment = link.target.partition("#")
    name = posixpath.basename(target.split("?", 1)[0])
    stem = posixpath.splitext(name)[0]
    for wanted in (lambda p, a: posixpath.basename(p) == name,
                   lambda p, a: title_key(a.title) in {title_key(link.text), title_key(stem.replace("-", " "))} - {""}):
        found = [p for p, a in ctx.articles.items() if p != path and a.kind != KIND_ANSWER and wanted(p, a)]
        if len(found) == 1:
            return link_to(path, found[0]) + (f"#{fragment}" if fragment else "")
    return None


def _wikilink_holder(ctx: LintContext, path: str, link: Link) -> str | None:
    """The new target of a dead wikilink (``[[Old name]]``): the one article ``_holder`` finds
    for its name, written as kaas writes wikilinks (``store.links.wikilink_to``: the path, the
    heading kept, the text the reader saw kept as its label)."""
    name, _, heading = link.target.partition("#")
    stem = posixpath.basename(name.strip().removesuffix(".md"))
    labelled = link.text_start > link.start + (3 if link.image else 2)  # "[[name|label]]"
    as_markdown = Link(link.start, link.end, link.line, link.text if labelled else name, f"{stem}.md", kind="inline")
    found = _holder(ctx, path, as_markdown)
    if found is None:
        return None
    page = posixpath.normpath(posixpath.join(posixpath.dirname(path), found))
    written = wikilink_to(page, link.text if labelled else name.strip(), heading.strip())
    new = written[2:-2]  # what goes between the brackets
    return new.split("|", 1)[0] if labelled else new
