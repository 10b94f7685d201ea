"""The one way a page of the wiki is read for someone: ``load_page``.

Every interface reads pages through it — ``GET``/``PUT /api/pages``, ``/wiki/<path>``, MCP
``read_page``, the pages an answer reads (navigated, given with ``paths=`` / ``--page``, or
queued by a saved answer), and saving answers — so its rules hold everywhere:

1. the path is normalised first (``./x``, ``wiki/x``, ``/wiki/x``, percent-encoding, ``#anchors``,
   ``?query``); a spelling that cannot name a page raises ``UnsafePathError``, which depends on
   the spelling alone;
2. files kaas generates (``master-index.md``, ``topics.md``, ``log.md``, ``index.md``,
   ``<topic>/index.md``) are not pages;
3. the file is resolved inside ``wiki/`` (symlinks followed and checked), read within the size
   and encoding limits, and parsed;
4. the reader must be allowed to read it: its own ``access`` rule as the file says now and, for
   a saved answer, every page it was made from, as their files say now (``may_read``; listings
   decide the same from the catalog, ``Catalog.readable_by``).

For a reader who is not an admin, every failure after step 1 is the same ``PageNotFoundError``,
whose message depends on the normalised path only: a hidden page, a missing one, a directory, a
symlink out of the wiki, a file too large, not UTF-8, or with broken frontmatter answer byte for
byte alike, whatever the spelling. Admins get the precise error (422 for broken frontmatter, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kb_ai.errors import ArticleFormatError, KaasError, PageNotFoundError
from kb_ai.store.access import Reader
from kb_ai.store.articles import Article, is_generated, parse_article, read_article_text
from kb_ai.store.catalog import MAX_DEPENDENCY_DEPTH
from kb_ai.store.kb import KnowledgeBase
from kb_ai.store.paths import normalize_wiki_path, resolve_in


@dataclass
class LoadedPage:
    article: Article
    text: str  # the whole file, frontmatter included
    file: Path

    @property
    def path(self) -> str:
        return self.article.path


def not_found(rel: str) -> PageNotFoundError:
    """The answer for a page that is not there for this reader (missing, hidden, unreadable)."""
    return PageNotFoundError(f"no page {rel!r} in the wiki")


def load_page(kb: KnowledgeBase, raw_path: str, reader: Reader) -> LoadedPage:
    """Read the page ``raw_path`` names, for ``reader`` (see the module's rules)."""
    kb.require_wiki()
    rel = normalize_wiki_path(raw_path)
    try:
        page = _read(kb, rel)
    except PageNotFoundError:
        raise
    except (KaasError, OSError) as exc:
        if not reader.admin:
            raise not_found(rel) from None
        if isinstance(exc, OSError):
            raise ArticleFormatError(f"{rel}: {exc.strerror or exc}") from None
        raise
    if not may_read(kb, page.article, reader):
        raise not_found(rel)
    return page


def _read(kb: KnowledgeBase, rel: str) -> LoadedPage:
    """The page at normalised path ``rel``, whoever asks: PageNotFoundError when there is none,
    the precise error when the file cannot be read or parsed."""
    if is_generated(rel):
        raise not_found(rel)
    try:
        file = resolve_in(kb.wiki_dir, rel)
        text = read_article_text(file, rel)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise not_found(rel) from None
    return LoadedPage(parse_article(text, rel), text, file)


def may_read(kb: KnowledgeBase, article: Article, reader: Reader) -> bool:
    """Whether ``reader`` may read ``article`` as just read from its file: its own ``access``
    rule and, for a saved answer, every page it was made from — each read from its file now, so
    restricting one of them hides the answer's text at once, before any re-index. A page it was
    made from that is gone or unreadable, a cycle, or a chain deeper than the catalog allows
    fails closed."""
    if not reader.can_read(article.access):
        return False
    if reader.admin or not article.depends:
        return True
    decided: dict[str, bool] = {}  # each page read once, however many answers were made from it

    def made_from_readable(source: Article, depth: int) -> bool:
        if depth >= MAX_DEPENDENCY_DEPTH:
            return False
        decided[source.path] = False  # while deciding: a cycle back to here fails closed
        for path in source.depends:
            known = decided.get(path)
            if known is None:
                try:
                    page = _read(kb, normalize_wiki_path(path)).article
                except (KaasError, OSError):
                    known = False
                else:
                    known = reader.can_read(page.access) and (
                        not page.depends or made_from_readable(page, depth + 1))
                decided[path] = known
            if not known:
                return False
        decided[source.path] = True
        return True

    return made_from_readable(article, 0)
