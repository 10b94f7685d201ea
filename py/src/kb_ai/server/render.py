"""Article Markdown to safe HTML: a table of contents, and links between articles that work.

Article text is untrusted (it comes from sources and models), and Python-Markdown passes raw
HTML and ``javascript:`` links straight through, so every rendered page goes through nh3 with
an allow-list: no scripts, no event handlers, no style, only http(s)/mailto links. Heading and
footnote ids get an ``h-`` prefix so an article cannot clobber the ids of the page around it.

Links are rewritten before sanitizing: ``other.md`` / ``../topic/other.md`` / ``topic/other.md``
(relative to the article, then to ``wiki/``: ``store.links.resolve_link``, the resolver ``kaas
lint`` uses too) become ``/wiki/<path>`` when that page exists, and are marked ``broken-link``
when it does not; links to files that are not pages (``raw/`` sources) lose their target, since
the server does not serve them.

Then every ``href`` of the page — a Markdown link, and also a raw ``<a>`` the article writes in
HTML, which Python-Markdown passes by the rewriter — is checked once more by the sanitizer
(``_link_target``): an href is an in-page anchor, a ``/wiki/`` page, or an absolute
``http(s):``/``mailto:`` URL, spelled as a browser reads it (``\\`` is ``/``, so ``/\\host``
and ``//host`` are other hosts: written ``https://host``); anything else has its target removed.
So a link can only leave the wiki with its host in plain sight, and the UI marks every such link
(``a[href^="http"]`` in ``web/app.css``); every link carries ``rel="noopener noreferrer"``.

Python-Markdown's cost is not linear on every input (runs of ``<a ``, of ``[``, setext and ``#``
lines, list markers: a page of 80 KB can take minutes), so it never runs in the caller's process:
``render_markdown`` renders in a worker process (``isolated.py``) with a time limit of
``RENDER_SECONDS``, and a page that takes longer is shown as plain text with a note (and
remembered, so it costs that time once per version, not on every view). Which link targets
exist is decided before, in the caller (the worker has no catalog): the links are found with the
one link finder (``store.markdown_text.find_links``), and the answers passed along.
"""

from __future__ import annotations

import hashlib
import html
import logging
import re
import threading
import time
import xml.etree.ElementTree as etree
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import quote, unquote, urlsplit

import markdown
import nh3
from markdown.extensions import Extension
from markdown.treeprocessors import Treeprocessor

from kb_ai.errors import UnsafePathError
from kb_ai.isolated import IsolatedBusy, IsolatedFailure, IsolatedTimeout, run_isolated
from kb_ai.store.anchors import ANCHOR_PREFIX, heading_slug
from kb_ai.store.links import LinkTarget, Names, link_candidates, resolve_link, resolve_wikilink
from kb_ai.store.markdown_text import find_links
from kb_ai.store.paths import normalize_wiki_path

log = logging.getLogger(__name__)

ID_PREFIX = ANCHOR_PREFIX  # heading ids: the rule is store.anchors (citations compute the same ids)
WIKI_PREFIX = "/wiki/"

ALLOWED_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "details", "div", "dl", "dt", "em",
    "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins", "kbd", "li", "mark", "ol", "p",
    "pre", "q", "s", "samp", "small", "span", "strong", "sub", "summary", "sup", "table", "tbody",
    "td", "tfoot", "th", "thead", "tr", "u", "ul",
}
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title", "class"},
    "abbr": {"title"},
    "img": {"src", "alt", "title"},
    "code": {"class"},
    "div": {"class"},
    "span": {"class"},
    "th": {"align"},
    "td": {"align"},
    "ol": {"start"},
    "li": {"id"},
    "sup": {"id"},
    **{f"h{n}": {"id"} for n in range(1, 7)},
}
ALLOWED_CLASSES = {
    "a": {"wiki-link", "broken-link", "external", "footnote-ref", "footnote-backref"},
    "div": {"footnote"},
    "span": {"unavailable-link"},
}
URL_SCHEMES = {"http", "https", "mailto"}
# Dropped with their content (nh3 would otherwise keep the text of a <script> as text).
DROP_WITH_CONTENT = {"script", "style", "template", "iframe", "object", "embed", "noscript", "textarea", "select"}

_LANGUAGE_CLASS = re.compile(r"^language-[A-Za-z0-9_+\-]{1,40}$")
_ID_TEXT = re.compile(r"^[A-Za-z0-9_\-:.]{1,120}$")


@dataclass(frozen=True)
class TocEntry:
    level: int
    id: str  # the heading's id in the rendered HTML (prefixed)
    title: str  # plain text

    def as_dict(self) -> dict:
        return {"level": self.level, "id": self.id, "title": self.title}


@dataclass
class RenderedArticle:
    html: str
    toc: list[TocEntry] = field(default_factory=list)
    links: list[str] = field(default_factory=list)  # wiki pages this article links to
    broken_links: list[str] = field(default_factory=list)


PageExists = Callable[[str], bool]


def wiki_href(path: str, anchor: str = "") -> str:
    """The server URL of an article (``/wiki/topic/slug.md``), with an optional heading anchor."""
    href = WIKI_PREFIX + quote(path, safe="/")
    if anchor:
        href += "#" + ID_PREFIX + anchor
    return href


def _page_link(href: str, from_path: str, exists: PageExists) -> LinkTarget | str:
    """What an ``<a href>`` of an article is: where it points when it may name a page
    (``store.links.resolve_link``, the resolver lint uses too), or "keep" (an in-page anchor),
    "external" (a URL) or "unlink" (anything the server does not serve, or cannot parse)."""
    href = href.strip()
    target = resolve_link(from_path, href, exists)
    if target.kind == "anchor" and not href.split("#", 1)[0].strip():
        return "keep"
    if target.kind == "external":
        try:
            parts = urlsplit(href)
        except ValueError:  # "http://[x": not a URL anyone can follow
            return "unlink"
        if parts.scheme.lower() in URL_SCHEMES or not parts.scheme:  # //host: another host too
            return "external"
        return "keep"  # the sanitizer drops other schemes, and checks every target again
    return target if target.page is not None else "unlink"


class _LinkRewriter(Treeprocessor):
    def __init__(self, md: markdown.Markdown, from_path: str, exists: PageExists, result: RenderedArticle):
        super().__init__(md)
        self.from_path = from_path
        self.exists = exists
        self.result = result

    def run(self, root: etree.Element) -> None:
        for element in root.iter("a"):
            self._rewrite(element)

    def _rewrite(self, element: etree.Element) -> None:
        link = _page_link(element.get("href") or "", self.from_path, self.exists)
        if link == "keep":
            return
        if link == "external":
            element.set("class", "external")
            return
        if link == "unlink":
            self._unlink(element)
            return
        path = link.page
        element.set("href", wiki_href(path, unquote(link.fragment)))
        if self.exists(path):
            element.set("class", "wiki-link")
            if path not in self.result.links:
                self.result.links.append(path)
        else:
            element.set("class", "broken-link")
            element.set("title", f"No page {path} in this wiki")
            if path not in self.result.broken_links:
                self.result.broken_links.append(path)

    @staticmethod
    def _unlink(element: etree.Element) -> None:
        """A link to something the server does not serve: keep the text, drop the target."""
        title = element.get("href", "")
        element.attrib.clear()
        element.tag = "span"
        element.set("class", "unavailable-link")
        element.set("title", title)


class _LinkExtension(Extension):
    def __init__(self, from_path: str, exists: PageExists, result: RenderedArticle):
        super().__init__()
        self.from_path, self.exists, self.result = from_path, exists, result

    def extendMarkdown(self, md: markdown.Markdown) -> None:  # noqa: N802 (Python-Markdown API)
        # After inline links exist (inline=20) and before the footnotes/toc passes (< 20).
        md.treeprocessors.register(_LinkRewriter(md, self.from_path, self.exists, self.result), "kaas_links", 15)


_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_URL_IGNORED = re.compile(r"[\t\n\r]")  # browsers drop these from a URL before reading it
_URL_TRIMMED = "".join(chr(code) for code in range(0x21))  # ... and C0 controls and spaces around it


def _link_target(value: str, from_path: str, exists: PageExists) -> str | None:
    """Where an ``<a href>`` of a rendered article may point, spelled so that a person can see
    it: ``#h-…`` in the page, ``/wiki/<page>``, or an absolute http(s)/mailto URL; None (no
    target) for anything else. Read as a browser reads it (backslashes are slashes), so no
    spelling (``//host``, ``/\\host``, ``\\\\host``, ``/static/../x``) reaches another host or
    route unseen."""
    value = _URL_IGNORED.sub("", value.strip(_URL_TRIMMED))
    if value.startswith("#"):
        return "#" + ID_PREFIX + value[1:]  # nh3 prefixes ids (id_prefix); in-page anchors follow
    scheme = _SCHEME.match(value)
    if scheme:
        name = scheme.group(1).lower()
        value = name + value[len(name):]  # a lower-case scheme: what the UI's marker matches
        if name == "mailto":
            return value
        if name not in ("http", "https"):
            return None
        value = value.replace("\\", "/")
        return value if urlsplit(value).netloc else None
    value = value.replace("\\", "/")
    if value.startswith("//"):  # protocol-relative: another host
        return "https:" + value if urlsplit("https:" + value).netloc else None
    target, _, fragment = value.partition("#")
    if target.startswith(WIKI_PREFIX):
        try:
            path = normalize_wiki_path(target)
        except UnsafePathError:
            return None
    elif target.startswith("/") or not target.split("?", 1)[0].endswith(".md"):
        return None  # another route of this server, or a file it does not serve
    else:
        path = resolve_link(from_path, target.split("?", 1)[0], exists).page
        if path is None:
            return None
        fragment = ID_PREFIX + fragment if fragment else ""  # a raw <a>: ids are prefixed
    return WIKI_PREFIX + quote(path, safe="/") + (f"#{fragment}" if fragment else "")


def _attribute_filter(tag: str, attr: str, value: str, from_path: str = "",
                      exists: PageExists | None = None) -> str | None:
    if attr == "href":
        return _link_target(value, from_path, exists or (lambda _path: True))
    if tag == "img" and attr == "src" and not value.lower().startswith(("https:", "http:", "data:image/")):
        return None  # the server does not serve files next to articles: no request for them
    if attr == "id":
        return value if _ID_TEXT.match(value) else None
    if attr == "class":
        if tag == "code":
            return value if _LANGUAGE_CLASS.match(value) else None
        kept = [name for name in value.split() if name in ALLOWED_CLASSES.get(tag, ())]
        return " ".join(kept) or None
    if attr == "title":
        return value[:300]
    return value


def sanitize_html(fragment: str, *, from_path: str = "", exists: PageExists | None = None) -> str:
    """The allow-list sanitizer every rendered page goes through. ``from_path`` and ``exists``:
    as for ``render_markdown`` (a raw ``<a href="other.md">`` resolves like a Markdown link)."""
    return nh3.clean(
        fragment,
        tags=ALLOWED_TAGS,
        clean_content_tags=DROP_WITH_CONTENT,
        attributes=ALLOWED_ATTRIBUTES,
        attribute_filter=lambda tag, attr, value: _attribute_filter(tag, attr, value, from_path, exists),
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer",
        strip_comments=True,
        id_prefix=ID_PREFIX,
    )


def _flatten_toc(tokens: list[dict], out: list[TocEntry]) -> list[TocEntry]:
    for token in tokens:
        title = " ".join(html.unescape(re.sub(r"<[^>]+>", "", str(token.get("name", "")))).split())
        ident = str(token.get("id", ""))
        if title and _ID_TEXT.match(ident):
            out.append(TocEntry(int(token.get("level", 1)), ID_PREFIX + ident, title))
        _flatten_toc(token.get("children") or [], out)
    return out


RENDER_SECONDS = 5.0  # a page that takes longer to render is shown as plain text
MAX_LINK_LOOKUPS = 5_000  # pages looked up per render; links past these show as broken
_SLOW_AFTER = 0.25  # renders that took longer are kept (by text and links), so a view costs it once
_CACHE_SIZE = 32
_cache: OrderedDict[tuple, RenderedArticle] = OrderedDict()
_cache_lock = threading.Lock()


def wikilinks_as_markdown(body: str, names: Names | None) -> str:
    """``body`` with each wikilink (``[[name|label]]``, an embed ``![[name]]`` too) written as
    the Markdown link to where it resolves (``store.links.resolve_wikilink`` over ``names``:
    the pages the reader may see), ``[label](</wiki/<path>#<heading id>>)``; the renderer then
    checks, marks and sanitizes it as any link, so a wikilink to a missing or hidden page is a
    broken link exactly as a Markdown link to it is. Only the wikilinks change."""
    if "[[" not in body:
        return body
    out: list[str] = []
    position = 0
    for link in find_links(body):
        if link.kind != "wikilink" or link.start < position:
            continue
        target = resolve_wikilink(link.target, names)
        if target.kind == "anchor":
            dest = "#" + target.fragment
        elif target.page is not None:
            dest = WIKI_PREFIX + quote(target.page, safe="/") + (f"#{target.fragment}" if target.fragment else "")
        else:
            dest = "#"  # not a page name at all ("../x"): no target
        text = body[link.text_start:link.text_end].strip() or link.target
        out.append(body[position:link.start])
        out.append(f"[{text}](<{dest}>)")
        position = link.end
    out.append(body[position:])
    return "".join(out)


def render_markdown(body: str, *, from_path: str = "", exists: PageExists | None = None,
                    names: Names | None = None) -> RenderedArticle:
    """Render an article body (no frontmatter) to sanitized HTML with its table of contents.

    ``from_path`` is the article's catalog path (relative links resolve from its folder);
    ``exists`` says whether a catalog path is a page (default: every path is). Rendering runs in
    a worker process within ``RENDER_SECONDS``; past that, or for text whose brackets alone
    would take too long, the page is shown as plain text with a note. ``names`` resolves
    wikilinks (``Catalog.wiki_page`` of the reader's view; ``wikilinks_as_markdown``)."""
    body = wikilinks_as_markdown(body, names)
    if _bracket_scan_cost(body) > MAX_BRACKET_SCAN:
        return _as_plain_text(body, RenderedArticle(html=""),
                              "its brackets nest or stay open too much to render as Markdown in time")
    known = _known_pages(body, from_path, exists or (lambda _path: True))
    digest = hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()
    slow_key = (digest, None, None)
    key = (digest, from_path, tuple(sorted(known.items())))
    with _cache_lock:
        cached = _cache.get(slow_key) or _cache.get(key)
    if cached is not None:
        return _copy(cached)
    started = time.monotonic()
    try:
        result = run_isolated(_render, body, from_path, known, timeout=RENDER_SECONDS)
    except IsolatedBusy:  # other pages keep every worker busy: this one is not known to be slow
        return _as_plain_text(body, RenderedArticle(html=""), "the server is busy rendering other pages; "
                              "reload in a moment")
    except IsolatedTimeout:
        result, key = _as_plain_text(body, RenderedArticle(html=""), f"it takes longer than {RENDER_SECONDS:g} "
                                     "seconds to render as Markdown"), slow_key
    except IsolatedFailure as exc:
        log.warning("rendering %s failed: %s", from_path or "a page", exc)
        return _as_plain_text(body, RenderedArticle(html=""), "it could not be rendered as Markdown")
    if time.monotonic() - started > _SLOW_AFTER:
        with _cache_lock:
            _cache[key] = _copy(result)
            while len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)
    return result


def _copy(result: RenderedArticle) -> RenderedArticle:
    return RenderedArticle(result.html, list(result.toc), list(result.links), list(result.broken_links))


def _known_pages(body: str, from_path: str, exists: PageExists) -> dict[str, bool]:
    """For each page the body's links may name, whether it exists (asked of ``exists`` here, in
    the caller, which knows the reader and the catalog): what the worker needs to rewrite them."""
    known: dict[str, bool] = {}
    for link in find_links(body):
        if link.kind == "definition" or link.image:
            continue
        for path in link_candidates(from_path, link.target):
            if path.endswith(".md") and path not in known:
                if len(known) >= MAX_LINK_LOOKUPS:
                    return known
                known[path] = bool(exists(path))
    return known


def _render(body: str, from_path: str, known: dict[str, bool]) -> RenderedArticle:
    """The rendering itself (in a worker process): Python-Markdown, links rewritten, sanitized."""
    result = RenderedArticle(html="")
    exists: PageExists = lambda path: known.get(path, False)  # noqa: E731
    md = markdown.Markdown(
        extensions=[
            "fenced_code", "tables", "footnotes", "def_list", "abbr", "sane_lists", "toc",
            _LinkExtension(from_path, exists, result),
        ],
        extension_configs={
            "tables": {"use_align_attribute": True},
            "toc": {"permalink": False, "toc_depth": "1-4", "slugify": heading_slug},
            "footnotes": {"BACKLINK_TEXT": "↩"},
        },
        output_format="html",
    )
    try:
        converted = md.convert(body)
    except RecursionError:  # Python-Markdown recurses per nesting level (emphasis runs, lists)
        return _as_plain_text(body, RenderedArticle(html=""), "it nests too deeply to render as Markdown")
    result.html = sanitize_html(converted, from_path=from_path, exists=exists)
    result.toc = _flatten_toc(getattr(md, "toc_tokens", []), [])
    return result


# Python-Markdown matches each "[" (and each "(" after "]") by scanning forward to its partner,
# so text like "[a [a [a ..." costs the square of its length: 30 KB of it takes minutes. Its cost
# is counted first, in one pass (an overestimate: code is not told apart), and an article over
# the budget (about a second of scanning) is shown as plain text at once, without spending
# RENDER_SECONDS of a worker to find out.
MAX_BRACKET_SCAN = 2_000_000


def _bracket_scan_cost(text: str) -> int:
    if "[" not in text:
        return 0
    cost = 0
    for block in text.split("\n\n"):
        if "[" not in block:
            continue
        opened: list[int] = []  # positions of "[" (and of "(" right after "]") not yet closed
        for match in _BRACKETS.finditer(block):
            char, at = match.group(), match.start()
            if char == "[" or (char == "(" and at and block[at - 1] == "]"):
                opened.append(at)
            elif opened and char in "])":
                cost += at - opened.pop()
        cost += sum(len(block) - at for at in opened)
        if cost > MAX_BRACKET_SCAN:
            break
    return cost


_BRACKETS = re.compile(r"[\[\]()]")


def _as_plain_text(body: str, result: RenderedArticle, why: str) -> RenderedArticle:
    """The article as preformatted text with a note: readable, and nothing in it runs."""
    result.html = (f"<p><strong>Shown as plain text:</strong> {html.escape(why)}.</p>\n"
                   f"<pre>{html.escape(body)}</pre>")
    result.toc = []
    return result
