"""What links to a page: the wiki's link graph, one per catalog version.

``link_graph`` reads every catalog page once (kept in the catalog's ``derived``: built on the
first question about backlinks of this catalog version, ~1 ms a page) and resolves each link
with the one resolver (``store.links.resolve``: Markdown links and wikilinks, names from the
full catalog). ``links_in`` is what a reader is shown: the pages linking to a page that the
reader may read (``Catalog.readable_by``), nothing about any other page; a page's own links out
are those its rendering for that reader found (``server/render.py``), not this graph.
"""

from __future__ import annotations

from pathlib import Path

from kb_ai.errors import ArticleFormatError, UnsafePathError
from kb_ai.store.access import Reader
from kb_ai.store.articles import load_article
from kb_ai.store.catalog import Catalog
from kb_ai.store.links import resolve
from kb_ai.store.markdown_text import find_links

MAX_LINKS_IN = 200  # listed per page (the rest are counted, not shown)


def page_links(path: str, body: str, catalog: Catalog) -> list[str]:
    """The catalog pages ``body`` (of the page at ``path``) links to, in order, itself left out."""
    out: dict[str, None] = {}
    for link in find_links(body):
        if link.kind == "definition":
            continue
        target = resolve(path, link, lambda rel: rel in catalog, catalog.wiki_page).page
        if target is not None and target != path and target in catalog:
            out[target] = None
    return list(out)


def link_graph(wiki_dir: Path, catalog: Catalog) -> dict[str, tuple[str, ...]]:
    """Page -> the pages linking to it (catalog order), for every page of ``catalog`` (a root)."""
    def build() -> dict[str, tuple[str, ...]]:
        into: dict[str, list[str]] = {}
        for entry in catalog.entries:
            try:
                body = load_article(wiki_dir, entry.path).body
            except (ArticleFormatError, UnsafePathError, OSError):
                continue
            for target in page_links(entry.path, body, catalog):
                into.setdefault(target, []).append(entry.path)
        return {path: tuple(sources) for path, sources in into.items()}

    return catalog.derived.get(("backlinks",), build)


def links_in(wiki_dir: Path, catalog: Catalog, path: str, reader: Reader) -> list[str]:
    """The pages linking to ``path`` that ``reader`` may read (at most ``MAX_LINKS_IN``)."""
    can = catalog.readable_by(reader)
    return [p for p in link_graph(wiki_dir, catalog).get(path, ()) if can(p)][:MAX_LINKS_IN]
