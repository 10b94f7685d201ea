"""Compile, stage 2 (dedup): exact duplicates, near-duplicates and revisions, and corpus-wide boilerplate.

* **Exact duplicate:** same normalized text (case, whitespace and Markdown markup ignored).
* **Near-duplicate:** estimated Jaccard similarity of word 3-shingles >= ``NEAR_THRESHOLD``
  (MinHash with 128 permutations and banded LSH, in numpy: datasketch imports scipy, which cost
  1.3 s of CPU on every compile with a change). When both documents carry *different* dates, the
  later one is a **revision** of the other: it is compiled into the same articles (so its changes
  supersede the earlier facts) instead of being dropped. Otherwise it is a duplicate. Two
  documents with the same title and different dates are a revision from a lower similarity
  (``REVISION_TITLE_THRESHOLD``): a revised document often changes more than a copy does.
* **Distinct documents are never copies** (``distinct``): a source whose own title is not its
  original's (``title_key``; a title made from a file name is not the document's own) is another
  document however alike their text ("Tara Strong" and "Tara Strong filmography" share a paragraph; two
  novels of one series share their blurb), and a copy is only dropped when it names nothing the
  kept source does not: its **key entities** (numbers and dates, capitalised names) are all in
  the kept one, and so are all its words (a copy saying "disabled" where the original says
  "enabled" says something else). Two county lists, two seasons of a team, a copy with another
  date in its header are all compiled. A revision is not dropped (it is merged into the same
  articles), so it only needs the same title.
* **Boilerplate:** a paragraph that appears in ``BOILERPLATE_MIN_SOURCES`` or more sources
  (footers, disclaimers, signatures) is kept in the first such source (path order) and removed
  from the text of the others before planning and writing.

The canonical member of a group is the one compiled earliest (already in the state); among new
sources the oldest by date, then the shortest name ("faq.html" before "faq (copy).html"), so
adding a copy never changes which source an article follows. Every
duplicate is recorded in the manifest with what it duplicates and listed in the ``sources:`` of
the articles its original feeds (``compile/article_jobs.py``); nothing is dropped silently.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

import numpy as np

from kb_ai.compile.context import CompileRun, SourceWork, stage_timer
from kb_ai.compile.ingest import Ingested, RawFile, Source, read_source
from kb_ai.compile.readers import title_from_filename
from kb_ai.compile.records import COMPILED, DUPLICATE, FAILED, PLANNED, SourceRecord
from kb_ai.store.markdown_text import iter_lines_outside_fences
from kb_ai.store.words import title_key, words

if TYPE_CHECKING:  # (state imports this module for Fingerprint)
    from kb_ai.compile.state import CompileState

NUM_PERM = 128
SHINGLE_WORDS = 3  # 5-word shingles judged a 2-sentence edit of a short note only 0.77 similar
NEAR_THRESHOLD = 0.8
REVISION_TITLE_THRESHOLD = 0.5  # same title, different dates, this similar: a revision
OWN_TITLE_WORDS = 60  # a title from the file name is the document's own when its text opens with it
MIN_WORDS_FOR_NEAR = 40  # shorter texts are compared exactly only (too few shingles to judge)
BOILERPLATE_MIN_SOURCES = 3
MIN_PARAGRAPH_CHARS = 30

_BLOCK_SPLIT = re.compile(r"\n\s*\n")
_HEADING = re.compile(r"^\s*#{1,6}\s")
_FENCE_START = re.compile(r"^[ \t]*(?:`{3,}|~{3,})")


@dataclass
class Fingerprint:
    """What dedup needs to remember about a source between runs."""

    text_hash: str
    minhash: bytes | None
    paragraphs: list[str] = field(default_factory=list)
    entities: list[str] | None = None  # hashes of the key entities; None: from a kaas before them
    title: str | None = None  # the document's own title (``own_title``), "" for none; None: not known

    def to_json(self) -> dict:
        return {
            "text_hash": self.text_hash,
            "minhash": base64.b64encode(self.minhash).decode("ascii") if self.minhash else None,
            "paragraphs": self.paragraphs,
            "entities": self.entities,
            "title": self.title,
        }

    @classmethod
    def from_json(cls, data: dict) -> "Fingerprint":
        """Raises ValueError / TypeError / KeyError for anything ``to_json`` cannot have written
        (a damaged .kaas/fingerprints.json)."""
        raw = data.get("minhash")
        minhash = base64.b64decode(raw, validate=True) if raw else None
        paragraphs = data.get("paragraphs") or []
        entities = data.get("entities")
        title = data.get("title")
        if (not isinstance(data["text_hash"], str) or (minhash is not None and len(minhash) != NUM_PERM * 4)
                or not _strings(paragraphs) or not (entities is None or _strings(entities))
                or not (title is None or isinstance(title, str))):
            raise ValueError("not a fingerprint")
        return cls(data["text_hash"], minhash, list(paragraphs), None if entities is None else list(entities), title)


def _strings(value) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


@dataclass(frozen=True)
class DuplicateVerdict:
    """``kind`` is ``exact``, ``near`` or ``revision``; ``of`` the canonical source's path."""

    kind: str
    of: str
    similarity: float


def blocks(text: str) -> list[str]:
    """Blank-line separated blocks of a text, as written; a fenced code block is one block
    with its blank lines (split there, removing one part would leave a fence open)."""
    if "```" not in text and "~~~" not in text:
        return [b for b in _BLOCK_SPLIT.split(text) if b.strip()]
    out: list[str] = []
    current: list[str] = []
    for line, in_fence in iter_lines_outside_fences(text):
        if not in_fence and not line.strip():
            if current:
                out.append("\n".join(current))
                current = []
            continue
        current.append(line)
    if current:
        out.append("\n".join(current))
    return [b for b in out if b.strip()]


def paragraph_hash(block: str) -> str | None:
    """Hash of a prose block's normalized words; None for headings, code blocks (the same
    example in two tutorial pages belongs to both) and short blocks."""
    if _HEADING.match(block) or _FENCE_START.match(block):
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


_TOKEN = re.compile(r"\w+(?:[.,:/'’-]\w+)*", re.UNICODE)


def key_entities(text: str) -> set[str]:
    """What a document names: its numbers and dates (``1973``, ``2014-05-01``, ``v1.2``) and its
    capitalised words (names: ``Kent``, ``Gulik``, ``NBC``), case-folded. Two texts that differ
    here are about different things, however many of their other words they share."""
    found: set[str] = set()
    for token in _TOKEN.findall(text):
        if token[0].isupper() or any(c.isdigit() for c in token):
            found.add(token.casefold())
    return found


def _entity_hashes(text: str) -> list[str]:
    return sorted({hashlib.blake2b(e.encode("utf-8"), digest_size=6).hexdigest() for e in key_entities(text)})


def own_title(path: str, title: str, tokens: list[str]) -> str:
    """The title a document gives itself, as compared (``title_key``); "" when its title was only
    made from its file name and the text does not open with it (``faq (copy).md``): such a
    title says nothing about what the document is."""
    key = title_key(title or "")
    if key != title_key(title_from_filename(path)):
        return key
    return key if key and f" {key} " in " " + " ".join(tokens[:OWN_TITLE_WORDS]) + " " else ""


def distinct(title: str | None, original_title: str | None) -> bool:
    """A source is another document than a possible original when it has an own title
    (``own_title``) the original does not have, whatever their text: dropping it would take its
    title out of the wiki. (A copy with no title of its own loses nothing by its name, which
    ``sources:`` keeps.) An unknown title (None) counts as distinct: not dropping is the safe side."""
    if title is None or original_title is None:
        return True
    return bool(title) and title != original_title


def fingerprint(text: str, path: str = "", title: str = "") -> Fingerprint:
    """What dedup compares of a source; ``path`` and ``title`` (the source's) give its own title."""
    tokens = words(text)
    text_hash = hashlib.sha256(" ".join(tokens).encode("utf-8")).hexdigest()
    minhash = None
    if len(tokens) >= MIN_WORDS_FOR_NEAR:
        shingles = {" ".join(tokens[i:i + SHINGLE_WORDS]).encode("utf-8")
                    for i in range(len(tokens) - SHINGLE_WORDS + 1)}
        minhash = minhash_signature(sorted(shingles)).tobytes()
    paragraphs = sorted({h for h in (paragraph_hash(b) for b in blocks(text)) if h})
    return Fingerprint(text_hash, minhash, paragraphs, _entity_hashes(text),
                       own_title(path, title, tokens) if path else "")


@dataclass(frozen=True)
class Match:
    """A canonical source a new one may duplicate. ``by_title``: found by its same title only
    (below the near threshold: a revision, never a copy). ``names_more``: the new source names a
    key entity the canonical one does not (then it is not a copy either)."""

    path: str
    similarity: float
    by_title: bool = False
    names_more: bool = False


class DedupIndex:
    """Canonical sources seen so far, for exact and near-duplicate lookups (banded LSH)."""

    def __init__(self) -> None:
        self._by_hash: dict[str, list[str]] = {}
        self._by_title: dict[str, list[str]] = {}
        self._titles: dict[str, str | None] = {}
        self._entities: dict[str, frozenset[str] | None] = {}
        self._signatures: dict[str, np.ndarray] = {}
        self._bands: list[dict[bytes, list[str]]] = [{} for _ in range(BANDS)]

    def add(self, path: str, fp: Fingerprint, title: str = "") -> None:
        self._by_hash.setdefault(fp.text_hash, []).append(path)
        self._titles[path] = fp.title
        self._entities[path] = None if fp.entities is None else frozenset(fp.entities)
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

    def _names_more(self, fp: Fingerprint, other: str) -> bool:
        theirs = self._entities.get(other)
        if fp.entities is None or theirs is None:
            return True  # not known: not a copy (dropping it could lose what it names)
        return not theirs.issuperset(fp.entities)

    def match(self, fp: Fingerprint, title: str = "") -> Match | None:
        """The canonical source this fingerprint may duplicate, the most similar first; sources
        that are ``distinct`` documents by their own titles are never a match."""
        def same_document(other: str) -> bool:
            return not distinct(fp.title, self._titles.get(other))

        for other in self._by_hash.get(fp.text_hash, ()):
            if same_document(other):
                return Match(other, 1.0, False, self._names_more(fp, other))
        if not fp.minhash:
            return None
        signature = _signature(fp.minhash)
        best: Match | None = None
        for other in sorted(self._candidates(signature)):
            value = similarity(signature, self._signatures[other])
            if value >= NEAR_THRESHOLD and (best is None or value > best.similarity) and same_document(other):
                best = Match(other, value, False, self._names_more(fp, other))
        if best is None and title:
            for other in self._by_title.get(title_key(title), []):
                signature_of = self._signatures.get(other)
                if signature_of is None:
                    continue
                value = similarity(signature, signature_of)
                if value >= REVISION_TITLE_THRESHOLD and (best is None or value > best.similarity):
                    best = Match(other, value, True)
        return best


def classify(match: Match, date: str | None, other_date: str | None) -> DuplicateVerdict | None:
    """Near copies with two different dates are revisions (merged, not dropped); a same-title
    match below the near threshold counts only as a revision; otherwise a copy is dropped only
    when it names nothing its original does not (``Match.names_more``)."""
    if date and other_date and date != other_date and not (match.similarity >= 1.0 and not match.by_title):
        return DuplicateVerdict("revision", match.path, round(match.similarity, 3))
    if match.by_title or match.names_more:
        return None
    if match.similarity >= 1.0:
        return DuplicateVerdict("exact", match.path, 1.0)
    return DuplicateVerdict("near", match.path, round(match.similarity, 3))


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


# ---------------------------------------------------------------------------------------------
# the stage


@dataclass
class Deduped:
    """The sources still to compile (copies left out, revisions marked) and the sources that
    became copies, with the articles they fed (their name is removed from them)."""

    work: dict[str, SourceWork]
    became_duplicate: dict[str, list[str]]


def dedup(run: CompileRun, ingested: Ingested) -> Deduped:
    """Exact and near copies are recorded, not compiled; a later-dated near copy is a revision
    of its original; boilerplate paragraphs shared by many sources are removed."""
    with stage_timer(run.report, "dedup") as stage:
        state, present = run.state, ingested.present
        work = dict(ingested.work)
        for path in ingested.deleted:
            state.set_fingerprint(path, None)
        _orphaned_copies(run, present, work)
        counts = {"checked": len(work), "exact": 0, "near": 0, "revisions": 0, "boilerplate_paragraphs": 0}
        became: dict[str, list[str]] = {}
        if work:
            fingerprints = state.fingerprints()
            index = _known_index(run, present, work, fingerprints)
            run.progress.start("dedup", len(work))
            # Oldest first, then the simplest name: "faq.html" is the original of "faq (copy).html",
            # and a later-dated near copy is a revision of the earlier one, not the other way round.
            for path in sorted(work, key=lambda p: (work[p].source.date or "9999", len(p), p)):
                run.progress.advance(path)
                _dedup_one(run, work, work[path], index, counts, became, present)
            work = {p: w for p, w in work.items() if w.change != "duplicate"}
            counts["boilerplate_paragraphs"] = _strip_boilerplate(state, present, work, fingerprints)
            if not run.dry_run:
                state.save_fingerprints()
        _report_known_duplicates(run, present, work)
        run.progress.done()
        stage.counts = counts
    return Deduped(work, became)


def _orphaned_copies(run: CompileRun, present: dict[str, RawFile], work: dict[str, SourceWork]) -> None:
    """Copies whose original vanished or changed are compiled in their own right now."""
    state = run.state
    for path, record in sorted(state.sources.items()):
        if record.status == DUPLICATE and path in present and path not in work:
            original = record.duplicate_of
            if original not in present or original in work or \
                    state.sources.get(original, record).status == DUPLICATE:
                result = read_source(present[path])
                if isinstance(result, Source):
                    work[path] = SourceWork(result, "changed", record)


def _known_index(run: CompileRun, present: dict[str, RawFile], work: dict[str, SourceWork],
                 fingerprints: dict[str, Fingerprint]) -> DedupIndex:
    """The sources compiled before (and still there), to compare the new ones with."""
    state = run.state
    index = DedupIndex()
    for path in sorted(state.sources):
        record = state.sources[path]
        if path in work or path not in present or record.status not in (COMPILED, PLANNED, FAILED):
            continue
        fp = fingerprints.get(path)
        if fp is None or fp.entities is None or fp.title is None:  # a run killed before saving them; an older kaas
            result = read_source(present[path])
            if not isinstance(result, Source):
                continue
            fp = fingerprint(result.text, path, result.title)
            state.set_fingerprint(path, fp)
        index.add(path, fp, record.title or "")
    return index


def _adds_words(text: str, original: str, work: dict[str, SourceWork], present: dict[str, RawFile]) -> bool:
    """Whether ``text`` has a word the source ``original`` does not ("disabled" for "enabled",
    "thirty" for "fourteen"): then dropping it would lose what it says. The original is read
    again when it is not in this run (a near copy is rare; an exact one has the same words)."""
    if original in work:
        original_text = work[original].source.text
    elif original in present:
        result = read_source(present[original])
        if not isinstance(result, Source):
            return True
        original_text = result.text
    else:
        return True
    return not set(words(text)) <= set(words(original_text))


def _dedup_one(run: CompileRun, work: dict[str, SourceWork], item: SourceWork, index: DedupIndex,
               counts: dict[str, int], became: dict[str, list[str]], present: dict[str, RawFile]) -> None:
    state, path = run.state, item.source.path
    fp = fingerprint(item.source.text, path, item.source.title)
    state.set_fingerprint(path, fp)
    match = index.match(fp, item.source.title)
    verdict = None
    if match is not None:
        other = match.path
        other_date = work[other].source.date if other in work else \
            (state.sources[other].date if other in state.sources else None)
        verdict = classify(match, item.source.date, other_date)
        if verdict is not None and verdict.kind == "near" and _adds_words(item.source.text, other, work, present):
            verdict = None
    if verdict is None:
        index.add(path, fp, item.source.title)
    elif verdict.kind == "revision":
        item.revision_of = verdict.of
        counts["revisions"] += 1
        index.add(path, fp, item.source.title)
        run.report.duplicates.append({"path": path, "of": verdict.of, "kind": "revision",
                                      "similarity": verdict.similarity})
    else:
        counts[verdict.kind] += 1
        source = item.source
        if item.previous:
            became[path] = list(item.previous)
        state.record_source(SourceRecord(source.path, DUPLICATE, source.checksum, source.size, source.mtime_ns,
                                         source.kind, source.title, source.date, duplicate_of=verdict.of,
                                         duplicate_kind=verdict.kind, similarity=verdict.similarity,
                                         notes=source.notes))
        item.change = "duplicate"


def _strip_boilerplate(state: CompileState, present: dict[str, RawFile], work: dict[str, SourceWork],
                       fingerprints: dict[str, Fingerprint]) -> int:
    """Remove paragraphs many sources share (kept in one of them); returns how many went."""
    boilerplate = Boilerplate.from_fingerprints(
        {p: fp for p, fp in fingerprints.items()
         if p in present and (p in work or state.sources.get(p, SourceRecord(p, "")).status != DUPLICATE)}
    )
    total = 0
    for path, item in work.items():
        if item.source.guarded is not None:
            item.source.guarded.text = boilerplate.strip(path, item.source.guarded.text)[0]
        text, removed = boilerplate.strip(path, item.source.text)
        if removed:
            item.source.text = text
            item.source.notes.append(f"{removed} boilerplate paragraph(s) removed")
            total += removed
    return total


def _report_known_duplicates(run: CompileRun, present: dict[str, RawFile], work: dict[str, SourceWork]) -> None:
    report, state = run.report, run.state
    for path, record in sorted(state.sources.items()):
        if record.status == DUPLICATE and path in present:
            report.duplicates.append({"path": path, "of": record.duplicate_of,
                                      "kind": record.duplicate_kind or "exact",
                                      "similarity": record.similarity or 1.0})
    revisions = sum(1 for d in report.duplicates if d["kind"] == "revision")
    report.sources["duplicates"] = len(report.duplicates) - revisions
    report.sources["revisions"] = revisions + sum(
        1 for p, r in state.sources.items() if r.revision_of and p in present and p not in work
    )
