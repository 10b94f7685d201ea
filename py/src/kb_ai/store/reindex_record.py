"""``kaas index`` without re-reading the articles that did not change.

``KnowledgeBase.reindex`` builds the catalog from every article's frontmatter. At 100,000 pages
that is 100,000 reads and YAML parses (~30 s) even when nothing changed. So each re-index leaves
a record in ``.kaas/index-record.pickle``: the identity (size, mtime, inode) of the
master-index.md it wrote, and for each article it listed that file's stamp — (size, mtime_ns,
ctime_ns, inode) — and the warnings its parse gave. The next re-index takes an article's catalog
line from that master-index.md instead of parsing the file when

- master-index.md is still the file the record names (not edited by hand, not written by
  anything else since: its line is what the parse gave),
- the file is not a symbolic link, and its stamp is the recorded one (an edit, a replacement,
  a ``touch`` or a ``utime`` back to the old mtime all change the ctime or the inode), and
- the file had not changed in the ``RACY_SECONDS`` before that re-index began (an edit in the
  same clock tick as the read could hide behind an equal mtime).

Every other article (new, changed, a link, unreadable before) is parsed as before, so the
catalog is the one a full build gives (``tests/test_reindex_record.py``). The record is kaas's own
state: bounded, unpickled with no class or function allowed, sealed to the master-index.md it
is of (``kb_ai/seals.py``); anything wrong with it (missing, damaged, another format or kaas) is a
full build, never a wrong line.
"""

from __future__ import annotations

import io
import logging
import os
import stat
from pathlib import Path

from kb_ai import __version__
from kb_ai.errors import ArticleFormatError, UnsafePathError
from kb_ai.files import DamagedFileError, read_state_bytes, write_state_bytes
from kb_ai.seals import sealed, unsealed
from kb_ai.store import snapshot
from kb_ai.store.articles import iter_article_paths, load_article
from kb_ai.store.topics import MODEL_SUMMARIES_FILE, TOPICS_FILE
from kb_ai.store.catalog import (Catalog, CatalogEntry, entry_from_article, parse_master_index,
                                 read_master_index, sort_key)

log = logging.getLogger(__name__)

RECORD_NAME = "index-record.pickle"
RECORD_FORMAT = 1
MAX_RECORD_BYTES = 1 << 30
RACY_NS = int(snapshot.RACY_SECONDS * 1e9)

FileStamp = tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode


class Build:
    """A catalog built from the articles: its entries, warnings, each listed file's stamp and
    warnings, and whether any article was parsed (False: every line was taken as it was)."""

    def __init__(self, started_ns: int):
        self.started_ns = started_ns
        self.entries: list[CatalogEntry] = []
        self.warnings: list[str] = []
        self.files: dict[str, FileStamp | None] = {}
        self.file_warnings: dict[str, list[str]] = {}
        self.parsed = 0
        self.topics: tuple | None = None  # what topics.md was last built from (``topics_key``)
        self.known = 0  # lines the record vouched for

    @property
    def unchanged(self) -> bool:
        """Every line of the recorded master-index.md taken as it was, and no other: its text is
        what this catalog renders to (nothing to write)."""
        return self.parsed == 0 and self.known > 0 and len(self.entries) == self.known

    def catalog(self) -> Catalog:
        self.entries.sort(key=sort_key)
        return Catalog(self.entries, self.warnings)


def index_identity(wiki_dir: Path) -> tuple[int, int, int] | None:
    """master-index.md's (size, mtime_ns, inode), as the catalog snapshot keys it."""
    try:
        st = os.stat(wiki_dir / "master-index.md")
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def _file_stamp(root: str, rel: str) -> FileStamp | None:
    """A regular file's stamp; None for a symbolic link or anything else (always parsed)."""
    try:
        st = os.lstat(f"{root}/{rel}")
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def build_catalog_reusing(wiki_dir: Path, state_dir: Path | None) -> Build:
    """The catalog ``build_catalog`` gives, parsing only the articles the record cannot vouch for."""
    build = Build(snapshot.now_ns())
    known, stamps, old_warnings, before_ns, build.topics = _known_lines(wiki_dir, state_dir)
    build.known = len(known)
    root = str(wiki_dir)
    for rel in iter_article_paths(wiki_dir):
        stamp = _file_stamp(root, rel)
        entry = known.get(rel)
        if (entry is not None and stamp is not None and stamps.get(rel) == stamp
                and stamp[1] < before_ns - RACY_NS and stamp[2] < before_ns - RACY_NS):
            build.entries.append(entry)
            build.files[rel] = stamp
            if rel in old_warnings:
                build.file_warnings[rel] = old_warnings[rel]
                build.warnings.extend(old_warnings[rel])
            continue
        _parse(wiki_dir, rel, stamp, build)
    return build


def _parse(wiki_dir: Path, rel: str, stamp: FileStamp | None, build: Build) -> None:
    build.parsed += 1
    try:
        article = load_article(wiki_dir, rel)
    except (ArticleFormatError, UnsafePathError) as exc:
        build.warnings.append(f"skipped {exc.message}")
        return
    except OSError as exc:
        build.warnings.append(f"skipped {rel}: {exc.strerror or exc}")
        return
    build.warnings.extend(article.warnings)
    build.entries.append(entry_from_article(article))
    build.files[rel] = stamp
    if article.warnings:
        build.file_warnings[rel] = list(article.warnings)


def _known_lines(wiki_dir: Path, state_dir: Path | None):
    """The lines of the master-index.md the last re-index wrote, by path, with the recorded
    stamps and warnings and when that re-index began; all empty when it cannot vouch for them."""
    nothing = ({}, {}, {}, 0, None)
    identity = index_identity(wiki_dir)
    record = _load_record(state_dir, identity) if state_dir is not None and identity is not None else None
    if record is None:
        return nothing
    saved = snapshot.load_snapshot(state_dir, identity)
    try:
        if saved is not None:
            entries = snapshot.entries_of(saved.entries, CatalogEntry)
        else:
            text = read_master_index(wiki_dir)
            entries = parse_master_index(text).entries if text is not None else []
    except (OSError, ValueError):
        return nothing
    return {e.path: e for e in entries}, record["files"], record["warnings"], record["started_ns"], record["topics"]


def _about(identity) -> str:
    return f"{RECORD_NAME}:{tuple(identity)}"


def _load_record(state_dir: Path, identity) -> dict | None:
    path = state_dir / RECORD_NAME
    try:
        data = read_state_bytes(path, MAX_RECORD_BYTES)
        if data is None:
            return None
        raw = snapshot.plain_unpickle(io.BytesIO(data))
        if not (isinstance(raw, dict) and raw.get("format") == RECORD_FORMAT and raw.get("version") == __version__
                and tuple(raw.get("index") or ()) == tuple(identity)):
            return None  # of another master-index.md or another kaas: a full build
        unsealed(data, _about(identity))
        files, warnings, started, topics = raw["files"], raw["warnings"], raw["started_ns"], raw["topics"]
        if not (isinstance(files, dict) and isinstance(warnings, dict) and type(started) is int
                and type(topics) is tuple
                and all(type(k) is str and (v is None or (type(v) is tuple and len(v) == 4
                                                          and all(type(x) is int for x in v)))
                        for k, v in files.items())
                and all(type(k) is str and isinstance(v, list) and all(type(w) is str for w in v)
                        for k, v in warnings.items())):
            raise ValueError("its fields do not have the shapes kaas writes")
    except Exception as exc:  # noqa: BLE001 - our own damaged file: anything can fail; full build
        if not isinstance(exc, (DamagedFileError, OSError, ValueError)):
            exc = ValueError(" ".join(str(exc).split())[:200])
        log.warning("index record %s is damaged (%s); every article is read", path, exc)
        return None
    return {"files": files, "warnings": warnings, "started_ns": started, "topics": topics}


def topics_key(wiki_dir: Path, state_dir: Path | None) -> tuple:
    """What topics.md was built from besides the catalog: the model's topic summaries file and
    topics.md itself, each as its stamp (None: there is none)."""
    summaries = _file_stamp(str(state_dir), MODEL_SUMMARIES_FILE) if state_dir is not None else None
    return (summaries, _file_stamp(str(wiki_dir), TOPICS_FILE))


def save_record(wiki_dir: Path, state_dir: Path | None, build: Build, topics: tuple) -> None:
    """Record the master-index.md just written (or kept) as the lines of ``build``'s files, and
    ``topics`` as what topics.md was built from."""
    identity = index_identity(wiki_dir)
    if state_dir is None or identity is None:
        return
    import pickle

    payload = {"format": RECORD_FORMAT, "version": __version__, "index": identity,
               "started_ns": build.started_ns, "topics": topics, "files": build.files, "warnings": build.file_warnings}
    try:
        write_state_bytes(state_dir / RECORD_NAME,
                          sealed(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL), _about(identity)),
                          durable=False)
    except OSError as exc:  # a read-only KB: the next re-index reads every article
        log.info("could not save the index record in %s: %s", state_dir, exc)
