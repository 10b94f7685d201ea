"""The one resolver of a page as a model names it: a path, a path in another case or under a
prefix (``pages/``, ``wiki/``, ``docs/``), a title, a slug, a ``[Title](path)`` link, or a line
number of the catalog lines it was shown. Selection (``navigate.select.resolve_paths``) and
citation checking (``navigate.citations``) both resolve through it, so a model's
``Pages/Product/Pricing.md`` is the same page wherever it writes it.

Rules, in order (the first that names exactly one page of the catalog wins):
1. the path as written, normalized (``store.paths.normalize_wiki_path``: ``./``, ``wiki/``,
   percent-encoding, ``#anchor``), with ``.md`` added when missing and ``.json``/``.txt``/
   ``.html`` replaced by it; then the same lower-cased;
2. the path without its leading folders, one at a time (``pages/product/pricing.md`` is
   ``product/pricing.md``);
3. the title (the link's text, or the whole text), by ``title_identity``;
4. the file name's slug, when exactly one page has it;
5. a close spelling of the normalized path (difflib, cutoff 0.88).
A placeholder (``[Page Title](path)``: the words of a prompt's example, not a page) is never a
page (``is_placeholder``)."""

from __future__ import annotations

import difflib
import re
from pathlib import PurePosixPath

from kb_ai.errors import UnsafePathError
from kb_ai.store.catalog import Catalog, CatalogEntry
from kb_ai.store.markdown_text import Link, inline_links
from kb_ai.store.paths import normalize_wiki_path, slugify
from kb_ai.store.words import title_identity

_PLACEHOLDER_TARGETS = frozenset({"path", "path.md", "page", "page.md", "url", "link", "path/to/page.md",
                                  "path/to/page", "topic/slug.md", "...", "…"})
_PLACEHOLDER_TITLES = frozenset({"page title", "title", "page", "source"})
_LINE_NUMBER = re.compile(r"\s*(?:line\s*)?#?(\d{1,6})\s*")


def whole_link(text: str) -> Link | None:
    """The link when ``text`` is one Markdown link and nothing else (a model answering
    ``[Title](path)`` for a path), found by the one link finder."""
    links = inline_links(text)
    if len(links) == 1 and links[0].start == 0 and links[0].end == len(text) and not links[0].image:
        return links[0]
    return None


def is_placeholder(title: str | None, target: str) -> bool:
    """A link that is a prompt's example copied literally (``[Page Title](path)``), not a page."""
    clean = target.strip().lower()
    return clean in _PLACEHOLDER_TARGETS or (title is not None and title.strip().lower() in _PLACEHOLDER_TITLES
                                             and "/" not in clean)


def line_number(item: object, lines: list[CatalogEntry] | None) -> CatalogEntry | None:
    """The catalog line ``item`` numbers (1 = the first line shown), when it is a number (or a
    text that is only one) within ``lines``; None otherwise."""
    if not lines or isinstance(item, bool):
        return None
    if isinstance(item, int):
        number = item
    elif isinstance(item, str) and (match := _LINE_NUMBER.fullmatch(item)):
        number = int(match.group(1))
    else:
        return None
    return lines[number - 1] if 1 <= number <= len(lines) else None


def resolve_page_ref(text: str, catalog: Catalog, title_hint: str | None = None) -> str | None:
    """The catalog path ``text`` (a path, title or slug as a model wrote it; ``title_hint`` the
    text of the link it was in) names, by the rules of this module; None when it names none."""
    text = re.sub(r"\.(json|txt|html?|markdown)$", "", text.strip(), flags=re.IGNORECASE)
    if not text or is_placeholder(title_hint, text):
        return None
    candidate = text if text.lower().endswith(".md") else text + ".md"
    normalized = _normalized(candidate)
    for path in _path_readings(normalized):
        if path in catalog:
            return path
    by_title, by_slug = catalog.by_title, catalog.by_stem
    for title in (title_hint, text):
        if title and title_identity(title) in by_title:
            return by_title[title_identity(title)]
    stem = PurePosixPath(normalized).stem if normalized else slugify(text)
    for slug in dict.fromkeys((stem, stem.lower(), slugify(stem), slugify(text), slugify(title_hint or ""))):
        matches = by_slug.get(slug, []) if slug else []
        if len(matches) == 1:
            return matches[0]
    if normalized:
        close = difflib.get_close_matches(normalized.lower(), list(catalog.by_path), n=1, cutoff=0.88)
        if close:
            return close[0]
    return None


def _normalized(candidate: str) -> str | None:
    try:
        normalized = normalize_wiki_path(candidate)
    except UnsafePathError:
        return None
    return normalized[:-3] + ".md" if normalized.lower().endswith(".md") else normalized


def _path_readings(normalized: str | None) -> list[str]:
    """The path as written, lower-cased, then without each leading folder in turn (both cases)."""
    if not normalized:
        return []
    readings = [normalized, normalized.lower()]
    parts = normalized.split("/")
    for i in range(1, len(parts)):
        rest = "/".join(parts[i:])
        readings += [rest, rest.lower()]
    return list(dict.fromkeys(readings))
