"""Dedup: exact duplicates, near-duplicates and revisions, and corpus-wide boilerplate.

* **Exact duplicate:** same normalized text (case, whitespace and Markdown markup ignored).
* **Near-duplicate:** estimated Jaccard similarity of word 3-shingles >= ``NEAR_THRESHOLD``
  (MinHash with 128 permutations and banded LSH, in numpy: datasketch imports scipy, which cost
  1.3 s of CPU on every compile with a change). When both documents carry *different* dates, the
  later one is a **revision** of the other: it is compiled into the same articles (so its changes
  supersede the earlier facts) instead of being dropped. Otherwise it is a duplicate. Two
  documents with the same title and different dates are a revision from a lower similarity
  (``REVISION_TITLE_THRESHOLD``): a revised document often changes more than a copy does.
* **Boilerplate:** a paragraph that appears in ``BOILERPLATE_MIN_SOURCES`` or more sources
  (footers, disclaimers, signatures) is kept in the first such source (path order) and removed
  from the text of the others before planning and writing.

The canonical member of a group is the one compiled earliest (already in the state); among new
sources the oldest by date, then the shortest name ("faq.html" before "faq (copy).html"), so
adding a copy never changes which source an article follows. Every
duplicate is recorded in the manifest with what it duplicates; nothing is dropped silently.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from kb_ai.store.words import title_key, words

NUM_PERM = 128
SHINGLE_WORDS = 3  # 5-word shingles judged a 2-sentence edit of a short note only 0.77 similar
NEAR_THRESHOLD = 0.8
REVISION_TITLE_THRESHOLD = 0.5  # same title, different dates, this similar: a revision
MIN_WORDS_FOR_NEAR = 40  # shorter texts are compared exactly only (too few shingles to judge)
BOILERPLATE_MIN_SOURCES = 3
MIN_PARAGRAPH_CHARS = 30

_BLOCK_SPLIT = re.compile(r"\n\s*\n")
_HEADING = re.compile(r"^\s*#{1,6}\s")


@dataclass
class Fingerprint:
    """What dedup needs to remember about a source between runs."""

    text_hash: str
    minhash: bytes | None
    paragraphs: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "text_hash": self.text_hash,
            "minhash": base64.b64encode(self.minhash).decode("ascii") if self.minhash else None,
            "paragraphs": self.paragraphs,
        }

    @classmethod
    def from_json(cls, data: dict) -> "Fingerprint":
        """Raises ValueError / TypeError / KeyError for anything ``to_json`` cannot have written
        (a damaged .kaas/fingerprints.json)."""
        raw = data.get("minhash")
        minhash = base64.b64decode(raw, validate=True) if raw else None
        paragraphs = data.get("paragraphs") or []
        if (not isinstance(data["text_hash"], str) or (minhash is not None and len(minhash) != NUM_PERM * 4)
                or not isinstance(paragraphs, list) or not all(isinstance(p, str) for p in paragraphs)):
            raise ValueError("not a fingerprint")
        return cls(data["text_hash"], minhash, list(paragraphs))


@dataclass(frozen=True)
class DuplicateVerdict:
    """``kind`` is ``exact``, ``near`` or ``revision``; ``of`` the canonical source's path."""

    kind: str
    of: str
    similarity: float


def blocks(text: str) -> list[str]:
    """Blank-line separated blocks of a text, as written."""
    return [b for b in _BLOCK_SPLIT.split(text) if b.strip()]


def paragraph_hash(block: str) -> str | None:
    """Hash of a prose block's normalized words; None for headings and short blocks."""
    if _HEADING.match(block):
        return None
    normalized = " ".join(words(block))
    if len(normalized) < MIN_PARAGRAPH_CHARS:
        return None
    return hashlib.sha256(normalized.encode("utf-8")).hexdigest()[:16]


_MERSENNE = np.uint64((1 << 61) - 1)
_MAX_HASH = np.uint64((1 << 32) - 1)
_rng = np.random.RandomState(1)
_A = _rng.randint(1, (1 << 61) - 1, size=NUM_PERM, dtype=np.uint64)
_B = _rng.randint(0, (1 << 61) - 1, size=NUM_PERM, dtype=np.uint64)
BANDS, ROWS = 16, 8  # LSH banding: P(candidate) = 1 - (1 - s^8)^16: 0.95 at s=0.8, 0.06 at s=0.5
_CHUNK = 4096


def minhash_signature(shingles: Iterable[bytes]) -> np.ndarray:
    """128 MinHash values (uint32) of a set of shingles: ``(a*h + b) mod p`` per permutation,
    the usual universal-hash scheme, computed in chunks so a huge document stays small."""
    values = np.fromiter((int.from_bytes(hashlib.blake2b(s, digest_size=4).digest(), "little") for s in shingles),
                         dtype=np.uint64)
    signature = np.full(NUM_PERM, _MAX_HASH, dtype=np.uint64)
    with np.errstate(over="ignore"):  # uint64 wrap-around is part of the hash, as in datasketch
        for start in range(0, len(values), _CHUNK):
            chunk = values[start:start + _CHUNK, None]
            permuted = np.bitwise_and((chunk * _A + _B) % _MERSENNE, _MAX_HASH)
            signature = np.minimum(signature, permuted.min(axis=0))
    return signature.astype(np.uint32)


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Estimated Jaccard similarity: the share of equal MinHash values."""
    return float(np.count_nonzero(a == b)) / NUM_PERM


def _signature(values: bytes) -> np.ndarray:
    return np.frombuffer(values, dtype=np.uint32)


def fingerprint(text: str) -> Fingerprint:
    tokens = words(text)
    text_hash = hashlib.sha256(" ".join(tokens).encode("utf-8")).hexdigest()
    minhash = None
    if len(tokens) >= MIN_WORDS_FOR_NEAR:
        shingles = {" ".join(tokens[i:i + SHINGLE_WORDS]).encode("utf-8")
                    for i in range(len(tokens) - SHINGLE_WORDS + 1)}
        minhash = minhash_signature(sorted(shingles)).tobytes()
    paragraphs = sorted({h for h in (paragraph_hash(b) for b in blocks(text)) if h})
    return Fingerprint(text_hash, minhash, paragraphs)


class DedupIndex:
    """Canonical sources seen so far, for exact and near-duplicate lookups (banded LSH)."""

    def __init__(self) -> None:
        self._by_hash: dict[str, str] = {}
        self._by_title: dict[str, list[str]] = {}
        self._signatures: dict[str, np.ndarray] = {}
        self._bands: list[dict[bytes, list[str]]] = [{} for _ in range(BANDS)]

    def add(self, path: str, fp: Fingerprint, title: str = "") -> None:
        self._by_hash.setdefault(fp.text_hash, path)
        if title:
            self._by_title.setdefault(title_key(title), []).append(path)
        if fp.minhash and path not in self._signatures:
            signature = _signature(fp.minhash)
            self._signatures[path] = signature
            for band in range(BANDS):
                key = signature[band * ROWS:(band + 1) * ROWS].tobytes()
                self._bands[band].setdefault(key, []).append(path)

    def _candidates(self, signature: np.ndarray) -> set[str]:
        found: set[str] = set()
        for band in range(BANDS):
            found.update(self._bands[band].get(signature[band * ROWS:(band + 1) * ROWS].tobytes(), ()))
        return found

    def match(self, fp: Fingerprint, title: str = "") -> tuple[str, float, bool] | None:
        """The canonical source this fingerprint may duplicate: (path, similarity, same title)."""
        exact = self._by_hash.get(fp.text_hash)
        if exact is not None:
            return exact, 1.0, False
        if not fp.minhash:
            return None
        signature = _signature(fp.minhash)
        best: tuple[str, float, bool] | None = None
        for path in sorted(self._candidates(signature)):
            value = similarity(signature, self._signatures[path])
            if value >= NEAR_THRESHOLD and (best is None or value > best[1]):
                best = (path, value, False)
        if best is None and title:
            for path in self._by_title.get(title_key(title), []):
                other = self._signatures.get(path)
                if other is None:
                    continue
                value = similarity(signature, other)
                if value >= REVISION_TITLE_THRESHOLD and (best is None or value > best[1]):
                    best = (path, value, True)
        return best


def classify(match: tuple[str, float, bool], date: str | None, other_date: str | None) -> DuplicateVerdict | None:
    """Exact copies are duplicates; near copies with two different dates are revisions; a
    same-title match below the near threshold counts only as a revision."""
    path, similarity, by_title = match
    if similarity >= 1.0 and not by_title:
        return DuplicateVerdict("exact", path, 1.0)
    if date and other_date and date != other_date:
        return DuplicateVerdict("revision", path, round(similarity, 3))
    if by_title:
        return None
    return DuplicateVerdict("near", path, round(similarity, 3))


@dataclass
class Boilerplate:
    """Paragraph hashes seen in many sources, and the one source that keeps each."""

    owner: dict[str, str]  # paragraph hash -> the source that keeps it

    @classmethod
    def from_fingerprints(cls, fingerprints: dict[str, Fingerprint]) -> "Boilerplate":
        counts: dict[str, int] = {}
        first: dict[str, str] = {}
        for path in sorted(fingerprints):
            for h in fingerprints[path].paragraphs:
                counts[h] = counts.get(h, 0) + 1
                first.setdefault(h, path)
        return cls({h: first[h] for h, n in counts.items() if n >= BOILERPLATE_MIN_SOURCES})

    def strip(self, path: str, text: str) -> tuple[str, int]:
        """``text`` without boilerplate blocks owned by other sources; returns (text, removed)."""
        if not self.owner:
            return text, 0
        kept: list[str] = []
        removed = 0
        for block in blocks(text):
            h = paragraph_hash(block)
            if h is not None and h in self.owner and self.owner[h] != path:
                removed += 1
                continue
            kept.append(block)
        return ("\n\n".join(kept), removed) if removed else (text, 0)
