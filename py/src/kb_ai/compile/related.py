"""The articles a model writer is shown as pages it may link (``LLMWriter.related``).

For one article being written: the ``RELATED`` best pages of the keyword index
(``offline.lexical.LexicalIndex``, scored as an index of those pages alone, ``as_view``) for the
article's title and the text of its sources, among the pages every reader of the article may
read (``store.access.holds`` of the article's ``access``: a new article, whose frontmatter is not
written yet, is treated as public), never the article itself or a saved answer. Each is given as
its title, one-line summary and the link to write (``link_style``, relative to the article as
``compile/autolink.py`` writes it). The prompt holds them as data, escaped as all page data is
(``llm/prompts.py``); whatever the model then links is checked after the write
(``autolink.checked_links``).
"""

from __future__ import annotations

from kb_ai.compile.autolink import written_link
from kb_ai.store.access import holds, parse_access

RELATED = 8
QUERY_CHARS = 4000  # of each source's text


class RelatedArticles:
    """Callable (article, chunk) -> [{title, summary, link}], over the wiki as the compile began."""

    def __init__(self, kb, style: str = "markdown"):
        self.kb = kb
        self.style = style
        self._index = None
        self._catalog = None

    def _load(self):
        if self._catalog is None:
            from kb_ai.offline.lexical import LexicalIndex, index_folder  # noqa: PLC0415 (numpy only with a model)

            catalog = self.kb.catalog() if self.kb.master_index.exists() else None
            self._catalog = catalog if catalog is not None and catalog.entries else False
            if self._catalog:
                self._index = LexicalIndex.load_or_build(self.kb.wiki_dir, catalog, index_folder(self.kb.state_dir))
        return self._catalog, self._index

    def __call__(self, article, chunk) -> list[dict[str, str]]:
        catalog, index = self._load()
        if not catalog:
            return []
        access = parse_access(article.meta)[0] if article.meta else None
        allowed = [e.path for e in catalog.entries
                   if e.path != article.path and not e.depends and holds(access, e.access)]
        if not allowed:
            return []
        query = " ".join([article.title, *(c.source.title + " " + c.source.text[:QUERY_CHARS] for c in chunk)])
        out = []
        for hit in index.as_view(allowed).search(query, RELATED):
            entry = catalog.get(hit.path)
            out.append({"title": entry.title, "summary": entry.summary,
                        "link": written_link(article.path, entry.path, entry.title, self.style)})
        return out
