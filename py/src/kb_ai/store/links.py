"""Where a link written in a page points: the one resolver for the renderer, ``kaas lint`` and
``lint --fix``, citations in answers and saved answers, so a link works for all of them or for
none.

A relative target is read the way a Markdown editor reads it first, relative to the page's
folder (``wiki/<topic>/``: ``../other/page.md``, ``page.md``, ``../../raw/a.pdf``), then the way
the catalog and answers write paths, relative to ``wiki/`` (``ops/configuration.md``): the first
of these that exists is the target, and when neither exists, the first. ``/wiki/<path>`` is
``wiki/<path>`` only. A first folder named ``wiki`` is dropped (``wiki/<path>`` is how people and
models name a page, see ``store.paths``).

A wikilink (``[[name]]``, ``[[name|label]]``, ``[[name#Heading]]``, ``![[name]]``: found by
``store.markdown_text.find_links`` as kind ``wikilink``) names a page the way Obsidian does, not
by a relative path: ``resolve_wikilink`` looks the name up, case-insensitively, as a catalog
path (``ops/incident-response``, ``.md`` optional), a file name (``incident-response``), a title
or an ``aliases:`` entry, in that order (``Catalog.wiki_page``, over the catalog its reader may
see: a page they may not read is not found, so a wikilink to it is a link to a missing page). A
name nothing has reads as ``<name>.md`` beside the wiki root, which no catalog lists: a broken
link, reported and rendered as any other. ``resolve`` is the one entry point for a found link
of either kind.

Not every ``[text](x)`` is a link to a file: scientific notation in source text such as
``[Ca(2+)](i)`` or ``[H+](aq)`` parses as Markdown link syntax, but a bare word with neither a
folder nor a file extension names no page or file, so it is ``notation`` and nobody checks it.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Callable
from urllib.parse import unquote

from kb_ai.errors import UnsafePathError
from kb_ai.store.anchors import heading_slug
from kb_ai.store.paths import normalize_wiki_path

__all__ = ["LinkTarget", "Names", "link_candidates", "link_to", "resolve", "resolve_in_kb", "resolve_link",
           "resolve_wikilink", "wikilink_key", "wikilink_to"]

WIKI = "wiki"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*+:")

Exists = Callable[[str], bool]  # asked of a path relative to wiki/
Names = Callable[[str], "str | None"]  # a wikilink's name (``wikilink_key``) -> catalog path
WIKILINK = "wikilink"


@dataclass(frozen=True)
class LinkTarget:
    """Where a link points. ``kind``: external (a URL), anchor (same page), outside (leaves the
    knowledge base, or is site-absolute: not checked), notation (``[Ca(2+)](i)``: not a path),
    wiki (a file under ``wiki/``), kb (another file of the KB)."""

    kind: str
    kb_path: str | None = None  # relative to the KB root, POSIX
    wiki_path: str | None = None  # relative to wiki/ (the catalog's form), for kind == "wiki"
    fragment: str = ""  # after "#", as written

    @property
    def page(self) -> str | None:
        """The catalog path when the target is a page of the wiki (a safe ``.md`` path), else None."""
        if self.kind != "wiki" or not self.wiki_path:
            return None
        try:
            return normalize_wiki_path(self.wiki_path)
        except UnsafePathError:
            return None


def _split(target: str) -> tuple[str | None, str, str]:
    """(kind when already known, path, fragment) of a target as written."""
    target = target.strip()
    if not target or target.startswith("#"):
        return "anchor", "", target[1:]
    if _SCHEME.match(target) or target.startswith("//"):
        return "external", "", ""
    rest, _, fragment = target.partition("#")
    path = unquote(rest.split("?", 1)[0])
    if not path:
        return "anchor", "", fragment
    if path.startswith("/") and not path.startswith("/wiki/"):
        return "outside", "", fragment  # site-absolute: depends on where the wiki is served
    if "/" not in path and "." not in path:
        return "notation", "", fragment  # "[Ca(2+)](i)": no folder, no file extension
    return None, path, fragment


def _in_wiki(kb_path: str) -> str | None:
    """The path relative to wiki/ of a normalized KB path, or None when it is not under wiki/."""
    if not kb_path.startswith(WIKI + "/"):
        return None
    rel = kb_path[len(WIKI) + 1:]
    return rel[len(WIKI) + 1:] if rel.startswith(WIKI + "/") else rel  # "wiki/<page>" names <page>


def _candidates(from_path: str, path: str) -> list[str]:
    """The KB paths ``path`` may mean, in the order tried (see the module docstring)."""
    if path.startswith("/wiki/"):
        return [posixpath.normpath(path.lstrip("/"))]
    first = posixpath.normpath(posixpath.join(WIKI, posixpath.dirname(from_path), path))
    found = [first]
    second = posixpath.normpath(posixpath.join(WIKI, path))
    if _in_wiki(first) is not None and _in_wiki(second) is not None and second != first:
        found.append(second)
    return found


def link_candidates(from_path: str, target: str) -> list[str]:
    """The paths relative to wiki/ that ``target`` (written in page ``from_path``) may name, in
    the order ``resolve_link`` tries them: what to ask ``exists`` about ahead of resolving."""
    kind, path, _fragment = _split(target)
    if kind is not None:
        return []
    return [rel for rel in (_in_wiki(c) for c in _candidates(from_path, path)) if rel is not None]


def resolve_link(from_path: str, target: str, exists: Exists | None = None) -> LinkTarget:
    """Resolve ``target`` as written in the page at catalog path ``from_path`` (``""`` for text
    outside any page, such as an answer: relative to wiki/). ``exists`` (a path relative to
    wiki/) picks between the readings; without it the first reading is taken."""
    kind, path, fragment = _split(target)
    if kind is not None:
        return LinkTarget(kind, fragment=fragment)
    candidates = _candidates(from_path, path)
    chosen = candidates[0]
    if exists is not None:
        for candidate in candidates:
            rel = _in_wiki(candidate)
            if rel is not None and exists(rel):
                chosen = candidate
                break
    if chosen in (".", "..") or chosen.startswith("../") or chosen.startswith("/"):
        return LinkTarget("outside", fragment=fragment)
    rel = _in_wiki(chosen)
    if rel is not None:
        return LinkTarget("wiki", f"{WIKI}/{rel}", rel, fragment)
    return LinkTarget("kb", chosen, fragment=fragment)


def resolve_in_kb(from_kb_path: str, target: str) -> LinkTarget:
    """``resolve_link`` for a link written in any file of the KB (``raw/guide/a.md``, relative
    to the KB root), read relative to that file's folder: where a source's own link points."""
    return resolve_link(posixpath.join("..", from_kb_path), target)


def link_to(from_path: str, page: str) -> str:
    """The relative link from the page at ``from_path`` to catalog path ``page`` (what an editor
    resolves, and ``resolve_link`` resolves back to ``page``)."""
    return posixpath.relpath(page, posixpath.dirname(from_path) or ".")


def wikilink_key(name: str) -> str:
    """How a wikilink name is looked up: case-folded, whitespace folded, ``.md`` and slashes at
    the ends dropped (``[[Ops/Incident-Response.md]]`` is ``ops/incident-response``)."""
    key = " ".join(unquote(name).split()).casefold().strip("/")
    return key[:-3] if key.endswith(".md") else key


def resolve_wikilink(target: str, names: Names | None) -> LinkTarget:
    """Where the wikilink ``[[target]]`` points (see the module docstring): a page of the wiki
    (``fragment``: the heading's id, ``heading_slug``), an anchor in the same page
    (``[[#Heading]]``), or, when ``names`` has no page of that name, the missing page
    ``<name>.md`` (``outside`` when the name is not a safe path)."""
    name, _, heading = target.partition("#")
    fragment = heading_slug(heading.split("^", 1)[0].strip()) if heading.strip() else ""
    if not name.strip():
        return LinkTarget("anchor", fragment=fragment)
    key = wikilink_key(name)
    found = names(key) if names is not None and key else None
    if found is None:
        try:
            found = normalize_wiki_path(" ".join(name.split()).strip("/").removesuffix(".md") + ".md")
        except UnsafePathError:
            return LinkTarget("outside", fragment=fragment)
    return LinkTarget("wiki", f"{WIKI}/{found}", found, fragment)


def resolve(from_path: str, link, exists: Exists | None = None, names: Names | None = None) -> LinkTarget:
    """Where a link found by ``find_links`` points: ``resolve_wikilink`` for a wikilink,
    ``resolve_link`` for every other kind."""
    if getattr(link, "kind", "") == WIKILINK:
        return resolve_wikilink(link.target, names)
    return resolve_link(from_path, link.target, exists)


def wikilink_to(page: str, text: str = "", fragment: str = "") -> str:
    """The wikilink kaas writes to catalog path ``page``: the path without ``.md`` (what Obsidian
    resolves from the vault root, and ``resolve_wikilink`` first), ``|text`` when the text is
    not the path. Characters a wikilink cannot hold (brackets, ``|``, line breaks) are spaces."""
    name = page.removesuffix(".md") + (f"#{fragment}" if fragment else "")
    label = " ".join(text.translate(_WIKILINK_UNSAFE).split())
    return f"[[{name}|{label}]]" if label and label != name else f"[[{name}]]"


_WIKILINK_UNSAFE = str.maketrans({"[": " ", "]": " ", "|": " ", "\n": " ", "\r": " "})
