"""Heading anchors: the one rule for the id a heading of an article has in its rendered page.

The renderer (``server/render.py``) gives every heading an id with Python-Markdown's ``toc``
extension, using ``heading_slug`` below, made unique in the page with ``_1``, ``_2``... in
document order, and the sanitizer prefixes every id with ``ANCHOR_PREFIX`` (so an article cannot
clobber the ids of the page around it). ``heading_anchors`` computes the same ids from the
Markdown, without rendering: a citation can then say under which heading of the page its
passage is, and ``/wiki/<path>#<id>`` opens the page there.
"""

from __future__ import annotations

import bisect
import html
from dataclasses import dataclass

from kb_ai.store.markdown_text import iter_lines_at, plain_text

ANCHOR_PREFIX = "h-"  # every id of a rendered article starts with it (nh3's id_prefix)
SEPARATOR = "-"


def heading_slug(text: str, separator: str = SEPARATOR) -> str:
    """The id a heading with this (plain) text gets, before it is made unique in its page."""
    return _toc().slugify(text, separator)


def _toc():
    """Python-Markdown's toc module, imported on first use (most commands never render or cite)."""
    global _TOC
    if _TOC is None:
        from markdown.extensions import toc

        _TOC = toc
    return _TOC


_TOC = None


def rendered_heading(line: str) -> tuple[int, str] | None:
    """``(level, text)`` when the renderer makes ``line`` a heading: Python-Markdown's rule, a
    run of ``#`` at the start of the line, a space after it or not (``#. item`` is a heading
    there too, unlike ``store.markdown_text.atx_heading``), a closing ``#`` run dropped."""
    if not line.startswith("#"):
        return None
    rest = line.lstrip("#")
    level = min(6, len(line) - len(rest))
    text = line[level:].strip()
    closed = text.rstrip("#")
    if closed != text and not closed.endswith("\\"):
        text = closed.rstrip()
    return level, text


@dataclass(frozen=True)
class HeadingAnchor:
    start: int  # offset of the heading line in the body
    level: int
    title: str  # plain text
    id: str  # the id in the rendered page, prefix included


def heading_anchors(body: str) -> list[HeadingAnchor]:
    """Every ATX heading of ``body`` outside code, in order, with the id the rendered page gives it."""
    unique = _toc().unique
    used: set[str] = set()
    counters: dict[str, int] = {}
    found: list[HeadingAnchor] = []
    for start, line, in_fence in iter_lines_at(body):
        heading = None if in_fence else rendered_heading(line)
        if heading is None:
            continue
        title = plain_text(heading[1])
        ident = unique(heading_slug(html.unescape(title)), used, counters)
        found.append(HeadingAnchor(start, heading[0], title, ANCHOR_PREFIX + ident))
    return found


def heading_ids(body: str) -> set[str]:
    """The ids of ``body``'s headings, without ``ANCHOR_PREFIX``: what ``other.md#<id>`` may name
    (the renderer prefixes a link's fragment as it prefixes the ids)."""
    return {a.id[len(ANCHOR_PREFIX):] for a in heading_anchors(body)}


def heading_id(heading: str) -> str:
    """The id (without prefix) a heading with this Markdown text gets, before it is made unique."""
    return heading_slug(html.unescape(plain_text(heading)))


def anchor_at(anchors: list[HeadingAnchor], offset: int) -> HeadingAnchor | None:
    """The heading a position of the body is under (the last one before it), or None (the lead)."""
    at = bisect.bisect_right([a.start for a in anchors], offset) - 1
    return anchors[at] if at >= 0 else None
