"""What a caller may learn about compiles: one rule, decided here for every route, event and tool.

- An admin (``Reader.admin``: the ``KAAS_API_TOKEN`` holder, a kaas.toml user with ``admin =
  true``, the owner of a server without tokens, the owner of ``kaas mcp`` over stdio) learns
  everything: whether a compile runs (``GET /api/sources``: ``compiling``), its stages and report
  (``GET``/``POST /api/compile``), and who holds the wiki's writer lock (``.kaas/compile.lock``:
  pid, host, start time) when a write of theirs is refused.
- Anyone else learns nothing of compiles. ``GET /api/sources`` carries no ``compiling``;
  ``/api/compile`` answers 403 ``forbidden`` whether a compile runs or not; a write of theirs
  that finds the writer lock held (``PUT /api/pages``, ``POST /api/answers``, MCP
  ``ask_and_save``) gets one answer, 409 ``locked`` saying ``BUSY``, the same whichever writer
  holds the lock (a compile, a re-index, the watcher, another person's save) and naming no
  process, host or time. ``/healthz`` says only that the server runs; ``/api/events`` names pages
  the reader may read when they change, never what changed them (``events.py``).

Every JSON error of the API goes through ``told`` (``pages.error_response`` takes the reader),
and so do the MCP tools' errors and notices.
"""

from __future__ import annotations

from typing import Any

from kb_ai.errors import KaasError, LockedError
from kb_ai.store.access import Reader

BUSY = "the wiki is busy: another change to it is being written; try again in a moment"


def learns_of_compiles(reader: Reader) -> bool:
    """Whether ``reader`` may learn that a compile runs, how far it got and what it reported."""
    return reader.admin


def compile_facts(reader: Reader, running: bool) -> dict[str, Any]:
    """The compile fields of ``GET /api/sources`` for ``reader``: none for a reader who may not learn of compiles."""
    return {"compiling": running} if learns_of_compiles(reader) else {}


def told(reader: Reader, exc: KaasError) -> KaasError:
    """``exc`` as ``reader`` may hear it: the writer lock's holder (a compile's pid, host and start)
    only for those who learn of compiles; anyone else hears ``BUSY``, with the same code and status."""
    if isinstance(exc, LockedError) and not learns_of_compiles(reader):
        return LockedError(BUSY)
    return exc
