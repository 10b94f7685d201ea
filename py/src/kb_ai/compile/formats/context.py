"""What a reader may know beyond the bytes of its file: the other sources around it.

A reStructuredText page includes files (``.. include::``, ``.. literalinclude::``) and links to
other pages by name (``:doc:``) or by label (``:ref:``). ``ReadContext`` answers those questions
for one source, from ``raw/`` only: ``ingest`` builds it (``compile/ingest.py``
``source_context``); a reader called without one (an archive member, a test) resolves nothing
and says so in its notes.
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


@dataclass
class ReadContext:
    """``path``: the source's path (``raw/...``). ``read``: the text of another file of raw/ by
    its ``raw/...`` path, or a reason string starting with "!" when it cannot be included.
    ``sources``: every source path of raw/. ``labels``: (lazily) reST label -> (source path, the title of the section it marks, or "")."""

    path: str
    read: Callable[[str], str] | None = None
    sources: frozenset[str] = frozenset()
    labels: Callable[[], dict[str, tuple[str, str]]] | None = None
    _labels: dict[str, tuple[str, str]] | None = field(default=None, repr=False)
    included: list[str] = field(default_factory=list, repr=False)  # raw/ paths included so far

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
        return self._labels.get(name.lower())

    def include(self, target: str) -> tuple[str | None, str]:
        """(text, "") of a file to include, or (None, why not): outside raw/, unreadable, the
        document itself, already included, or past ``MAX_INCLUDES`` for this document."""
        resolved = self.resolve(target)
        if resolved is None:
            return None, f"{target} is outside raw/"
        if self.read is None:
            return None, f"{target} not read (no access to raw/ here)"
        if resolved == self.path or resolved in self.included or len(self.included) >= MAX_INCLUDES:
            return None, f"{target} already included (or more than {MAX_INCLUDES} includes)"
        text = self.read(resolved)
        if text.startswith("!"):
            return None, f"{target}: {text[1:]}"
        self.included.append(resolved)
        return text, ""
