"""Links in an article body: where they are (offsets, for ``--fix``), and what they point to.

Links are found by ``store.markdown_text.find_links``, the one link finder (links in code spans,
fenced and indented code blocks are not links; ``[label]: target`` definitions and their uses
are). Targets are resolved the way a Markdown viewer resolves them: relative to the article's
folder (``wiki/<topic>/``), so ``../other/page.md`` is ``wiki/other/page.md`` and
``../../raw/a.pdf`` is ``raw/a.pdf``.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from urllib.parse import unquote

from kb_ai.store.markdown_text import Link, find_links, replace_links

__all__ = ["Link", "LinkTarget", "find_links", "remove_links", "resolve_target"]

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*+:")


@dataclass(frozen=True)
class LinkTarget:
    """Where a link points. ``kind``: external (a URL), anchor (same page), outside (leaves the
    knowledge base, not checked), wiki (a file under ``wiki/``), kb (another file of the KB)."""

    kind: str
    kb_path: str | None = None  # relative to the KB root, POSIX
    wiki_path: str | None = None  # relative to wiki/ (the catalog's form), for kind == "wiki"


def resolve_target(article_path: str, target: str) -> LinkTarget:
    """Resolve ``target`` as written in the article at catalog path ``article_path``."""
    target = target.strip()
    if not target or target.startswith("#"):
        return LinkTarget("anchor")
    if _SCHEME.match(target) or target.startswith("//"):
        return LinkTarget("external")
    path = unquote(target.split("#", 1)[0].split("?", 1)[0])
    if not path:
        return LinkTarget("anchor")
    if path.startswith("/wiki/"):
        joined = path.lstrip("/")
    elif path.startswith("/"):
        return LinkTarget("outside")  # site-absolute: depends on where the wiki is served
    else:
        joined = posixpath.join("wiki", posixpath.dirname(article_path), path)
    normal = posixpath.normpath(joined)
    if normal == ".." or normal.startswith("../") or normal == ".":
        return LinkTarget("outside")
    if normal.startswith("wiki/"):
        return LinkTarget("wiki", normal, normal[len("wiki/"):])
    return LinkTarget("kb", normal)


def remove_links(body: str, links: list[Link]) -> str:
    """``body`` with each of ``links`` replaced by its text; a reference definition (its whole
    line) by nothing. Pass a definition's uses too, or they are left as plain bracketed text."""
    return replace_links(body, links)
