"""Re-index when articles change on disk, so an edit made in a text editor shows in the chat and
the wiki browser without a restart.

The catalog store already reloads when ``master-index.md`` changes; this closes the other gap:
an article edited, added or removed by hand. The watcher waits for the operating system's
file-change events under ``wiki/`` (watchfiles: inotify on Linux, FSEvents on macOS; set
``WATCHFILES_FORCE_POLLING=1`` where none are delivered, e.g. some network mounts), so an idle
server does no work and an edit is seen within the debounce. On an event it compares a cheap
fingerprint (names, sizes, mtimes of the article files) with the last one it saw, so kaas's own
writes (a save through the API, the catalog it generates) cause no second pass. When articles
changed, the wiki is re-indexed (in a thread, under the same lock as saves, and never while a
compile holds the knowledge base), then the new catalog and keyword index are built (``warm``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Callable

import anyio
from watchfiles import Change, awatch

from kb_ai.store.lock import CompileLock
from kb_ai.errors import KaasError
from kb_ai.store.articles import RESERVED_NAMES
from kb_ai.store.kb import KnowledgeBase

log = logging.getLogger(__name__)


def wiki_fingerprint(wiki_dir: Path) -> bytes:
    """What the watcher remembers of the wiki: every article file's size, mtime and path
    (generated files excluded), as one sorted, NUL-separated ``size:mtime:path`` listing. One
    bytes object (~50 bytes an article; a dict of path strings and stamp tuples held ~330), so a
    server of 100,000 articles keeps ~5 MB for it; equal listings mean nothing changed."""
    return b"\0".join(sorted(f"{size}:{mtime}:{rel}".encode("utf-8", "surrogateescape")
                             for rel, (size, mtime) in wiki_entries(wiki_dir).items()))


def changed_paths(before: bytes, after: bytes) -> list[str]:
    """The article paths (relative to wiki/) added, removed or changed between two listings
    (``wiki_fingerprint``)."""
    differ = set(before.split(b"\0")) ^ set(after.split(b"\0"))
    differ.discard(b"")
    return sorted({record.split(b":", 2)[2].decode("utf-8", "surrogateescape") for record in differ})


def wiki_entries(wiki_dir: Path) -> dict[str, tuple[int, int]]:
    """Every article file (path relative to wiki/, POSIX) with its size and mtime."""
    root = str(wiki_dir)
    stack = [(root, "")]  # (folder, its path relative to wiki/ with a trailing "/", or "")
    entries: dict[str, tuple[int, int]] = {}
    while stack:
        folder, prefix = stack.pop()
        try:
            with os.scandir(folder) as items:
                for item in items:
                    if item.name.startswith("."):
                        continue
                    if item.is_dir(follow_symlinks=False):
                        stack.append((item.path, f"{prefix}{item.name}/"))
                    elif item.name.endswith(".md") and not (not prefix and item.name in RESERVED_NAMES):
                        try:
                            st = item.stat()
                        except OSError:
                            continue
                        entries[prefix + item.name] = (st.st_size, st.st_mtime_ns)
        except OSError:
            continue
    return entries


class WikiWatcher:
    """Re-indexes the wiki when its articles change on disk. ``interval`` (seconds) is the
    debounce: the changes of one burst (an editor's save, a ``git pull``) make one re-index."""

    def __init__(self, kb: KnowledgeBase, interval: float, lock: Callable[[], asyncio.Lock],
                 warm: Callable[[], None] | None = None,
                 on_change: Callable[[list[str]], None] | None = None):
        self.kb = kb
        self.interval = interval
        self._lock = lock
        self._warm = warm  # blocking: run in a worker thread after each re-index, outside the locks
        # Called (on the event loop) with the article paths of each batch of changes, once the
        # wiki is re-indexed: the server's change feed (server/events.py).
        self._on_change = on_change
        self._seen: bytes | None = None  # the last listing seen (wiki_fingerprint)
        self._retry: asyncio.Task | None = None  # a check put off while a compile held the lock
        self.reindexed = 0

    def _announce(self, listing: bytes) -> list[str]:
        changed = changed_paths(self._seen, listing) if self._seen is not None else []
        self._seen = listing
        if changed and self._on_change is not None:
            self._on_change(changed)
        return changed

    def mark_seen(self) -> list[str]:
        """Our own save just re-indexed: the current state needs no second pass (its pages are
        still announced to the change feed). Returns the changed paths."""
        if not self.kb.wiki_dir.is_dir():
            return []
        return self._announce(wiki_fingerprint(self.kb.wiki_dir))

    async def check(self) -> bool:
        """One poll. Returns True when it re-indexed."""
        if not self.kb.wiki_dir.is_dir():
            return False
        current = await anyio.to_thread.run_sync(wiki_fingerprint, self.kb.wiki_dir)
        if self._seen is None:  # the baseline (it holds the paths, to tell later changes by path)
            self._seen = current
            return False
        if current == self._seen:
            return False
        async with self._lock():
            try:
                await anyio.to_thread.run_sync(self._reindex)
            except KaasError as exc:
                # A compile is running (it re-indexes itself when done) or the wiki is unreadable:
                # look again later, so the change is still announced (its last writes may be
                # the generated catalog, which wakes no watcher).
                log.info("wiki changed; not re-indexed now: %s", exc.message)
                self._look_again()
                return False
            self._announce(await anyio.to_thread.run_sync(wiki_fingerprint, self.kb.wiki_dir))
        await anyio.to_thread.run_sync(self._warm_caches)  # outside the save lock: saves need not wait
        self.reindexed += 1
        return True

    def _look_again(self) -> None:
        if self._retry is None or self._retry.done():
            self._retry = asyncio.get_running_loop().create_task(self._later(), name="kaas-wiki-recheck")

    async def _later(self) -> None:
        await asyncio.sleep(max(self.interval, 0.5))
        await self._check_logged()

    def _reindex(self) -> None:
        with CompileLock(self.kb.state_dir):
            result = self.kb.reindex()
        log.info("wiki changed on disk: re-indexed %d articles", result.articles)

    def _warm_caches(self) -> None:
        if self._warm is None:
            return
        try:  # the new catalog and keyword index, built here rather than by the next question
            self._warm()
        except Exception:  # noqa: BLE001 (warming is an optimisation; the next question reports errors)
            log.warning("warming the caches after a re-index failed", exc_info=True)

    async def run(self) -> None:
        """Watch until cancelled. A wiki folder that is missing (or goes away) is waited for."""
        while True:
            await self._check_logged()  # the baseline, or what changed while nobody watched
            if not self.kb.wiki_dir.is_dir():
                await asyncio.sleep(self.interval)
                continue
            try:
                async for _changes in awatch(self.kb.wiki_dir, watch_filter=self._may_be_article,
                                             debounce=max(1, round(self.interval * 1000)), step=50):
                    await self._check_logged()
            except Exception:  # noqa: BLE001 (the folder went away, a watch limit, ...: start again)
                log.warning("watching %s failed; watching it again", self.kb.wiki_dir, exc_info=True)
                await asyncio.sleep(self.interval)

    async def _check_logged(self) -> None:
        try:
            await self.check()
        except Exception:  # noqa: BLE001 (the watcher must outlive one bad pass)
            log.exception("wiki watcher pass failed")

    def _may_be_article(self, _change: Change, path: str) -> bool:
        """An event worth a fingerprint: an article, or a folder of them (a folder moved away
        reports only the folder). Hidden names (kaas's temporary files) and the generated root
        files (``master-index.md``, ...) are not."""
        try:
            parts = Path(path).relative_to(self.kb.wiki_dir).parts
        except ValueError:
            return False
        if not parts or any(part.startswith(".") for part in parts):
            return False
        if len(parts) == 1 and parts[0] in RESERVED_NAMES:
            return False
        name = parts[-1]
        return name.endswith(".md") or "." not in name
