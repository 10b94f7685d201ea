"""Lexical relevance, in one place: every ranking by shared words in kaas is one of these.

* ``LexicalIndex``: BM25 (bm25s) over the catalog and the articles' text, saved on disk (below).
* ``rank_texts``: BM25 (bm25s) over a handful of texts ranked once (the extractive answer's
  sentences).
* ``TermIndex``: BM25 over short texts that grows one text at a time (the compile planner's
  catalog, which sees each article it plans in the same run).
* ``by_shared_terms``: texts ordered by how many terms they share with a query (the sections
  of a page kept when it is trimmed to a reading budget, or shown to the model for a revision).
* ``jaccard``: the share of terms two texts have in common (lint's contradiction pairs).
* ``term_groups``: texts grouped by a distinctive word they share (the topics of a flat
  ``raw/``, ``compile/topic_rule.py``); words as ``store.words.label_words`` reads them (whole
  words, so a group's word is its readable name), weighted by inverse document frequency like
  ``store/topics.py``'s summaries.

All of them read text through ``offline.text.tokenize`` (stemmed, stop words dropped).

``LexicalIndex``: a BM25 index over the catalog (title, summary, topic) and the articles' text.

Fields are weighted by repetition: a title term counts three times, a summary term twice, body
terms once, so a page *about* a term outranks one that merely mentions it. The index is saved in
``.kaas/lexical-index/`` with a fingerprint of the catalog and of every article's size and mtime;
a later process loads it instead of re-reading every article, and rebuilds it when anything changed.
The saved index is kaas's own state: a folder or file in it that is damaged or is not a regular
file (a FIFO, a link to a device or a huge file, garbage, arrays that do not fit the catalog) is
reported in one warning line and the index rebuilt; nothing is handed to bm25s's loader before
every file in the folder has been checked to be a regular file of bounded size.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import logging
import math
import os
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import bm25s
import numpy as np

from kb_ai.offline.text import tokenize
from kb_ai.store.words import GENERIC_WORDS, label_words
from kb_ai.store.access import parse_access
from kb_ai.store.articles import read_article_text, split_frontmatter
from kb_ai.store.catalog import Catalog, CatalogEntry
from kb_ai.files import (
    DamagedFileError,
    atomic_write_text,
    check_regular_file,
    read_state_bytes,
    read_state_json,
    remove_state_entry,
    state_folder,
)

log = logging.getLogger(__name__)

INDEX_FORMAT = 3  # 3: access rules are part of the fingerprint
TITLE_WEIGHT = 3
SUMMARY_WEIGHT = 2
BODY_CHAR_LIMIT = 50_000  # per article: enough to rank, bounded for huge pages
MAX_INDEX_FILE_BYTES = 1 << 30  # any one file of a saved index
_BM25_SETTINGS = ("k1", "b", "delta", "method", "idf_method", "dtype", "int_dtype", "backend", "csc_backend")


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


def _check_loaded(retriever: bm25s.BM25, vocab, num_docs: int) -> None:
    """Raise DamagedFileError unless a loaded index is one ``LexicalIndex.build`` could have saved
    for ``num_docs`` pages: scoring it can then never fail (no term id or page past the arrays)."""
    reference = bm25s.BM25()
    if any(getattr(retriever, name, None) != getattr(reference, name) for name in _BM25_SETTINGS):
        raise DamagedFileError("params.index.json holds settings kaas does not use")
    if getattr(retriever, "nonoccurrence_array", None) is not None:
        raise DamagedFileError("unexpected non-occurrence array")
    scores = getattr(retriever, "scores", None)
    if not _scores_fit(scores, num_docs):
        raise DamagedFileError("its arrays do not fit the catalog")
    terms = len(scores["indptr"]) - 1  # (bm25s leaves the empty token, which no query holds, out of its arrays)
    if not _vocab_fits(vocab, terms):
        raise DamagedFileError("kaas-vocab.json does not fit the index")


def _scores_fit(scores, num_docs: int) -> bool:
    """Whether bm25s's sparse score matrix is well formed for ``num_docs`` pages: 1-D arrays of
    the right kinds, a monotone ``indptr`` from 0 to the data's length, page ids below ``num_docs``."""
    try:
        data, indices, indptr = scores["data"], scores["indices"], scores["indptr"]
        return (scores["num_docs"] == num_docs
                and all(isinstance(a, np.ndarray) and a.ndim == 1 for a in (data, indices, indptr))
                and data.dtype.kind == "f" and indices.dtype.kind in "iu" and indptr.dtype.kind in "iu"
                and len(data) == len(indices) and len(indptr) >= 1 and indptr[0] == 0 and indptr[-1] == len(data)
                and bool(np.all(np.diff(indptr) >= 0))
                and (len(indices) == 0 or (int(indices.min()) >= 0 and int(indices.max()) < num_docs)))
    except (TypeError, KeyError, IndexError, ValueError):
        return False


def _vocab_fits(vocab, terms: int) -> bool:
    """Whether the saved vocabulary maps strings to term ids below ``terms`` (the empty token,
    which bm25s leaves out of its arrays, may take the id one past them)."""
    return isinstance(vocab, dict) and all(
        isinstance(k, str) and type(v) is int and 0 <= v < (terms if k else terms + 1) for k, v in vocab.items())


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
        loaded = cls._load(cache_dir, fingerprint, [e.path for e in catalog.entries])
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
        state_folder(cache_dir.parent)  # a file or FIFO in place of the folder it goes in is replaced
        remove_state_entry(tmp)
        try:
            tmp.mkdir()
            self._retriever.save(str(tmp), show_progress=False)
            (tmp / "kaas-paths.json").write_text(json.dumps(self.paths), encoding="utf-8")
            (tmp / "kaas-vocab.json").write_text(json.dumps(self._vocab), encoding="utf-8")
            atomic_write_text(tmp / "kaas-fingerprint", fingerprint)
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
    def _load(cls, cache_dir: Path, fingerprint: str, paths: list[str]) -> "LexicalIndex | None":
        """The saved index when it is the index of ``paths`` with this fingerprint; None when
        there is none or it is stale (quietly) or damaged (with a warning)."""
        try:
            stored = read_state_bytes(cache_dir / "kaas-fingerprint", 1000)
            if stored is None or stored != fingerprint.encode():
                return None  # not saved yet, or stale: rebuilt
            if read_state_json(cache_dir / "kaas-paths.json", MAX_INDEX_FILE_BYTES) != paths:
                raise DamagedFileError("kaas-paths.json does not list the catalog's pages")
            vocab = read_state_json(cache_dir / "kaas-vocab.json", MAX_INDEX_FILE_BYTES)
            with os.scandir(cache_dir) as entries:  # bm25s opens its files itself: check each first
                for entry in entries:
                    if entry.is_symlink():
                        raise DamagedFileError(f"{entry.name} is a link")
                    try:
                        check_regular_file(Path(entry.path), MAX_INDEX_FILE_BYTES)
                    except OSError as exc:
                        raise DamagedFileError(f"{entry.name}: {exc.strerror or exc}") from None
            try:
                retriever = bm25s.BM25.load(str(cache_dir), mmap=False, load_corpus=False)
            except Exception as exc:  # noqa: BLE001 - a third-party loader meets a damaged file
                raise DamagedFileError(f"bm25s could not load it: {type(exc).__name__}: {exc}") from None
            _check_loaded(retriever, vocab, len(paths))
        except (DamagedFileError, OSError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            log.warning("lexical index %s is damaged (%s); rebuilt", cache_dir, " ".join(str(reason).split())[:300])
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

    def page_count(self) -> int:
        """Pages this index scores (a restricted view: the visible ones)."""
        return len(self.paths) if self._mask is None else int(self._mask.sum())

    def position(self, path: str) -> int:
        """The position of ``path`` in ``paths`` (what ``pages_with`` returns)."""
        return self._positions()[path]

    def pages_with(self, term: str) -> np.ndarray:
        """Positions (in ``paths``) of the pages whose text holds ``term`` (a tokenized term),
        visible pages only in a restricted view; empty for a term no page holds."""
        term_id = self._vocab.get(term)
        scores = getattr(self._retriever, "scores", None)
        if term_id is None or not scores or term_id + 1 >= len(scores["indptr"]):
            return np.zeros(0, dtype=np.int64)
        indptr = scores["indptr"]
        docs = np.asarray(scores["indices"][indptr[term_id]:indptr[term_id + 1]], dtype=np.int64)
        return docs if self._mask is None else docs[self._mask[docs]]

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


def rank_texts(query_terms: set[str] | list[str], texts_terms: list[list[str]]) -> np.ndarray:
    """BM25 scores (bm25s) of each of ``texts_terms`` (tokenized texts) for ``query_terms``: an
    index built for one ranking and dropped."""
    return rank_texts_each([query_terms], texts_terms)[0]


def rank_texts_each(queries: list[set[str] | list[str]], texts_terms: list[list[str]]) -> list[np.ndarray]:
    """``rank_texts`` for several queries over the same texts (the passages of one page, for each
    sentence of an answer that cites it): one index, scored once per query."""
    if not texts_terms:
        return [np.zeros(0, dtype=np.float32) for _ in queries]
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(t, len(vocab)) for t in terms] for terms in texts_terms]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), show_progress=False)
    scores = []
    for query_terms in queries:
        known = [vocab[t] for t in query_terms if t in vocab]
        scores.append(retriever.get_scores(known) if known else np.zeros(len(texts_terms), dtype=np.float32))
    return scores


class TermIndex:
    """BM25 over short texts (a title and summary each) that grows one text at a time, scored
    term by term through postings: a query touches only the texts that share a term with it, and
    skips terms in over 2% of all texts (they say little and cost a scan of them all)."""

    def __init__(self) -> None:
        self._postings: dict[str, dict[str, int]] = {}
        self._lengths: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._lengths)

    def add(self, key: str, text: str) -> None:
        terms = tokenize(text)
        self._lengths[key] = len(terms)
        for term, count in Counter(terms).items():
            self._postings.setdefault(term, {})[key] = count

    def search(self, text: str, limit: int, exclude: set[str] | frozenset[str] = frozenset()) -> list[str]:
        """The ``limit`` keys most related to ``text`` (ties broken by key), leaving out ``exclude``."""
        n = len(self._lengths)
        if not n:
            return []
        average = (sum(self._lengths.values()) / n) or 1.0
        scores: dict[str, float] = {}
        common = max(200, n // 50)
        for term, _qcount in Counter(tokenize(text)).most_common(40):
            postings = self._postings.get(term)
            if not postings or len(postings) > common:
                continue
            idf = math.log(1 + (n - len(postings) + 0.5) / (len(postings) + 0.5))
            for key, tf in postings.items():
                if key in exclude:
                    continue
                norm = tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * self._lengths[key] / average))
                scores[key] = scores.get(key, 0.0) + idf * norm
        return [key for key, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]]


def jaccard(a: set[str], b: set[str]) -> float:
    """The share of terms two texts have in common: |a & b| / |a | b| (0 for two empty sets)."""
    union = a | b
    return len(a & b) / len(union) if union else 0.0


def by_shared_terms(query: str, texts: list[str]) -> list[int]:
    """The positions of ``texts``, most terms shared with ``query`` first (ties in text order)."""
    terms = set(tokenize(query))
    shared = [len(terms & set(tokenize(text))) if terms else 0 for text in texts]
    return sorted(range(len(texts)), key=lambda i: (-shared[i], i))


def term_groups(texts: dict[str, str], min_size: int, max_size: int,
                titles: dict[str, str] | None = None) -> dict[str, str]:
    """Group ``texts`` (key -> a title and summary) by a word they share: key -> the group's word,
    or "" for a text in no group. Greedy and deterministic (the word in more ``titles``, then
    alphabetical order, breaks every tie): the word found in the most ungrouped texts, among the words in at most
    ``max_size`` texts (a word in more names too broad a subject: "american"), takes those texts; until no
    word is in ``min_size`` ungrouped texts. A text left over joins the group it shares the most
    rare words with (inverse document frequency) while that group has room; one sharing none
    stays in no group. One added text changes the count of its own words by one, so it moves
    only the texts whose best two words were tied."""
    words_of = {key: label_words(texts[key]) - GENERIC_WORDS for key in sorted(texts)}
    frequency: Counter[str] = Counter()
    for found in words_of.values():
        frequency.update(found)
    # Candidate words: in min_size..max_size texts in all. A word in more ("american", "known",
    # "during") names no subject of that size; it is not taken even once others took most texts.
    cover = {w: c for w, c in frequency.items() if min_size <= c <= max_size}
    holders: dict[str, list[str]] = {w: [] for w in cover}
    for key, found in words_of.items():
        for w in found:
            if w in holders:
                holders[w].append(key)
    in_titles: Counter[str] = Counter()
    for title in (titles or {}).values():
        in_titles.update(label_words(title))
    group: dict[str, str] = {}
    # Counts only fall, so a heap whose stale entries are pushed again when popped finds the
    # next word in O(log words): a 50,000-text raw/ is grouped in seconds, not minutes.
    heap = [(-c, -in_titles[w], w) for w, c in cover.items()]
    heapq.heapify(heap)
    while heap:
        negative, _, word = heapq.heappop(heap)
        if word not in cover:
            continue
        if -negative != cover[word]:
            heapq.heappush(heap, (-cover[word], -in_titles[word], word))
            continue
        if cover[word] < min_size:
            break
        for key in holders[word]:
            if key in group:
                continue
            group[key] = word
            for w in words_of[key]:
                if w in cover:
                    cover[w] -= 1
        del cover[word]
    sizes = Counter(group.values())
    total = max(len(texts), 1)
    profile: dict[str, Counter[str]] = {}
    for key, word in group.items():
        profile.setdefault(word, Counter()).update(words_of[key])
    groups_with: dict[str, list[str]] = {}  # word -> the groups whose texts have it
    for word in sorted(profile):
        for w in profile[word]:
            groups_with.setdefault(w, []).append(word)
    for key, found in words_of.items():
        if key in group:
            continue
        scores: dict[str, float] = {}
        for w in found:
            weight = math.log(total / frequency[w])
            for word in groups_with.get(w, ()):
                scores[word] = scores.get(word, 0.0) + weight * profile[word][w] / sizes[word]
        room = [(score, word) for word, score in scores.items() if score > 0 and sizes[word] < max_size]
        best = min(room, key=lambda sw: (-sw[0], sw[1]))[1] if room else ""
        group[key] = best
        if best:
            sizes[best] += 1
    return group
