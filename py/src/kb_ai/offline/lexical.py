"""Lexical relevance over the wiki: ``LexicalIndex``, BM25 over the catalog and the articles' text,
saved on disk and updated one page at a time. The whole-text rankings (``rank_texts``,
``TermIndex``, ``by_shared_terms``, ``jaccard``, ``term_groups``) are ``offline/text_ranking.py``;
the saved index's files are read back and checked in ``offline/index_files.py``.

A query is read through ``offline.equivalents.query_weights``: its own terms, and at half weight
the words documentation uses for them ("disable" for "turn off"); or it is given as weighted
terms (``offline.feedback.expanded_query``: the question with the terms of its best pages).

Text is read through ``offline.text.tokenize`` (stemmed, stop words dropped), and the BM25
rankings score as bm25s's default did (Lucene's variant: k1 1.5, b 0.75, idf
``log(1 + (N - df + 0.5) / (df + 0.5))``; a query term given twice counts twice).

``LexicalIndex``: a BM25 index over the catalog (title, summary, topic) and the articles' text.

Fields are weighted by repetition: a title term (and a term of an ``aliases:`` name) counts three
times, a summary term twice, body terms and the terms of the questions the page answers
(frontmatter ``questions:``, read from the page file like its body, so only a reader who may read
the page searches them) once, so a page *about* a term outranks one that merely mentions it. It keeps term
frequencies (postings per term, numpy arrays) and document lengths, not precomputed scores: a
score is computed at query time from the current page count, document frequencies and average
length, so a page can be taken out and another put in without touching the rest — the result
ranks exactly as a full rebuild would. The index is saved in ``.kaas/lexical-index/`` with the
catalog's fingerprint and a key per page (its catalog line and file stamp); a later process
loads it, and when the catalog changed it re-reads only the pages whose key changed (a hand
edit: one page out, one in), or rebuilds it when too much changed to be worth it.
The saved index is kaas's own state: every file is read bounded and as plain arrays (numpy,
``allow_pickle=False``) or JSON, and checked against the folder's seal (``kb_ai/seals.py``,
written last: each file's SHA-256, bound to the fingerprint the index was built for); a folder or
file in it that is damaged, is not a regular file (a FIFO, a link to a device or a huge file,
garbage, arrays that do not fit together) or is well formed but not the file written with the
others (``kaas-paths.txt`` reordered, postings of another build) is reported in one warning line
and the index rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kb_ai.offline.equivalents import query_weights
from kb_ai.offline.index_files import (ARRAYS, FILES, check_saved, join_texts, load_array, read_extra, read_sealed,
                                      remove_abandoned_saves, save_folders, split_texts, write_index_files)
from kb_ai.seals import SEAL_NAME, FolderSeal, digest
from kb_ai.offline.text import tokenize
from kb_ai.offline.top_k import PathRank, top_k
from kb_ai.store.access import parse_access
from kb_ai.store.articles import questions_of, read_article_text, split_frontmatter
from kb_ai.store.catalog import Catalog, CatalogEntry
from kb_ai.store.name_index import NameIndex
from kb_ai.store.stamps import FileStamps
from kb_ai.files import DamagedFileError, read_state_bytes, remove_state_entry, state_folder

log = logging.getLogger(__name__)

INDEX_FORMAT = 7  # 4: kaas's own postings (term frequencies), updated page by page; 5: sealed; 6: questions:; 7: aliases
TITLE_WEIGHT = 3
SUMMARY_WEIGHT = 2
QUESTIONS_WEIGHT = 1  # frontmatter ``questions:`` (store/articles.py: questions_of)
BODY_CHAR_LIMIT = 50_000  # per article: enough to rank, bounded for huge pages
K1, B = 1.5, 0.75
# A changed catalog is updated page by page up to this many changed pages (or 2% of them); past
# that a full rebuild is about as fast and leaves no dead postings behind.
UPDATE_AT_MOST = 200


@dataclass(frozen=True)
class ScoredPage:
    path: str
    score: float


def _entry_terms(entry: CatalogEntry, page: tuple[str, list[str]]) -> list[str]:
    body, questions = page
    return (
        tokenize(entry.title) * TITLE_WEIGHT
        + tokenize(" ".join(entry.aliases)) * TITLE_WEIGHT  # other names of the page count as its title
        + tokenize(entry.summary) * SUMMARY_WEIGHT
        + tokenize(entry.topic.replace("-", " "))
        + tokenize(" ".join(questions)) * QUESTIONS_WEIGHT
        + tokenize(body[:BODY_CHAR_LIMIT])
    )


def _read_page(wiki_dir: Path, entry: CatalogEntry) -> tuple[str, list[str]]:
    """The page's body and its ``questions:`` (("", []) when unreadable, or when its access is
    no longer the catalog's)."""
    path = entry.path
    try:
        text = read_article_text(wiki_dir / path, path)
        meta, body = split_frontmatter(text, path)
    except Exception as exc:  # an unreadable page still ranks by its catalog line
        log.warning("lexical index: %s: %s", path, exc)
        return "", []
    if parse_access(meta)[0] != entry.access:
        # The file's access changed since the catalog was loaded (a hand edit not yet indexed):
        # its text may now be for other readers. Rank it by its catalog line until re-indexed.
        return "", []
    return body, questions_of(meta)


def page_body(wiki_dir: Path, entry: CatalogEntry) -> str:
    """The text of a page as the index reads it (frontmatter removed; "" when unreadable)."""
    return _read_page(wiki_dir, entry)[0][:BODY_CHAR_LIMIT]


def page_terms(wiki_dir: Path, entry: CatalogEntry) -> list[str]:
    """The terms the index counts for a page, as it reads them now (``offline/feedback.py``)."""
    return _entry_terms(entry, _read_page(wiki_dir, entry))


def _stamps_of(wiki_dir: Path, catalog: Catalog) -> list[tuple[int, int]]:
    """Each entry's file (size, mtime_ns): as the catalog loaded it, else stat-ed now."""
    stamps = catalog.stamps
    if isinstance(stamps, FileStamps):
        known = stamps.in_order(catalog.entries)
    else:
        known = [stamps.get(e.path) if stamps is not None else None for e in catalog.entries]
    out = []
    for entry, stamp in zip(catalog.entries, known, strict=True):
        if stamp is None:
            try:
                st = os.stat(f"{wiki_dir}/{entry.path}")
                stamp = (st.st_size, st.st_mtime_ns)
            except OSError:
                stamp = (-1, -1)
        out.append(stamp)
    return out


def _page_key(entry: CatalogEntry, stamp: tuple[int, int]) -> int:
    """What a page's terms depend on: its catalog line, access rule and file stamp (64 bits)."""
    text = (f"{entry.path}\x00{entry.title}\x00{entry.summary}\x00{entry.topic}\x00{entry.access}\x00{stamp[0]}:{stamp[1]}"
            f"\x00{entry.aliases}")
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def catalog_fingerprint(wiki_dir: Path, catalog: Catalog) -> str:
    """Changes when any catalog line (access rule included) or any listed article's size or
    mtime changes. A catalog loaded by ``CatalogStore`` carries its identity (a digest of the
    same), which costs nothing to read here."""
    digest = hashlib.sha256(f"v{INDEX_FORMAT}".encode())
    if catalog.identity is not None:
        digest.update(f"identity:{catalog.identity}".encode())
        return digest.hexdigest()
    parts = []
    for entry, stamp in zip(catalog.entries, _stamps_of(wiki_dir, catalog), strict=True):
        parts.append(f"{entry.path}\x00{entry.title}\x00{entry.summary}\x00{entry.topic}\x00{entry.access}\x00"
                     f"{stamp[0]}:{stamp[1]}\x00{entry.aliases}\n")
    digest.update("".join(parts).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _path_names(path: str | None) -> tuple[str, ...]:
    return () if path is None else (path,)


def _interned(paths: list[str], catalog: Catalog) -> list[str | None]:
    """Paths read from disk, each replaced by the catalog's own equal string where it lists the
    page ("" -> None: a page taken out): one copy of 100,000 path strings in a server, not two."""
    by_path = catalog.by_path
    out: list[str | None] = []
    for path in paths:
        entry = by_path.get(path) if path else None
        out.append(entry.path if entry is not None else (path or None))
    return out


def idf(df: int, n: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


class LexicalIndex:
    """BM25 over a catalog's pages. ``search`` returns pages by descending score (> 0 only).

    Pages have positions; a page taken out keeps its position, marked dead (``live``), and a page
    put in gets a new one. Postings of the pages of the last full build are in CSC arrays
    (``indptr`` per term into ``docs``/``tfs``); those of pages put in since, in ``_extra``."""

    def __init__(self, paths: list[str | None], vocab: dict[str, int], indptr: np.ndarray, docs: np.ndarray,
                 tfs: np.ndarray, lengths: np.ndarray, live: np.ndarray, keys: np.ndarray,
                 extra: dict[int, list[tuple[int, int]]] | None = None, df: np.ndarray | None = None):
        self.paths = paths  # by position; None: a page taken out
        self._vocab = vocab
        self._indptr, self._docs, self._tfs = indptr, docs, tfs
        self._lengths = lengths.astype(np.float64)
        self._live = live
        self._keys = keys
        self._extra = extra or {}
        self._path_rank = PathRank()  # shared by this index's views, not by its copies
        if df is None:  # a full build: every posting is of a live page
            df = np.zeros(len(vocab), dtype=np.int64)
            df[:len(indptr) - 1] = np.diff(indptr)
        self._df = df
        self._refresh_stats()

    def _refresh_stats(self) -> None:
        self._n = int(self._live.sum())
        total = float(self._lengths[self._live].sum()) if self._n else 0.0
        average = (total / self._n) if self._n else 1.0
        self._norm = K1 * (1 - B + B * self._lengths / (average or 1.0))
        self._by_path: NameIndex | None = None  # built at the first lookup by path (``_position``)

    @property
    def _position(self) -> NameIndex:
        """Path -> position: hashes in numpy (store/name_index.py), not a dict of 100,000 paths;
        built when first needed (a cold question that only searches never does)."""
        if self._by_path is None:
            self._by_path = NameIndex.one_each(self.paths, self.paths, _path_names)
        return self._by_path

    # -- building -------------------------------------------------------------------------------

    @classmethod
    def build(cls, wiki_dir: Path, catalog: Catalog, *, with_bodies: bool = True) -> "LexicalIndex":
        vocab: dict[str, int] = {}
        term_ids: list[np.ndarray] = []
        doc_ids: list[np.ndarray] = []
        freqs: list[np.ndarray] = []
        lengths = np.zeros(len(catalog.entries), dtype=np.float64)
        keys = np.zeros(len(catalog.entries), dtype=np.uint64)
        stamps = _stamps_of(wiki_dir, catalog)  # before reading: a later edit changes the key
        for position, (entry, stamp) in enumerate(zip(catalog.entries, stamps, strict=True)):
            terms = _entry_terms(entry, _read_page(wiki_dir, entry) if with_bodies else ("", []))
            counts = Counter(terms)
            lengths[position] = len(terms)
            keys[position] = _page_key(entry, stamp)
            term_ids.append(np.fromiter((vocab.setdefault(t, len(vocab)) for t in counts), dtype=np.int64, count=len(counts)))
            freqs.append(np.fromiter((min(c, 65535) for c in counts.values()), dtype=np.uint16, count=len(counts)))
            doc_ids.append(np.full(len(counts), position, dtype=np.int32))
        terms = np.concatenate(term_ids) if term_ids else np.zeros(0, np.int64)
        docs = np.concatenate(doc_ids) if doc_ids else np.zeros(0, np.int32)
        tfs = np.concatenate(freqs) if freqs else np.zeros(0, np.uint16)  # a count past 65,535 ranks as 65,535
        order = np.argsort(terms, kind="stable")  # by term, positions ascending within a term
        indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(terms, minlength=len(vocab)), out=indptr[1:])
        live = np.ones(len(catalog.entries), dtype=bool)
        return cls([e.path for e in catalog.entries], vocab, indptr, docs[order], tfs[order], lengths, live, keys)

    @classmethod
    def load_or_build(cls, wiki_dir: Path, catalog: Catalog, cache_dir: Path | None) -> "LexicalIndex":
        """Load the saved index when its fingerprint matches; when the catalog changed a little,
        update the saved one page by page; else build it. Saved whenever it changed."""
        if cache_dir is None or not catalog.entries:
            return cls.build(wiki_dir, catalog)
        fingerprint = catalog_fingerprint(wiki_dir, catalog)
        loaded, current = cls._load(cache_dir, fingerprint, catalog)
        if loaded is not None and current and loaded._lists(catalog):
            return loaded
        index = loaded.updated(wiki_dir, catalog) if loaded is not None else None
        if index is None:
            index = cls.build(wiki_dir, catalog)
        try:
            index._save(cache_dir, fingerprint)
        except OSError as exc:  # a read-only KB still answers; it just rebuilds next time
            log.warning("could not save the lexical index in %s: %s", cache_dir, exc)
        return index

    def updated(self, wiki_dir: Path, catalog: Catalog) -> "LexicalIndex | None":
        """This index made the index of ``catalog`` by taking out the pages that changed or are
        gone and putting in the changed and new ones; None when that is too many pages to be
        worth it (rebuild). Ranks exactly as ``build(catalog)`` would."""
        wanted: dict[str, tuple[CatalogEntry, tuple[int, int], int]] = {}
        for entry, stamp in zip(catalog.entries, _stamps_of(wiki_dir, catalog), strict=True):
            wanted[entry.path] = (entry, stamp, _page_key(entry, stamp))
        out = [i for i, p in enumerate(self.paths)
               if p is not None and (p not in wanted or wanted[p][2] != int(self._keys[i]))]
        put_in = [w for path, w in wanted.items()
                  if (at := self._position_of(path)) is None or w[2] != int(self._keys[at])]
        if len(out) + len(put_in) > max(UPDATE_AT_MOST, len(catalog.entries) // 50):
            return None
        index = self._copy()
        for position in out:
            index._take_out(position)
        for entry, stamp, key in put_in:
            index._put_in(entry, key, _entry_terms(entry, _read_page(wiki_dir, entry)))
        index._refresh_stats()
        return index

    def _lists(self, catalog: Catalog) -> bool:
        """Whether this index's pages are exactly the catalog's (a saved index whose fingerprint
        matches but whose pages do not was damaged: it is updated to the catalog instead)."""
        live = [p for p in self.paths if p is not None]
        return len(live) == len(catalog.entries) == len(set(live)) and all(p in catalog.by_path for p in live)

    def _copy(self) -> "LexicalIndex":
        """A copy that can be changed while this one keeps serving (the arrays of the last full
        build are shared: they are never written to)."""
        copy = object.__new__(LexicalIndex)
        copy.__dict__.update(self.__dict__)
        copy.paths = list(self.paths)
        copy._path_rank = PathRank()
        copy._vocab = dict(self._vocab)
        copy._lengths, copy._live, copy._keys, copy._df = (
            self._lengths.copy(), self._live.copy(), self._keys.copy(), self._df.copy())
        copy._extra = {term: list(postings) for term, postings in self._extra.items()}
        return copy

    def _take_out(self, position: int) -> None:
        self._live[position] = False
        in_base = np.nonzero(self._docs == position)[0]
        if len(in_base):
            terms = np.searchsorted(self._indptr, in_base, side="right") - 1
            np.subtract.at(self._df, terms, 1)
        for term, postings in self._extra.items():
            if any(doc == position for doc, _tf in postings):
                self._df[term] -= 1
        self.paths[position] = None

    def _put_in(self, entry: CatalogEntry, key: int, terms: list[str]) -> None:
        position = len(self.paths)
        self.paths.append(entry.path)
        self._lengths = np.append(self._lengths, float(len(terms)))
        self._live = np.append(self._live, True)
        self._keys = np.append(self._keys, np.uint64(key))
        for term, count in Counter(terms).items():
            term_id = self._vocab.get(term)
            if term_id is None:
                term_id = self._vocab[term] = len(self._vocab)
                self._df = np.append(self._df, 0)
            self._extra.setdefault(term_id, []).append((position, count))
            self._df[term_id] += 1

    # -- on disk ----------------------------------------------------------------------------------

    def _save(self, cache_dir: Path, fingerprint: str) -> None:
        tmp, old = save_folders(cache_dir)
        state_folder(cache_dir.parent)  # a file or FIFO in place of the folder it goes in is replaced
        remove_abandoned_saves(cache_dir)  # a save killed half-way left its folders behind
        remove_state_entry(tmp)
        try:
            tmp.mkdir()
            arrays = {"indptr": self._indptr, "docs": self._docs, "tfs": self._tfs, "lengths": self._lengths,
                      "live": self._live, "keys": self._keys, "df": self._df}
            extra = [[term, doc, tf] for term, postings in sorted(self._extra.items()) for doc, tf in postings]
            # NUL-separated (no path or term holds a NUL; "" for a page taken out): read back with
            # one split, where JSON would cost a parse and a check of every string.
            texts = {"kaas-paths.txt": join_texts(p or "" for p in self.paths),
                     "kaas-vocab.txt": join_texts(sorted(self._vocab, key=self._vocab.__getitem__)),
                     "kaas-extra.json": json.dumps(extra).encode("utf-8")}
            write_index_files(tmp, arrays, texts, fingerprint)
            if cache_dir.is_symlink() or cache_dir.exists():
                os.replace(cache_dir, old)  # whatever it is (a FIFO, a link): moved, never followed
            os.replace(tmp, cache_dir)
        except BaseException:
            # Disk full half-way: no half-written folder left behind, the previous index kept.
            shutil.rmtree(tmp, ignore_errors=True)
            if (old.is_symlink() or old.exists()) and not (cache_dir.is_symlink() or cache_dir.exists()):
                os.replace(old, cache_dir)
            raise
        try:
            remove_state_entry(old)
        except OSError:
            pass

    @classmethod
    def _load(cls, cache_dir: Path, fingerprint: str, catalog: Catalog) -> "tuple[LexicalIndex | None, bool]":
        """The saved index and whether its fingerprint is ``fingerprint``; (None, False) when
        there is none (quietly) or it is damaged (with a warning). Every file is checked against
        the folder's seal before it is used (``offline/index_files.py``)."""
        try:
            stored = read_state_bytes(cache_dir / "kaas-fingerprint", 1000)
            if stored is None:
                return None, False
            if stored != fingerprint.encode() and not os.path.lexists(cache_dir / SEAL_NAME):
                return None, False  # an index of an earlier format (unsealed): rebuilt quietly
            seal = FolderSeal(cache_dir, stored.decode("utf-8", "replace"), FILES)
            seal.check("kaas-fingerprint", digest(stored))
            paths = _interned(split_texts(read_sealed(cache_dir, "kaas-paths.txt", seal)), catalog)
            words = split_texts(read_sealed(cache_dir, "kaas-vocab.txt", seal))
            extra = read_extra(cache_dir, seal)
            arrays = {name: load_array(cache_dir, name, seal) for name in ARRAYS}
            vocab, extra_postings = check_saved(paths, words, extra, arrays)
        except (DamagedFileError, OSError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            log.warning("lexical index %s is damaged (%s); rebuilt", cache_dir, " ".join(str(reason).split())[:300])
            return None, False
        index = cls(paths, vocab, arrays["indptr"], arrays["docs"], arrays["tfs"], arrays["lengths"],
                    arrays["live"], arrays["keys"], extra_postings, arrays["df"])
        return index, stored == fingerprint.encode()

    # -- querying ---------------------------------------------------------------------------------

    def restricted_to(self, paths) -> "LexicalIndex":
        """The same index, scoring only ``paths`` (a topic's pages, what one user may read)."""
        mask = np.zeros(len(self.paths), dtype=bool)
        mask[[at for at in self._position.first_positions(list(paths)) if at is not None]] = True
        if self._stats_mask is not None:
            mask &= self._stats_mask  # a part of a reader's view stays inside it
        view = object.__new__(LexicalIndex)
        view.__dict__.update(self.__dict__)
        view._mask = mask
        return view

    _mask: np.ndarray | None = None
    # A reader's view (``as_view``): the pages whose statistics count (document frequencies,
    # page count, average length); None: the index's own statistics.
    _stats_mask: np.ndarray | None = None

    def as_view(self, paths) -> "LexicalIndex":
        """The same index scoring ``paths`` only, *as an index built over those pages alone*
        would: page count, average length and each query term's document frequency come from
        those pages (counted over them at query time), so nothing outside them — a reader's
        hidden pages — changes which pages come back, their order or their scores. A view costs a
        few bytes a page (masks and lengths), not a second index."""
        view = self.restricted_to(paths)
        visible = view._mask & view._live
        view._stats_mask = visible
        view._n = int(visible.sum())
        average = float(self._lengths[visible].sum()) / view._n if view._n else 1.0
        view._norm = K1 * (1 - B + B * self._lengths / (average or 1.0))
        return view

    def _postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        base = len(self._indptr) - 1
        if term < base:
            start, end = self._indptr[term], self._indptr[term + 1]
            docs, tfs = self._docs[start:end], self._tfs[start:end]
        else:
            docs, tfs = np.zeros(0, np.int32), np.zeros(0, np.int32)
        extra = self._extra.get(term)
        if extra:
            docs = np.concatenate([docs, np.fromiter((d for d, _ in extra), dtype=np.int32, count=len(extra))])
            tfs = np.concatenate([tfs, np.fromiter((t for _, t in extra), dtype=np.int32, count=len(extra))])
        return docs, tfs

    def _query(self, query: "str | Sequence[tuple[str, float]]") -> list[tuple[int, float]]:
        """The query's terms the index knows, with their weights: of a question, as
        ``offline.equivalents`` reads it (its own words, and at a reduced weight the words
        documentation uses for them); else the weighted terms given (``offline.feedback``)."""
        weighted = query_weights(query) if isinstance(query, str) else query
        return [(self._vocab[t], w) for t, w in weighted if t in self._vocab]

    def _term_scores(self, ids: list[tuple[int, float]]) -> np.ndarray:
        """Scores by position (a dead page, and a page outside the mask, score 0)."""
        scores = np.zeros(len(self.paths), dtype=np.float64)
        for term, weight in ids:
            if int(self._df[term]) <= 0:
                continue
            docs, tfs = self._postings(term)
            alive = self._live[docs] if self._stats_mask is None else self._stats_mask[docs]
            docs, tfs = docs[alive], tfs[alive].astype(np.float64)
            df = int(self._df[term]) if self._stats_mask is None else len(docs)
            if df <= 0:
                continue
            scores[docs] += weight * idf(df, self._n) * tfs / (tfs + self._norm[docs])
        return scores if self._mask is None else np.where(self._mask, scores, 0.0)

    def scores(self, query: str) -> dict[str, float]:
        """Each page's score for ``query`` (pages that score 0 left out)."""
        scores = self._term_scores(self._query(query))
        return {self.paths[i]: float(scores[i]) for i in np.nonzero(scores > 0)[0]}

    def search(self, query: str, k: int) -> list[ScoredPage]:
        if k <= 0 or not self.paths:
            return []
        scores = self._term_scores(self._query(query))
        ranked = top_k(scores, k, self.paths, self._path_rank)  # ties by path, O(n) in numpy
        return [ScoredPage(self.paths[i], float(scores[i])) for i in ranked]

    def page_count(self) -> int:
        """Pages this index scores: the live ones (in a restricted view: the visible ones)."""
        return int(self._live.sum()) if self._mask is None else int((self._mask & self._live).sum())

    def position(self, path: str) -> int:
        """The position of ``path`` in ``paths`` (what ``pages_with`` returns)."""
        at = self._position_of(path)
        if at is None:
            raise KeyError(path)
        return at

    def _position_of(self, path: str) -> int | None:
        found = self._position.positions(path)
        return found[0] if found else None

    def pages_with(self, term: str) -> np.ndarray:
        """Positions (in ``paths``) of the live pages whose text holds ``term`` (a tokenized
        term), visible pages only in a restricted view; empty for a term no page holds."""
        term_id = self._vocab.get(term)
        if term_id is None or self._df[term_id] <= 0:
            return np.zeros(0, dtype=np.int64)
        docs, _tfs = self._postings(term_id)
        docs = docs[self._live[docs]].astype(np.int64)
        return docs if self._mask is None else docs[self._mask[docs]]

    def known_terms(self, query: str) -> tuple[list[str], list[str]]:
        """Split the query's words into those that occur in the wiki and those that do not."""
        found, missing = [], []
        for word in dict.fromkeys(w for w in query.split()):
            terms = tokenize(word)
            if not terms:
                continue
            known = all(t in self._vocab and self._occurs(self._vocab[t]) for t in terms)
            (found if known else missing).append(word.strip("?!.,;:\"'()"))
        return found, missing

    def _occurs(self, term: int) -> bool:
        """Whether a live page (inside the mask, in a restricted view) holds ``term``."""
        if self._df[term] <= 0:
            return False
        if self._mask is None:
            return True
        docs, _tfs = self._postings(term)
        docs = docs[self._live[docs]]
        return bool(self._mask[docs].any())


INDEX_FOLDER = "lexical-index"  # under .kaas/: the full catalog's saved index


def index_folder(state_dir: Path) -> Path:
    return state_dir / INDEX_FOLDER


def save_keyword_index(kb) -> None:
    """Load the catalog (which saves its snapshot) and build and save its keyword index, so the
    first question after ``kaas index`` or a compile finds both ready (``kb``: a KnowledgeBase).
    A failure to save is a warning: the first question then builds the index itself."""
    catalog = kb.catalog()
    if catalog.entries:
        LexicalIndex.load_or_build(kb.wiki_dir, catalog, index_folder(kb.state_dir))
