"""``kaas lint --fix``: the mechanical repairs, and nothing else.

* **Dead links** are replaced by their text: ``see [Old page](old.md)`` becomes ``see Old page``.
  A dead reference definition (``[r1]: old.md``) is removed with its line, and its uses
  (``[Old page][r1]``) become their text. Links in code are not links and stay. Only the link
  spans change; the frontmatter and the rest of the file stay byte for byte, and the file is
  replaced atomically.
* **Index drift** is repaired by re-indexing (``KnowledgeBase.reindex``), which regenerates
  ``master-index.md`` from the articles' frontmatter.

Judgement calls (a summary to write, a duplicate to merge, a stale page to recompile) are left
to a person or to ``kaas compile``. Fixes run under the compile lock, so they never interleave
with a compile writing the same files.
"""

from __future__ import annotations

from kb_ai.store.lock import CompileLock
from kb_ai.quality.lint_context import Finding, LintContext, dead_links
from kb_ai.store.articles import write_article, write_article_text
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.markdown_text import replace_links


def apply_fixes(kb: KnowledgeBase, ctx: LintContext, findings: list[Finding]) -> list[str]:
    """Repair the fixable findings. Returns one line per change made."""
    fixable = [f for f in findings if f.fixable]
    if not fixable:
        return []
    done: list[str] = []
    with CompileLock(kb.state_dir):
        link_pages = sorted({f.path for f in fixable if f.check == "broken-link"})
        for path in link_pages:
            removed = _drop_dead_links(kb, ctx, path)
            if removed:
                done.append(f"wiki/{path}: removed {removed} dead link{'s' if removed != 1 else ''}, kept the text")
        if any(f.check == "index-drift" for f in fixable):
            result = kb.reindex()
            done.append(f"wiki/master-index.md: re-indexed {result.articles} articles in {result.topics} topics")
    return done


def _drop_dead_links(kb: KnowledgeBase, ctx: LintContext, path: str) -> int:
    links = [link for link, _target in dead_links(ctx, path)]
    article, file = ctx.articles.get(path), ctx.files.get(path)
    if not links or article is None or file is None or file.text is None:
        return 0
    body = replace_links(article.body, links)
    text = file.text
    if text.endswith(article.body):
        # Keep the frontmatter exactly as written (comments, quoting, key order).
        write_article_text(kb.wiki_dir, path, text[: len(text) - len(article.body)] + body)
    else:
        write_article(kb.wiki_dir, path, article.meta, body)
    return sum(1 for link in links if link.kind != "reference")  # as lint counted them
