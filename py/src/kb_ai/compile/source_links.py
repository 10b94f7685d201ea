"""Links between sources, pointed at the articles compiled from their targets.

Documents link to each other by their own relative paths (``compatibility.md``,
``../troubleshooting.md#proxies``, ``./deployment/index.md``, ``guide.html`` or ``guide.rst`` as
Sphinx and MkDocs sites write them, ``deployment/`` for a folder's index page). In the wiki those
paths lead nowhere: the target is the *article* compiled from that source, in another folder
under another name. This module is the one place that maps them, for the compile (offline and
with a model) and for ``kaas lint --fix``:

* ``SourceLinks.source_of`` - which compiled source a link written in a source names (the exact
  path; else the same path with another document extension; else a folder's ``index``/``README``);
* ``SourceLinks.repoint_source`` - a source's text with each such link pointed at the article of its
  target, relative to the article that will contain it, the ``#anchor`` kept when that heading
  is in the target article and dropped (to the page) when not; a link to something not compiled
  (a missing file, a file outside raw/, a non-document) becomes its plain text and is recorded
  (``dead``: ``kaas lint`` reports it as an info);
* ``SourceLinks.settle`` - the last word on a body any writer produced (the model's too): a link
  that still leads nowhere is pointed at the article its target was compiled into when it names
  a source of the article, else it becomes plain text.

Every link is read by ``store.markdown_text.find_links`` and resolved by ``store.links``.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Callable, Iterable

from kb_ai.compile.records import DUPLICATE, SKIPPED
from kb_ai.errors import ArticleFormatError, UnsafePathError
from kb_ai.store.articles import load_article
from kb_ai.store.links import link_to, resolve_in_kb, resolve_link
from kb_ai.store.anchors import heading_id, heading_ids
from kb_ai.store.markdown_text import Link, find_links, iter_lines_outside_fences, replace_links
from kb_ai.store.words import title_key

if TYPE_CHECKING:
    from kb_ai.compile.context import CompileRun, SourceWork
    from kb_ai.compile.state import CompileState
    from kb_ai.store.kb import KnowledgeBase

# What a documentation site links to as a page: a link to ``x.html`` is the page built from
# ``x.rst`` or ``x.md``. Anything else (an image, a zip) is not a document another page is about.
DOCUMENT_SUFFIXES = frozenset({"", ".md", ".markdown", ".mdown", ".mkd", ".rst", ".rest", ".txt", ".text",
                               ".html", ".htm", ".xhtml", ".pdf", ".docx", ".adoc", ".asciidoc", ".org"})
INDEX_NAMES = ("index", "readme", "_index")

Headings = Callable[[str], "set[str] | None"]  # article path -> its heading anchors (None: unknown)


def _stem(path: str) -> str:
    pure = PurePosixPath(path)
    return str(pure.with_suffix("")) if pure.suffix.lower() in DOCUMENT_SUFFIXES else path


@dataclass
class SourceLinks:
    """The map from compiled sources to their articles, and what to do with a link to one.

    ``articles``: source path (``raw/...``) -> the article compiled from it; ``headings``: the
    heading anchors of an article (from its source's text when it is being written, else from
    the file); ``exists``: whether a path relative to wiki/ is (or is being written as) a page;
    ``kb_exists``: whether a path relative to the KB root is a file."""

    articles: dict[str, str]
    headings: Headings
    exists: Callable[[str], bool]
    kb_exists: Callable[[str], bool]
    dead: dict[str, set[str]] = field(default_factory=dict)  # source -> links kept as text (``dead_entry``)
    dropped: dict[str, set[str]] = field(default_factory=dict)  # article -> targets ``settle`` made text
    _by_stem: dict[str, list[str]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        for path in sorted(self.articles):
            self._by_stem.setdefault(_stem(path).casefold(), []).append(path)

    # -- which source a link names ------------------------------------------------------------

    def source_of(self, kb_path: str) -> str | None:
        """The compiled source that ``kb_path`` (a link's target, relative to the KB) names."""
        if kb_path in self.articles:
            return kb_path
        if not kb_path.startswith("raw/"):
            return None
        path = kb_path.rstrip("/")
        suffix = PurePosixPath(path).suffix.lower()
        if suffix not in DOCUMENT_SUFFIXES:
            return None
        found = self._by_stem.get(_stem(path).casefold())
        if found:
            return found[0]
        for name in INDEX_NAMES:  # "deployment/" or "deployment": the folder's index page
            found = self._by_stem.get(f"{_stem(path)}/{name}".casefold())
            if found:
                return found[0]
        return None

    def _pointed(self, source: str, fragment: str, from_article: str) -> str:
        """The link to the article of ``source`` from ``from_article``, with ``fragment`` kept
        when the article has that heading."""
        article = self.articles[source]
        href = link_to(from_article, article) if article != from_article else ""
        anchor = self._anchor(article, fragment)
        if anchor:
            return f"{href}#{anchor}"
        return href or posixpath.basename(article)

    def _anchor(self, article: str, fragment: str) -> str:
        if not fragment:
            return ""
        anchors = self.headings(article)
        if not anchors:
            return ""
        for candidate in (fragment, heading_id(fragment.replace("_", " ")), fragment.lower().replace("_", "-")):
            if candidate in anchors:
                return candidate
        return ""

    # -- a source's text ----------------------------------------------------------------------

    def repoint_source(self, source: str, text: str, article: str, was: str | None = None) -> str:
        """``text`` of ``source`` as it goes into ``article``: links to other sources point at
        their articles; links to what was not compiled become their text (``dead``, as
        ``dead_entry``). ``was``: the path the source had before it was moved; a link it did not
        update since is read from there too."""
        changes: list[tuple[Link, str | None]] = []
        for link in find_links(text):
            if link.kind == "reference":
                continue  # follows its definition
            kind, named = self.target_of(source, link.target)
            if named is None and was:
                kind, named = self.target_of(was, link.target)
            if named is not None:
                changes.append((link, self._pointed(named[0], named[1], article)))
            elif kind in ("external", "anchor", "notation"):
                continue
            elif link.image and kind == "kb" and self.kb_exists(resolve_in_kb(source, link.target).kb_path or ""):
                # an image kept in the KB: shown from where it is
                changes.append((link, link_to(article, f"../{resolve_in_kb(source, link.target).kb_path}")))
            else:
                self.dead.setdefault(source, set()).add(dead_entry(link.text, link.target))
                changes.append((link, None))
        return apply_link_changes(text, changes, find_links(text))

    def target_of(self, source: str, written: str) -> tuple[str, tuple[str, str] | None]:
        """(the kind of link ``written`` in ``source`` is, ``store.links.LinkTarget.kind``; the
        compiled source it names and the fragment, or None)."""
        target = resolve_in_kb(source, written)
        kind, path = target.kind, written.split("#", 1)[0].split("?", 1)[0]
        named = None
        if kind == "notation":  # "[Settings](settings)": a page name without its extension
            named = self.source_of(posixpath.normpath(posixpath.join(posixpath.dirname(source), path)))
        elif kind == "outside" and path.startswith("/") and not path.startswith("//"):
            # "/deployment/index.md", Sphinx's "/patterns/caching": from the site's root, which
            # is one of the folders the source is in
            folder = posixpath.dirname(source)
            while named is None and folder.startswith("raw"):
                named = self.source_of(posixpath.normpath(folder + path))
                folder = posixpath.dirname(folder)
        elif kind == "kb" and target.kb_path:
            named = self.source_of(target.kb_path)
        return kind, ((named, target.fragment) if named is not None else None)

    # -- links that led nowhere when their source was compiled --------------------------------

    def revivable(self, sources: dict[str, list[str]]) -> dict[str, list[tuple[str, str, str, str]]]:
        """Of ``sources`` (source path -> its ``unlinked`` entries), the entries whose target is
        compiled now: source -> [(entry, link text, the source it names, fragment)]."""
        found: dict[str, list[tuple[str, str, str, str]]] = {}
        for source, entries in sorted(sources.items()):
            for entry in entries:
                text, written = parse_dead_entry(entry)
                _kind, named = self.target_of(source, written)
                if named is not None and text:
                    found.setdefault(source, []).append((entry, text, named[0], named[1]))
        return found

    def relinked(self, body: str, article: str, text: str, source: str, fragment: str) -> str | None:
        """``body`` with the one plain occurrence of ``text`` (a link kept as text when its
        target was not compiled) made a link to the article of ``source`` again; None when the
        text is not there exactly once as a whole phrase outside links."""
        if len(text) < 3 or body.count(text) != 1:
            return None
        at = body.index(text)
        end = at + len(text)
        if (at and (body[at - 1].isalnum() or body[at - 1] in "[`")) or \
                (end < len(body) and (body[end].isalnum() or body[end] in "]`")):
            return None
        if any(link.start <= at < link.end for link in find_links(body)):
            return None
        line = body.count("\n", 0, at)
        if any(in_fence for n, (_line, in_fence) in enumerate(iter_lines_outside_fences(body)) if n == line):
            return None  # in code
        return f"{body[:at]}[{text}]({self._pointed(source, fragment, article)}){body[end:]}"

    # -- a written body -----------------------------------------------------------------------

    def settle(self, body: str, article: str, sources: Iterable[str]) -> str:
        """``body`` (of ``article``, fed by ``sources``) with every link that leads nowhere
        pointed at the article compiled from its target when it names a source (relative to one
        of ``sources``, or as a KB path), else turned into its text."""
        sources = list(sources)
        links = find_links(body)
        changes: list[tuple[Link, str | None]] = []
        for link in links:
            if link.kind == "reference":
                continue
            target = resolve_link(article, link.target, self.exists)
            if target.kind not in ("wiki", "kb"):
                continue
            if self.exists(target.wiki_path) if target.kind == "wiki" else self.kb_exists(target.kb_path or ""):
                continue
            new = self.repoint(link.target, article, sources)
            changes.append((link, new))
            if new is None:
                self.dropped.setdefault(article, set()).add(link.target)
        return apply_link_changes(body, changes, links)

    def repoint(self, written: str, article: str, sources: Iterable[str]) -> str | None:
        """A dead link target ``written`` in ``article``: the link to the article compiled from
        the source it names (read relative to each of ``sources``, then as a KB path), or None."""
        path, _, fragment = written.partition("#")
        for source in [*sources, "wiki/"]:
            target = resolve_in_kb(source, written) if source != "wiki/" else None
            kb_path = target.kb_path if target is not None and target.kind == "kb" else path.lstrip("/")
            named = self.source_of(kb_path) if kb_path else None
            if named is not None and self.exists(self.articles[named]):
                return self._pointed(named, fragment, article)
        return None


def dead_entry(text: str, target: str) -> str:
    """How a link kept as text is recorded (``SourceRecord.unlinked``): ``[text](target)``."""
    return f"[{' '.join(text.split()).replace(']', ')').replace('[', '(')}]({target})"


def parse_dead_entry(entry: str) -> tuple[str, str]:
    """(link text, target) of a ``dead_entry`` (an entry of an older manifest: target only)."""
    if entry.startswith("[") and entry.endswith(")") and "](" in entry:
        text, _, target = entry[1:-1].rpartition("](")
        return text, target
    return "", entry


def apply_link_changes(text: str, changes: list[tuple[Link, str | None]], links: list[Link]) -> str:
    """``text`` with each link's target replaced (None: the link becomes its text). A reference
    definition that changes takes its uses with it."""
    if not changes:
        return text
    unlink: list[Link] = []
    retarget: list[tuple[int, int, str]] = []
    dropped_labels: set[str] = set()
    for link, new in changes:
        if new is None:
            unlink.append(link)
            if link.kind == "definition":
                dropped_labels.add(link.label)
            continue
        retarget.append(_target_span(text, link) + (new,))
    unlink += [link for link in links if link.kind == "reference" and link.label in dropped_labels]
    for start, end, new in sorted(retarget, reverse=True):
        text = text[:start] + new + text[end:]
    if unlink:
        text = replace_links(text, _find_again(text, unlink))
    return text


def _target_span(text: str, link: Link) -> tuple[int, int]:
    """Where the destination of ``link`` is written in ``text`` (after its text)."""
    if link.kind == "wikilink":  # "[[target|label]]": the target follows the "[["
        opening = link.start + (3 if link.image else 2)
        at = text.find(link.target, opening, link.end)
        return (at, at + len(link.target)) if at >= 0 else (opening, opening)
    segment = text[link.text_end:link.end]
    at = segment.find(link.target) if link.target else -1
    if at < 0:  # written escaped or in <...>: the whole "(...)" or ": ..." is rewritten
        if link.kind == "definition":
            colon = segment.find(":")
            return link.text_end + colon + 1, link.end - (1 if text[link.end - 1:link.end] == "\n" else 0)
        opening = segment.find("(")
        return link.text_end + opening + 1, link.end - 1
    return link.text_end + at, link.text_end + at + len(link.target)


def _find_again(text: str, wanted: list[Link]) -> list[Link]:
    """The links of ``text`` (found again after other links' targets changed length) that are
    the ``wanted`` ones: the same kind, text and target, in order."""
    keys = [(link.kind, link.text, link.target, link.label) for link in wanted]
    found: list[Link] = []
    for link in find_links(text):
        key = (link.kind, link.text, link.target, link.label)
        if key in keys:
            keys.remove(key)
            found.append(link)
    return found


def run_links(run: "CompileRun", work: dict[str, "SourceWork"], deleted: Iterable[str]) -> SourceLinks:
    """The ``SourceLinks`` of one compile: every source still in raw/ that has (or is planned
    to have) an article, a copy standing for its original's; the headings of an article being
    written this run are those of the sources planned into it (what the offline writer keeps),
    of any other article those of its file."""
    state, wiki, root = run.state, run.kb.wiki_dir, run.kb.root
    gone = set(deleted)
    articles: dict[str, str] = {}
    for path, record in state.sources.items():
        if path not in gone and record.articles and record.status not in (SKIPPED, DUPLICATE):
            articles[path] = record.articles[0]
    planned: dict[str, list[str]] = {}
    for path, item in work.items():
        if not item.plan:
            continue
        own = [t for t in item.plan if title_key(t.title) == title_key(item.source.title)]
        articles[path] = (own or [t for t in item.plan if t.new] or item.plan)[0].path
        for target in item.plan:
            planned.setdefault(target.path, []).append(item.source.text)
            planned[target.path].append(f"# {target.title}")
    for path, record in state.sources.items():
        if record.status == DUPLICATE and path not in gone and record.duplicate_of in articles:
            articles[path] = articles[record.duplicate_of]
    for path, item in sorted(work.items()):  # the old name of a document renamed or moved now
        if item.renamed_from and path in articles:
            articles.setdefault(item.renamed_from, articles[path])
    _former_names(articles, state)
    cache: dict[str, set[str] | None] = {}

    def headings(article: str) -> set[str] | None:
        if article not in cache:
            if article in planned:
                cache[article] = set().union(*(heading_ids(t) for t in planned[article]))
            else:
                cache[article] = _file_headings(wiki, article)
        return cache[article]

    def exists(rel: str | None) -> bool:
        return bool(rel) and (rel in planned or (wiki / rel).is_file())

    return SourceLinks(articles, headings, exists, lambda kb_path: bool(kb_path) and (root / kb_path).is_file())


def _former_names(articles: dict[str, str], state: "CompileState | None") -> None:
    """Add the names sources had before they were renamed or moved (``ArticleRecord.former`` of
    an article that still has sources): a link written to the old name leads to the article."""
    if state is None:
        return
    for article, record in sorted(state.articles.items()):
        if not record.orphaned and record.merged:
            for path in record.former:
                articles.setdefault(path, article)


def _manifest_articles(state: "CompileState | None", source: str) -> list[str]:
    record = state.sources.get(source) if state is not None else None
    return record.articles if record is not None else []


def _file_headings(wiki: Path, article: str) -> set[str] | None:
    try:
        return heading_ids(load_article(wiki, article).body)
    except (ArticleFormatError, UnsafePathError, OSError):
        return None


def manifest_links(kb: "KnowledgeBase", state: "CompileState | None",
                   named: dict[str, list[str]] | None = None) -> SourceLinks:
    """The ``SourceLinks`` of a compiled wiki as it is (for ``kaas lint --fix``): each source
    still in raw/ with its article on disk, by the articles' own ``sources:`` (``named``: source
    -> articles naming it; an article moved or renamed by hand still names its source), else
    by the compile manifest."""
    wiki, root = kb.wiki_dir, kb.root
    articles: dict[str, str] = {}
    for path, pages in sorted((named or {}).items()):
        if pages and path.startswith("raw/") and (root / path).is_file():
            articles[path] = sorted(pages, key=lambda p: (p not in _manifest_articles(state, path), p))[0]
    for path, record in sorted((state.sources if state is not None else {}).items()):
        if path in articles:
            continue
        on_disk = [a for a in record.articles if (wiki / a).is_file()]
        if on_disk and (root / path).is_file():
            articles[path] = on_disk[0]
    _former_names(articles, state)
    articles = {source: page for source, page in articles.items() if (wiki / page).is_file()}
    cache: dict[str, set[str] | None] = {}

    def headings(article: str) -> set[str] | None:
        if article not in cache:
            cache[article] = _file_headings(wiki, article)
        return cache[article]

    return SourceLinks(articles, headings, lambda rel: bool(rel) and (wiki / rel).is_file(),
                       lambda kb_path: bool(kb_path) and (root / kb_path).is_file())
