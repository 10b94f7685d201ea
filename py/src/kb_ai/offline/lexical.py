"""A BM25 index over the catalog (title, summary, topic) and the articles' text.

Fields are weighted by repetition: a title term counts three times, a summary term twice, body
terms once, so a page *about* a term outranks one that merely mentions it. The index is saved in
``.kaas/lexical-index/`` with a fingerprint of the catalog and of every article's size and mtime;
a later process loads it instead of re-reading every article, and rebuilds it when anything changed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np

from kb_ai.offline.text import tokenize
from kb_ai.store.access import parse_access
from kb_ai.store.articles import read_article_text, split_frontmatter
from kb_ai.store.catalog import Catalog, CatalogEntry
from kb_ai.store.files import atomic_write_text

log = logging.getLogger(__name__)

INDEX_FORMAT = 3  # 3: access rules are part of the fingerprint
TITLE_WEIGHT = 3
SUMMARY_WEIGHT = 2
BODY_CHAR_LIMIT = 50_000  # per article: enough to rank, bounded for huge pages


@dataclass(frozen=True)
class ScoredPage:
    path: str
    score: float


def _entry_terms(entry: CatalogEntry, body: str) -> list[str]:
    return (
        tokenize(entry.title) * TITLE_WEIGHT
        + tokenize(entry.summary) * SUMMARY_WEIGHT
        + tokenize(entry.topic.replace("-", " "))
        + tokenize(body[:BODY_CHAR_LIMIT])
    )


def _read_body(wiki_dir: Path, entry: CatalogEntry) -> str:
    path = entry.path
    try:
        text = read_article_text(wiki_dir / path, path)
        meta, body = split_frontmatter(text, path)
    except Exception as exc:  # an unreadable page still ranks by its catalog line
        log.warning("lexical index: %s: %s", path, exc)
        return ""
    if parse_access(meta)[0] != entry.access:
        # The file's access changed since the catalog was loaded (a hand edit not yet indexed):
        # its text may now be for other readers. Rank it by its catalog line until re-indexed.
        return ""
    return body


def catalog_fingerprint(wiki_dir: Path, catalog: Catalog) -> str:
    """Changes when any catalog line (access rule included) or any listed article's size or
    mtime changes."""
    digest = hashlib.sha256(f"v{INDEX_FORMAT}".encode())
    root = str(wiki_dir)
    parts = []
    for entry in catalog.entries:
        stamp = catalog.stamps.get(entry.path) if catalog.stamps is not None else None
        if stamp is None:
            try:
                st = os.stat(f"{root}/{entry.path}")
                stamp = (st.st_size, st.st_mtime_ns)
            except OSError:
                stamp = (-1, -1)
        parts.append(f"{entry.path}\x00{entry.title}\x00{entry.summary}\x00{entry.topic}\x00{entry.access}\x00"
                     f"{stamp[0]}:{stamp[1]}\n")
    digest.update("".join(parts).encode())
    return digest.hexdigest()


class LexicalIndex:
    """BM25 over a catalog's pages. ``search`` returns pages by descending score (> 0 only)."""

    def __init__(self, paths: list[str], retriever: bm25s.BM25, vocab: dict[str, int]):
        self.paths = paths
        self._retriever = retriever
        self._vocab = vocab

    @classmethod
    def build(cls, wiki_dir: Path, catalog: Catalog, *, with_bodies: bool = True) -> "LexicalIndex":
        corpus = [
            _entry_terms(e, _read_body(wiki_dir, e) if with_bodies else "") for e in catalog.entries
        ]
        vocab: dict[str, int] = {}
        ids = [[vocab.setdefault(term, len(vocab)) for term in terms] for terms in corpus]
        retriever = bm25s.BM25()
        if catalog.entries:
            retriever.index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), show_progress=False)
        return cls([e.path for e in catalog.entries], retriever, vocab)

    @classmethod
    def load_or_build(cls, wiki_dir: Path, catalog: Catalog, cache_dir: Path | None) -> "LexicalIndex":
        """Load the saved index when its fingerprint matches, else build and save it."""
        if cache_dir is None or not catalog.entries:
            return cls.build(wiki_dir, catalog)
        fingerprint = catalog_fingerprint(wiki_dir, catalog)
        loaded = cls._load(cache_dir, fingerprint)
        if loaded is not None:
            return loaded
        index = cls.build(wiki_dir, catalog)
        try:
            index._save(cache_dir, fingerprint)
        except OSError as exc:  # a read-only KB still answers; it just rebuilds next time
            log.warning("could not save the lexical index in %s: %s", cache_dir, exc)
        return index

    def _save(self, cache_dir: Path, fingerprint: str) -> None:
        tmp = cache_dir.with_name(cache_dir.name + f".tmp-{os.getpid()}")
        old = cache_dir.with_name(cache_dir.name + f".old-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(parents=True)
            self._retriever.save(str(tmp), show_progress=False)
            (tmp / "kaas-paths.json").write_text(json.dumps(self.paths), encoding="utf-8")
            (tmp / "kaas-vocab.json").write_text(json.dumps(self._vocab), encoding="utf-8")
            atomic_write_text(tmp / "kaas-fingerprint", fingerprint)
            if cache_dir.exists():
                os.replace(cache_dir, old)
            os.replace(tmp, cache_dir)
        except BaseException:
            # Disk full half-way: no half-written folder left behind, the previous index kept.
            shutil.rmtree(tmp, ignore_errors=True)
            if old.exists() and not cache_dir.exists():
                os.replace(old, cache_dir)
            raise
        shutil.rmtree(old, ignore_errors=True)

    @classmethod
    def _load(cls, cache_dir: Path, fingerprint: str) -> "LexicalIndex | None":
        try:
            if (cache_dir / "kaas-fingerprint").read_text(encoding="utf-8") != fingerprint:
                return None
            paths = json.loads((cache_dir / "kaas-paths.json").read_text(encoding="utf-8"))
            vocab = json.loads((cache_dir / "kaas-vocab.json").read_text(encoding="utf-8"))
            retriever = bm25s.BM25.load(str(cache_dir), mmap=False)
        except (OSError, ValueError, KeyError, RecursionError) as exc:
            log.info("lexical index cache unusable (%s); rebuilding", exc)
            return None
        return cls(paths, retriever, vocab)

    def restricted_to(self, paths) -> "LexicalIndex":
        """The same index, scoring only ``paths`` (a topic's pages, what one user may read)."""
        position = self._positions()
        mask = np.zeros(len(self.paths), dtype=bool)
        mask[[position[p] for p in paths if p in position]] = True
        view = LexicalIndex(self.paths, self._retriever, self._vocab)
        view._mask = mask
        view._position = position
        return view

    _mask: np.ndarray | None = None
    _position: dict[str, int] | None = None

    def _positions(self) -> dict[str, int]:
        if self._position is None:
            self._position = {p: i for i, p in enumerate(self.paths)}
        return self._position

    def scores(self, query: str) -> np.ndarray:
        return self._term_scores([self._vocab[t] for t in tokenize(query) if t in self._vocab])

    def _term_scores(self, ids: list[int]) -> np.ndarray:
        if not ids or not self.paths:
            return np.zeros(len(self.paths), dtype=np.float32)
        scores = self._retriever.get_scores(ids)
        return scores if self._mask is None else np.where(self._mask, scores, 0)

    def search(self, query: str, k: int) -> list[ScoredPage]:
        scores = self.scores(query)
        if not len(scores) or k <= 0:
            return []
        k = min(k, len(scores))
        top = np.argpartition(-scores, k - 1)[:k]
        ranked = sorted(top, key=lambda i: (-float(scores[i]), self.paths[i]))
        return [ScoredPage(self.paths[i], float(scores[i])) for i in ranked if scores[i] > 0]

    def known_terms(self, query: str) -> tuple[list[str], list[str]]:
        """Split the query's words into those that occur in the wiki and those that do not."""
        found, missing = [], []
        for word in dict.fromkeys(w for w in query.split()):
            terms = tokenize(word)
            if not terms:
                continue
            known = all(t in self._vocab for t in terms)
            if known and self._mask is not None:  # in a restricted view, only the visible pages count
                known = all(bool(self._term_scores([self._vocab[t]]).any()) for t in terms)
            (found if known else missing).append(word.strip("?!.,;:\"'()"))
        return found, missing
