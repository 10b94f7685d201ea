"""Compile, stage 1 (ingest): walk ``raw/`` in a deterministic order and turn each file into text
plus metadata, and decide which sources need work this run (``ingest``).

Every file ends up either as a ``Source`` (normalized Markdown-ish text, title, date, checksum)
or as a ``SkippedSource`` with a reason a person can act on. Nothing here raises for a bad
file: unreadable, binary, oversized or corrupt inputs are skipped, never fatal. The readers of
each format are in ``readers.py``.
"""

from __future__ import annotations

import errno
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kb_ai.compile.add import ADDED_FILE, AddedSources, read_added
from kb_ai.compile.context import CompileRun, SourceWork, stage_timer
from kb_ai.compile.formats.context import MAX_INCLUDE_BYTES, ReadContext
from kb_ai.compile.formats.registry import INCLUDABLE_REASONS, is_left_out
from kb_ai.compile.kaasignore import IGNORE_FILE, SourceRules, group_left_out
from kb_ai.compile.readers import (
    UnreadableError,
    _has_words,
    _one_line,
    date_from_filename,
    decode_text,
    parse_document,
    title_from_filename,
)
from kb_ai.compile.relink import articles_naming_sources, relink
from kb_ai.compile.source_access import source_rules
from kb_ai.compile.topic_rule import folder_topic
from kb_ai.compile.records import FAILED, FINAL_STATUSES, SKIPPED, SourceRecord
from kb_ai.faults import fault_point
from kb_ai.files import FileTooLargeError, NotRegularFileError, read_regular_bytes
from kb_ai.store.access import derived_access, format_access, holds

MAX_SOURCE_BYTES = 25_000_000  # larger files are skipped: almost always data dumps, not documents
# Extracted text beyond this many UTF-8 bytes is cut (and the cut is noted). Counted in bytes,
# like the article limit (store.articles.MAX_ARTICLE_BYTES, 2,000,000), with room for the
# frontmatter, the title and demoted headings: an offline article made from the text fits.
MAX_TEXT_BYTES = 1_500_000



@dataclass
class Source:
    """One readable file of ``raw/``, normalized. ``path`` is ``raw/...`` (POSIX, relative to the KB)."""

    path: str
    kind: str
    checksum: str
    size: int
    mtime_ns: int
    title: str
    date: str | None
    text: str
    topic_hint: str
    notes: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    # The rule of the restricted files it includes (``source_access``; None: it includes none):
    # only an article at least as restricted may hold ``text``; every other one gets ``guarded``,
    # the same source read with those includes refused (``write.ArticleWriter``).
    access: tuple[str, ...] | None = None
    guarded: "Source | None" = None

    def for_page(self, page_access: tuple[str, ...] | None) -> "Source":
        """The source as a page with this access may hold it (``store.access.holds``)."""
        if self.guarded is None or holds(page_access, self.access):
            return self
        return self.guarded


@dataclass
class SkippedSource:
    """A file of ``raw/`` that was not compiled, and why."""

    path: str
    reason: str
    checksum: str | None = None
    size: int = 0
    mtime_ns: int = 0


@dataclass(frozen=True)
class RawFile:
    """A file found by the walk, before it is read."""

    path: str  # raw/...
    file: Path
    size: int
    mtime_ns: int
    skip_reason: str | None = None
    asked: bool = False  # a user's ``!pattern`` in raw/.kaasignore asked for it: read whatever it is


# ---------------------------------------------------------------------------------------------
# the walk


def walk_raw(kb_root: Path, rules: SourceRules | None = None) -> list[RawFile]:
    """Every file under ``raw/`` in sorted POSIX-path order. What the rules leave out (hidden
    files and folders, files that are not documents by their type, what ``raw/.kaasignore``
    ignores: ``compile/kaasignore.py``; a folder left out is not entered), symlinked folders
    (never followed: a link must not make kaas read outside raw/, and one inside raw/ would
    compile its files twice), symlinks leaving ``raw/`` or looping, and special files are listed
    with a skip reason instead of being read, so the report and the manifest name them. The
    ignore file itself is not listed. A bad ignore file raises ``IgnoreFileError``."""
    raw_dir = kb_root / "raw"
    if not raw_dir.is_dir():
        return []
    rules = rules if rules is not None else SourceRules.load(raw_dir)
    raw_real = raw_dir.resolve()
    found: list[RawFile] = []
    for folder, dirs, files in os.walk(raw_dir):
        rel_folder = Path(folder).relative_to(raw_dir).as_posix()
        prefix = "" if rel_folder == "." else f"{rel_folder}/"
        kept: list[str] = []
        for name in sorted(dirs):
            path = Path(folder) / name
            reason = rules.decide(prefix + name, is_dir=True).reason
            if reason is None and path.is_symlink():
                reason = _folder_link_reason(path, raw_real)
            if reason:
                found.append(RawFile(f"raw/{prefix}{name}/", path, 0, 0, reason))
            else:
                kept.append(name)
        dirs[:] = kept
        for name in files:
            if not prefix and name in (IGNORE_FILE, ADDED_FILE):  # kaas's own files in raw/
                continue
            found.append(_walked_file(Path(folder) / name, prefix + name, rules, raw_real))
    found.sort(key=lambda r: r.path)
    return found


def _walked_file(file: Path, rel: str, rules: SourceRules, raw_real: Path) -> RawFile:
    """One file of the walk, with its skip reason if it is not to be read."""
    path = f"raw/{rel}"
    decision = rules.decide(rel)
    if decision.reason and decision.reason not in INCLUDABLE_REASONS:
        return RawFile(path, file, 0, 0, decision.reason)
    try:
        if file.is_symlink():
            target = file.resolve(strict=True)
            if raw_real not in target.parents:
                return RawFile(path, file, 0, 0, "symlink pointing outside raw/")
        st = file.stat()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        loop = isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP
        return RawFile(path, file, 0, 0, "symlink loop: not followed" if loop else f"cannot read: {exc.strerror or exc}")
    if not _is_regular(st.st_mode):
        return RawFile(path, file, 0, 0, "not a regular file")
    # Code left out as a source is still checked like a source: a document may include it.
    return RawFile(path, file, st.st_size, st.st_mtime_ns, decision.reason, asked=decision.asked)


def _folder_link_reason(path: Path, raw_real: Path) -> str:
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return "symlinked folder: not followed (broken or looping link)"
    if target == raw_real or raw_real in target.parents:
        return "symlinked folder: not followed (it points inside raw/, whose files are compiled where they are)"
    return "symlinked folder pointing outside raw/: not followed"


def _is_regular(mode: int) -> bool:
    import stat

    return stat.S_ISREG(mode)


def checksum_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------------------------------------
# what a reader may know of the other files (includes, reST labels)


class Corpus:
    """The files of one walk of raw/, for ``ReadContext``: a reader may include only a file the
    walk listed as readable, or as code left out as a source (``literalinclude`` of an example;
    so never anything a symlink reaches outside raw/, nor a hidden file), at most
    ``MAX_INCLUDE_BYTES``, and never one added from outside (``compile/add.py``); reST labels are
    read from the walk's ``.rst`` files once, on first use. ``rules``: (called on first use) the
    access rule of each restricted source (``source_access.source_rules``); ``added``: the
    sources added from outside."""

    def __init__(self, raws: list[RawFile], rules: Callable[[], dict[str, tuple[str, ...]]] | None = None,
                 added: AddedSources | None = None) -> None:
        self.files = {r.path: r for r in raws if not r.skip_reason or r.skip_reason in INCLUDABLE_REASONS}
        self.sources = frozenset(r.path for r in raws if not r.skip_reason)  # what a link may lead to
        self._rules_of = rules
        self._rules: dict[str, tuple[str, ...]] | None = None
        self.added = added or AddedSources([])
        self._labels: dict[str, tuple[str, str]] | None = None

    def access_of(self, path: str) -> tuple[str, ...] | None:
        """The access rule of the text of ``path`` (None: public)."""
        if self._rules is None:
            self._rules = self._rules_of() if self._rules_of is not None else {}
        return self._rules.get(path)

    def context(self, path: str, checksum: str = "", *, restricted: bool = True) -> ReadContext:
        """What the source at ``path`` (these bytes) may read of the others; ``restricted``
        False: no restricted file (the text for pages more people read)."""
        via = self.added.via(path, checksum)
        outside = f"added from outside: {via}" if via else ""
        return ReadContext(path, self.read, self.sources, self.labels, access_of=self.access_of,
                           restricted=restricted, outside=outside)

    def read(self, path: str) -> str:
        """The text of ``path`` to include, or "!why not"."""
        data = self._bytes(path)
        if isinstance(data, str):
            return data
        via = self.added.via(path, checksum_bytes(data))
        if via:
            return f"!added from outside ({via}): never included"
        return self._decoded(data)

    def _bytes(self, path: str) -> bytes | str:
        raw = self.files.get(path)
        if raw is None:
            return "!not a readable file of raw/"
        try:
            return read_regular_bytes(raw.file, MAX_INCLUDE_BYTES)
        except FileTooLargeError:
            return f"!larger than {MAX_INCLUDE_BYTES:,} bytes"
        except (NotRegularFileError, OSError) as exc:
            return f"!{_one_line(exc) or type(exc).__name__}"

    @staticmethod
    def _decoded(data: bytes) -> str:
        try:
            return decode_text(data)[0]
        except UnreadableError as exc:
            return f"!{_one_line(exc) or type(exc).__name__}"

    def labels(self) -> dict[str, tuple[str, str]]:
        if self._labels is None:
            from kb_ai.compile.formats.myst import scan_myst_labels  # noqa: PLC0415
            from kb_ai.compile.formats.rst import scan_labels  # noqa: PLC0415

            found: dict[str, tuple[str, str]] = {}
            for path in sorted(self.files):
                scan = scan_labels if path.endswith((".rst", ".rest")) else \
                    scan_myst_labels if path.endswith(".md") else None  # MyST: (label)= lines
                if scan is not None:
                    data = self._bytes(path)
                    text = data if isinstance(data, str) else self._decoded(data)
                    if not text.startswith("!"):
                        for label, value in scan(path, text).items():
                            found.setdefault(label, value)
            self._labels = found
        return self._labels


# ---------------------------------------------------------------------------------------------
# reading one file


def read_source(raw: RawFile, corpus: Corpus | None = None) -> Source | SkippedSource:
    """Read and normalize one file; never raises for a bad file. ``corpus``: the other files of
    raw/ (what an include or a cross-reference may name)."""
    if raw.skip_reason:
        return SkippedSource(raw.path, raw.skip_reason, size=raw.size, mtime_ns=raw.mtime_ns)
    if raw.size > MAX_SOURCE_BYTES:
        return SkippedSource(raw.path, f"larger than {MAX_SOURCE_BYTES // 1_000_000} MB ({raw.size:,} bytes)",
                             size=raw.size, mtime_ns=raw.mtime_ns)
    try:
        # What is opened is checked, not what the walk saw: a file replaced since by a FIFO, a
        # folder or a huge file is skipped with its reason, never waited on or read whole.
        data = read_regular_bytes(raw.file, MAX_SOURCE_BYTES)
    except (NotRegularFileError, IsADirectoryError):
        return SkippedSource(raw.path, "not a regular file", size=raw.size, mtime_ns=raw.mtime_ns)
    except FileTooLargeError:
        return SkippedSource(raw.path, f"larger than {MAX_SOURCE_BYTES // 1_000_000} MB",
                             size=raw.size, mtime_ns=raw.mtime_ns)
    except OSError as exc:
        return SkippedSource(raw.path, f"cannot read: {exc.strerror or exc}", size=raw.size, mtime_ns=raw.mtime_ns)
    checksum = checksum_bytes(data)
    context = corpus.context(raw.path, checksum) if corpus else None
    source = _parsed_source(raw, data, checksum, context)
    if isinstance(source, Source) and context is not None and context.carried:
        _guard(source, raw, data, corpus, context.carried)
    return source


def _parsed_source(raw: RawFile, data: bytes, checksum: str, context: ReadContext | None,
                   *, need_words: bool = True) -> Source | SkippedSource:
    try:
        parsed = parse_document(raw.path, data, context=context, asked=raw.asked)
    except UnreadableError as exc:  # NotADocumentError too: its reason is a left-out reason
        return SkippedSource(raw.path, str(exc), checksum, raw.size, raw.mtime_ns)
    except Exception as exc:  # noqa: BLE001 - a reader bug on one file must not stop the compile
        return SkippedSource(raw.path, f"could not be read ({type(exc).__name__}: {_one_line(exc)})",
                             checksum, raw.size, raw.mtime_ns)
    text = parsed.text.strip()
    notes = list(parsed.notes)
    text, cut = cut_text(text, MAX_TEXT_BYTES)
    if cut:
        notes.append(f"text cut at {MAX_TEXT_BYTES:,} bytes (of {cut:,}): the rest would not fit in an article")
    if need_words and not _has_words(text):
        return SkippedSource(raw.path, "no text found" + (f" ({'; '.join(notes)})" if notes else ""),
                             checksum, raw.size, raw.mtime_ns)
    title = " ".join((parsed.title or "").split()) or title_from_filename(raw.path, text)
    date = parsed.date or date_from_filename(raw.path)
    return Source(raw.path, parsed.kind, checksum, raw.size, raw.mtime_ns, title[:200], date, text,
                  folder_topic(raw.path), notes, parsed.tags)


def _guard(source: Source, raw: RawFile, data: bytes, corpus: Corpus, carried: dict[str, tuple[str, ...]]) -> None:
    """``source`` included restricted files (``carried``: each one's rule). It carries their
    rule (``derived_access``: readers who may read every one of them), and ``guarded``: itself
    read again with them refused, for the pages more people read (title, text and notes
    without them)."""
    source.access = derived_access(list(carried.values()))
    shown = format_access(source.access) or "admins only"
    source.notes.append(f"includes restricted {', '.join(sorted(carried))}: only articles with access "
                        f"{shown} (or narrower) hold them; the others get the source without them")
    context = corpus.context(raw.path, source.checksum, restricted=False)
    guarded = _parsed_source(raw, data, source.checksum, context, need_words=False)
    if isinstance(guarded, SkippedSource):  # a reader failing only now: none of its text is shown
        guarded = Source(raw.path, source.kind, source.checksum, raw.size, raw.mtime_ns,
                         title_from_filename(raw.path, ""), source.date, "", source.topic_hint, [guarded.reason])
    source.guarded = guarded


def cut_text(text: str, limit: int) -> tuple[str, int]:
    """``text`` cut to at most ``limit`` UTF-8 bytes, at the last line break (or else the last
    space) in the second half of what fits, never inside a character. Returns (text, the
    original size in bytes if it was cut, else 0)."""
    if len(text) <= limit // 4:  # no character takes more than 4 bytes
        return text, 0
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text, 0
    kept = data[:limit].decode("utf-8", "ignore")
    for separator in ("\n", " "):
        at = kept.rfind(separator)
        if at >= len(kept) // 2:
            kept = kept[:at]
            break
    return kept.rstrip(), len(data)



# ---------------------------------------------------------------------------------------------
# the stage


@dataclass
class Ingested:
    """What ingest found: every file of raw/ (by path), the sources that need work this run, and
    the sources of the last run that are gone."""

    present: dict[str, RawFile]
    work: dict[str, SourceWork]
    deleted: list[str]


def ingest(run: CompileRun) -> Ingested:
    """Walk raw/ and read what is new or changed (a file whose size and mtime are as recorded is
    not read); skipped files are reported and recorded; sources keep their articles (``relink``)."""
    with stage_timer(run.report, "ingest") as stage:
        state = run.state
        raws = walk_raw(run.kb.root)
        fault_point("compile.ingest.after_scan")  # files found, none read yet
        counts = {"found": len(raws), "read": 0, "new": 0, "changed": 0, "unchanged": 0, "skipped": 0}
        # No state at all (a first compile, or .kaas/ deleted or damaged): a source that an article
        # names in its `sources:` feeds that article again instead of a duplicate of it.
        named = articles_naming_sources(run) if not state.sources and raws else {}
        work: dict[str, SourceWork] = {}
        added = read_added(run.kb.raw_dir)
        if added.damaged:
            run.report.warnings.append(f"raw/{ADDED_FILE} is damaged ({added.damaged}): every source is read "
                                       "as added from outside (no includes) until it is repaired or removed")
        corpus = Corpus(raws, lambda: source_rules(run), added)
        run.progress.start("ingest", len(raws))
        for raw in raws:
            record = state.sources.get(raw.path)
            if record is None and raw.path in named:
                record = SourceRecord(raw.path, FAILED, articles=named[raw.path])  # no checksum: "changed"
            run.progress.advance(raw.path)
            item = _ingest_one(run, raw, record, counts, corpus)
            if item is not None:
                work[raw.path] = item
        present = {r.path: r for r in raws}
        gone = sorted(p for p in state.sources if p not in present)
        retired = _left_out(run, counts)
        deleted = sorted(gone + retired)
        relink(run, work, deleted)
        run.progress.done()
        stage.counts = counts
    run.report.sources = {
        "total": len(raws), "new": counts["new"], "changed": counts["changed"],
        "unchanged": counts["unchanged"], "deleted": len(gone), "skipped": counts["skipped"],
        "left_out": counts["left_out"], "duplicates": 0, "revisions": 0,
    }
    return Ingested(present, work, deleted)


def _left_out(run: CompileRun, counts: dict[str, int]) -> list[str]:
    """The skipped files that are not documents (``registry.is_left_out``) move from the
    report's per-file ``skipped`` to ``left_out``, one entry per reason. Returns those of them
    that fed articles (compiled before the rules left them out): they leave their articles as a
    deleted source does (``sources:`` edited, an article with no source left flagged orphaned,
    never deleted), and get them back if a rule brings them back (``relink``)."""
    report, state = run.report, run.state
    left = [(s["path"], s["reason"]) for s in report.skipped if is_left_out(s["reason"])]
    report.skipped = [s for s in report.skipped if not is_left_out(s["reason"])]
    report.left_out = group_left_out(left)
    counts["left_out"] = len(left)
    counts["skipped"] -= len(left)
    retired = sorted(p for p, _ in left if state.sources.get(p) is not None and state.sources[p].articles)
    for path in retired:
        reason = dict(left)[path]
        report.notes.append(f"{path} is left out now ({reason}): it leaves the sources of its articles, as a deleted "
                            "source does (an article with no source left is flagged orphaned, not deleted)")
    return retired


def _ingest_one(run: CompileRun, raw: RawFile, record: SourceRecord | None,
                counts: dict[str, int], corpus: Corpus | None = None) -> SourceWork | None:
    """One file of raw/: the work it needs this run, or None (unchanged or skipped)."""
    fast = (not run.full and record is not None and record.status in FINAL_STATUSES
            and record.size == raw.size and record.mtime_ns == raw.mtime_ns and not raw.skip_reason)
    if fast:
        counts["unchanged"] += 1
        if record.status == SKIPPED:
            counts["skipped"] += 1
            run.report.skipped.append({"path": raw.path, "reason": record.reason or ""})
        return None
    result = read_source(raw, corpus)
    counts["read"] += not raw.skip_reason  # a file the walk gave a reason is never opened
    if isinstance(result, SkippedSource):
        counts["skipped"] += 1
        _record_skipped(run, raw, result, record)
        return None
    if (record is not None and record.checksum == result.checksum and record.status in FINAL_STATUSES
            and record.status != SKIPPED and not run.full):
        counts["unchanged"] += 1
        if (record.size, record.mtime_ns) != (result.size, result.mtime_ns):
            record.size, record.mtime_ns = result.size, result.mtime_ns
            run.state.record_source(record)
        return None
    change = _change(record, result, run.full)
    counts["new" if change == "new" else "changed" if change == "changed" else "unchanged"] += 1
    return SourceWork(result, change, record)


def _change(record: SourceRecord | None, source: Source, full: bool) -> str:
    if record is None or record.status == SKIPPED:
        return "new"  # (a skipped file that now reads, e.g. after a fix, counts as new)
    if record.checksum != source.checksum:
        return "changed"
    return "full" if full else "pending"


def _record_skipped(run: CompileRun, raw: RawFile, result: SkippedSource, record: SourceRecord | None) -> None:
    """The file is still there: unreadable for now (saved as UTF-16, emptied while an editor
    rewrites it), not deleted. It keeps its articles (their text is its last readable version),
    so when it reads again it updates them, never a copy of them."""
    run.report.skipped.append({"path": raw.path, "reason": result.reason})
    new_record = SourceRecord(raw.path, SKIPPED, result.checksum, result.size, result.mtime_ns,
                              reason=result.reason, articles=list(record.articles) if record else [])
    if record is None or record.to_json() != new_record.to_json():
        run.state.record_source(new_record)
        run.state.set_fingerprint(raw.path, None)
