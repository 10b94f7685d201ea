"""Links in an article body: where they are (offsets, for ``--fix``), and what they point to.

Links inside fenced code blocks and inline code are not links. Targets are resolved the way a
Markdown viewer resolves them: relative to the article's folder (``wiki/<topic>/``), so
``../other/page.md`` is ``wiki/other/page.md`` and ``../../raw/a.pdf`` is ``raw/a.pdf``.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from urllib.parse import unquote

from kb_ai.store.markdown_text import iter_lines_outside_fences

_INLINE_LINK = re.compile(
    r"(?P<bang>!?)\[(?P<text>(?:[^\[\]\\]|\\.|\[(?:[^\[\]\\]|\\.)*\])*)\]"
    r"\((?P<dest><[^<>\n]*>|(?:[^()\s\\]|\\.|\((?:[^()\s\\]|\\.)*\))*)"
    r"(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?\s*\)"
)
_REFERENCE_DEF = re.compile(r"^ {0,3}\[(?P<text>[^\]\n]+)\]:[ \t]*(?P<dest><[^<>\n]*>|\S+)", re.MULTILINE)
_INLINE_CODE = re.compile(r"(`+)[^\n]*?\1")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")


@dataclass(frozen=True)
class Link:
    """One link in a body. ``start``/``end`` are offsets in the body; ``text`` is what a reader sees."""

    start: int
    end: int
    line: int
    text: str
    target: str
    image: bool = False
    reference: bool = False  # a ``[label]: target`` definition, not an inline link


@dataclass(frozen=True)
class LinkTarget:
    """Where a link points. ``kind``: external (a URL), anchor (same page), outside (leaves the
    knowledge base, not checked), wiki (a file under ``wiki/``), kb (another file of the KB)."""

    kind: str
    kb_path: str | None = None  # relative to the KB root, POSIX
    wiki_path: str | None = None  # relative to wiki/ (the catalog's form), for kind == "wiki"


def _mask_code(body: str) -> str:
    """``body`` with fenced blocks and inline code blanked out; offsets and line breaks kept."""
    out: list[str] = []
    for piece, (line, in_fence) in zip(body.splitlines(keepends=True), iter_lines_outside_fences(body)):
        text = " " * len(line) if in_fence else _INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line)
        out.append(text + piece[len(line):])
    return "".join(out)


def find_links(body: str) -> list[Link]:
    """Every inline link, image and reference definition outside code, in order."""
    masked = _mask_code(body)
    found: list[Link] = []
    for match in _INLINE_LINK.finditer(masked):
        dest = body[match.start("dest"):match.end("dest")]
        found.append(Link(match.start(), match.end(), masked.count("\n", 0, match.start()) + 1,
                          body[match.start("text"):match.end("text")], dest.strip("<>"), bool(match.group("bang"))))
    for match in _REFERENCE_DEF.finditer(masked):
        dest = body[match.start("dest"):match.end("dest")]
        found.append(Link(match.start(), match.end(), masked.count("\n", 0, match.start()) + 1,
                          match.group("text"), dest.strip("<>"), reference=True))
    found.sort(key=lambda link: link.start)
    return found


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
    """``body`` with each of ``links`` replaced by its text (a reference definition by nothing)."""
    out: list[str] = []
    position = 0
    for link in sorted(links, key=lambda item: item.start):
        if link.start < position:
            continue
        out.append(body[position:link.start])
        if not link.reference:
            out.append(link.text)
        position = link.end
    out.append(body[position:])
    return "".join(out)
