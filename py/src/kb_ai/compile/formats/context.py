"""What a reader may know beyond the bytes of its file: the other sources around it.

A reStructuredText page includes files (``.. include::``, ``.. literalinclude::``) and links to
other pages by name (``:doc:``) or by label (``:ref:``). ``ReadContext`` answers those questions
for one source, from ``raw/`` only: ``ingest`` builds it (``compile/ingest.py``
``Corpus.context``); a reader called without one (an archive member, a test) resolves nothing
and says so in its notes.

Who may read what an include brings (docs/compile.md, "Restricted articles"): ``access_of``
gives the rule of a file of raw/ (the access of the articles it feeds; None: public). A
restricted file is included only while ``restricted`` is True, and its rule is recorded in
``carried``: every article that gets this text must be at least as restricted
(``store.access.holds``); ingest reads the source a second time with ``restricted`` False for the
articles that are not. A label or document title of a restricted file is never shown (the
reference stays its own text, as if the label were not defined). ``outside`` (a source added
from outside, ``compile/add.py``): why it includes nothing at all.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Callable

# An included file larger than this is dropped (with a note), not inlined.
MAX_INCLUDE_BYTES = 256_000
# Files one document may include (reST includes and Markdown snippets alike, nested ones too);
# each file once, the document itself never: an include loop, or a file that includes another
# many times over at every level, ends there instead of multiplying.
MAX_INCLUDES = 20


def _public(raw_path: str) -> tuple[str, ...] | None:
    return None


@dataclass
class ReadContext:
    """``path``: the source's path (``raw/...``). ``read``: the text of another file of raw/ by
    its ``raw/...`` path, or a reason string starting with "!" when it cannot be included.
    ``sources``: every source path of raw/. ``labels``: (lazily) reST label -> (source path, the
    title of the section it marks, or ""). ``access_of``, ``restricted``, ``outside``: see the
    module's docstring."""

    path: str
    read: Callable[[str], str] | None = None
    sources: frozenset[str] = frozenset()
    labels: Callable[[], dict[str, tuple[str, str]]] | None = None
    access_of: Callable[[str], tuple[str, ...] | None] = _public
    restricted: bool = True
    outside: str = ""
    _labels: dict[str, tuple[str, str]] | None = field(default=None, repr=False)
    included: list[str] = field(default_factory=list, repr=False)  # raw/ paths included so far
    carried: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False)  # restricted ones: their rule

    def resolve(self, target: str) -> str | None:
        """``target`` (relative to this source's folder) as a ``raw/...`` path, None when it
        leaves raw/."""
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(self.path), target))
        return joined if joined.startswith("raw/") and ".." not in joined.split("/") else None

    def relative(self, raw_path: str) -> str:
        """``raw_path`` as a link from this source: relative to its folder."""
        return posixpath.relpath(raw_path, posixpath.dirname(self.path) or ".")

    def label(self, name: str) -> tuple[str, str] | None:
        """(source, section title) of reST label ``name`` (Sphinx compares labels lower-cased)."""
        if self.labels is None:
            return None
        if self._labels is None:
            self._labels = self.labels()
        found = self._labels.get(name.lower())
        return None if found is None or self.access_of(found[0]) is not None else found

    def shows(self, raw_path: str) -> bool:
        """Whether this source may name ``raw_path`` (link to it): not when it is restricted."""
        return self.access_of(raw_path) is None

    def include(self, target: str) -> tuple[str | None, str]:
        """(text, "") of a file to include, or (None, why not): this source was added from
        outside, the file is outside raw/, unreadable, added from outside itself, restricted
        (while ``restricted`` is False), the document itself, already included, or past
        ``MAX_INCLUDES`` for this document."""
        if self.outside:
            return None, f"{target} not read ({self.outside}: it includes no other file)"
        resolved = self.resolve(target)
        if resolved is None:
            return None, f"{target} is outside raw/"
        if self.read is None:
            return None, f"{target} not read (no access to raw/ here)"
        if resolved == self.path or resolved in self.included or len(self.included) >= MAX_INCLUDES:
            return None, f"{target} already included (or more than {MAX_INCLUDES} includes)"
        rule = self.access_of(resolved)
        if rule is not None and not self.restricted:
            return None, f"{target}: restricted (access: {', '.join(rule) or 'admins only'}), not in a page more people read"
        text = self.read(resolved)
        if text.startswith("!"):
            return None, f"{target}: {text[1:]}"
        self.included.append(resolved)
        if rule is not None:
            self.carried[resolved] = rule
        return text, ""


class LabelScan:
    """The labels of one file as a line scan finds them (reST ``.. _label:``, MyST ``(label)=``):
    a label waits for what follows it; the next title is the section it names, other text names
    none. ``found()``: label -> (path, title), and ``doc:<path>`` -> (path, the first title)."""

    def __init__(self, path: str):
        self.path = path
        self._found: dict[str, tuple[str, str]] = {}
        self._pending: list[str] = []
        self._doc_title = ""

    def label(self, name: str) -> None:
        self._pending.append(name.strip().lower())

    def title(self, text: str) -> None:
        title = " ".join(text.replace("`", "").split())
        self._doc_title = self._doc_title or title
        self._settle(title)

    def text(self) -> None:
        self._settle("")

    def found(self) -> dict[str, tuple[str, str]]:
        self._settle("")
        self._found[f"doc:{self.path}"] = (self.path, self._doc_title)
        return self._found

    def _settle(self, title: str) -> None:
        for name in self._pending:
            self._found.setdefault(name, (self.path, title))
        self._pending = []

