"""Compile state on disk: the coverage manifest, a write-ahead journal, dedup fingerprints
(the records they hold: ``records.py``).

* ``.kaas/manifest.json``: every source (checksum, status, why skipped, what it duplicates, its
  plan, the articles it fed) and every article kaas wrote (the sha256 of the exact text it last
  wrote, so a hand edit is detected; which source versions it has merged). Written atomically
  at the end of a run.
* ``.kaas/journal.jsonl``: one line per finished unit of work (a source planned, an article
  written), appended and flushed as it happens, so a killed compile loses at most the unit in
  flight. Loading replays it over the manifest; a torn last line is ignored. An article entry is
  appended *before* the file is replaced and carries the previous record: if the process died
  in between, the file still has the previous text and the entry is rolled back.
* ``.kaas/fingerprints.json``: MinHash and paragraph hashes per source, for dedup.
* ``.kaas/written/``: the exact text kaas last wrote for each article, by its sha256, so a hand
  edit can be told apart line by line from what kaas wrote (``hand_text.HandText``).
  Without it every line of a hand-edited article counts as hand-written.

Everything here is safe to delete: kaas then treats existing articles as hand-written. A state
file that is damaged or is not a file at all (a folder, a FIFO, a link to a device or to a huge
file, bytes that are not UTF-8 JSON) counts as missing: the run says so in one warning line naming
it, redoes the work and writes the file afresh (``kb_ai.files`` reads and writes it).
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from kb_ai.compile.dedup import Fingerprint
from kb_ai.faults import fault_point
from kb_ai.compile.records import MAX_WRITTEN_BYTES, ArticleRecord, SourceRecord, file_hash, text_hash
from kb_ai.files import (
    DamagedFileError,
    read_regular_bytes,
    read_state_bytes,
    read_state_json,
    remove_state_entry,
    open_state_file,
    write_state_bytes,
)

log = logging.getLogger(__name__)

STATE_FORMAT = 1
MANIFEST = "manifest.json"
JOURNAL = "journal.jsonl"
FINGERPRINTS = "fingerprints.json"
WRITTEN = "written"  # .kaas/written/<sha256[:2]>/<sha256>: the exact text kaas last wrote, per article
MAX_STATE_BYTES = 1 << 30  # manifest, journal, fingerprints: far past any real knowledge base


class CompileState:
    """The manifest in memory plus the journal that makes each unit of work durable."""

    def __init__(self, state_dir: Path, *, read_only: bool = False):
        self.dir = Path(state_dir)
        self.read_only = read_only
        self.sources: dict[str, SourceRecord] = {}
        self.articles: dict[str, ArticleRecord] = {}
        self.prompts: dict[str, str] = {}
        self.rejections: dict[str, str] = {}  # article path -> why the model's last output was refused
        self.meta: dict[str, Any] = {}
        self.warnings: list[str] = []
        self.resumed_units = 0
        self._journal = None
        self.dirty = False  # anything recorded this run (else the manifest need not be rewritten)
        self._fingerprints: dict[str, Fingerprint] | None = None
        self._fingerprints_dirty = False
        self._manifest_damaged = False  # rewrite it even on a run with nothing to do

    def _warn(self, warning: str) -> None:
        if warning not in self.warnings:
            self.warnings.append(warning)

    # -- loading ----------------------------------------------------------------------------

    @classmethod
    def load(cls, state_dir: Path, wiki_dir: Path, *, read_only: bool = False) -> "CompileState":
        state = cls(state_dir, read_only=read_only)
        try:
            data = read_state_json(state.dir / MANIFEST, MAX_STATE_BYTES)
            if data is not None:
                if not isinstance(data, dict):
                    raise DamagedFileError(f"not a manifest: a JSON {type(data).__name__}")
                if data.get("format") != STATE_FORMAT:
                    raise DamagedFileError(f"format {data.get('format')!r}")
                state.sources = _records(data.get("sources"), SourceRecord)
                state.articles = _records(data.get("articles"), ArticleRecord)
                state.prompts = _strings(data.get("prompts"))
                state.rejections = _strings(data.get("rejections"))
                state.meta = {k: data.get(k) for k in ("mode", "model", "compiled_at")}
        except (DamagedFileError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            state._warn(f".kaas/{MANIFEST} is damaged ({_one_line(exc)}); starting from an empty state")
            state.sources, state.articles, state.prompts, state.rejections = {}, {}, {}, {}
            state._manifest_damaged = True
        state._replay_journal(wiki_dir)
        return state

    def _replay_journal(self, wiki_dir: Path) -> None:
        try:
            data = read_state_bytes(self.dir / JOURNAL, MAX_STATE_BYTES)
        except DamagedFileError as exc:
            self._warn(f".kaas/{JOURNAL} is damaged ({exc}); the interrupted run's work, if any, is redone")
            return
        if not data:
            return
        touched: dict[str, dict | None] = {}  # article path -> the record before the journal's last entry
        lines = data.split(b"\n")
        if lines[-1]:
            lines.pop()  # torn last line of a killed run: ignored quietly
        bad = 0
        for line in lines:
            if not line.strip():
                continue
            try:
                self._replay_entry(json.loads(line.decode("utf-8")), touched)
            except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
                bad += 1  # garbage, or a line nested past the stack: that unit is redone
                continue
            self.resumed_units += 1
        if bad:
            self._warn(f".kaas/{JOURNAL} is damaged ({bad} unreadable line{'s' if bad > 1 else ''} ignored); "
                       "their work is redone")
        self._check_touched(wiki_dir, touched)

    def _replay_entry(self, entry: dict[str, Any], touched: dict[str, dict | None]) -> None:
        op = entry.get("op")
        if op == "source":
            record = SourceRecord.from_json(entry["record"])
            self.sources[record.path] = record
        elif op == "drop_source":
            self.sources.pop(_string(entry["path"]), None)
        elif op == "article":
            record = ArticleRecord.from_json(entry["record"])
            prev = entry.get("prev")
            if prev is not None:
                ArticleRecord.from_json(prev)  # checked here, used below
            touched[record.path] = prev
            self.articles[record.path] = record
        elif op == "drop_article":
            self.articles.pop(_string(entry["path"]), None)
        elif op == "rejection":
            path = _string(entry["path"])
            if entry.get("reason"):
                self.rejections[path] = _string(entry["reason"])
            else:
                self.rejections.pop(path, None)
        elif op == "prompts":
            self.prompts.update(_strings(entry.get("prompts")))
        else:
            raise ValueError(f"unknown journal entry {op!r}")

    def _check_touched(self, wiki_dir: Path, touched: dict[str, dict | None]) -> None:
        # An article entry is journaled before its file is replaced: check the file got there.
        for path, prev in touched.items():
            record = self.articles.get(path)
            if record is None:
                continue
            current = file_hash(wiki_dir / path)
            if current == record.written_hash:
                continue
            prev_record = ArticleRecord.from_json(prev) if prev else None
            prev_hash = prev_record.written_hash if prev_record else None
            if prev_record is not None and current == prev_hash:
                self.articles[path] = prev_record
            elif current is None or not self._landed(wiki_dir / path, record, prev_record):
                # The file never got the journaled text (and was edited by hand, or deleted,
                # since): what it merged is what the previous record says, so the new source
                # versions are merged again rather than counted as merged.
                if prev_record is None:
                    del self.articles[path]
                else:
                    self.articles[path] = prev_record
            # else: the text got there and was edited by hand after; the hand-edit check sees it.

    def _landed(self, file: Path, record: "ArticleRecord", prev: "ArticleRecord | None") -> bool:
        """Whether ``file`` (which matches neither hash) holds the journaled text, edited after:
        every line that text added to the previous one is still there. Unknown (a kept text
        lost): no, so the work is redone rather than lost."""
        new = self.written_text(record.written_hash, quiet=True)
        old = self.written_text(prev.written_hash, quiet=True) if prev is not None else ""
        if new is None or old is None:
            return False
        try:
            now = read_regular_bytes(file, MAX_WRITTEN_BYTES).decode("utf-8", "replace")
        except OSError:
            return False
        now_lines = {line.strip() for line in now.splitlines()}
        old_lines = {line.strip() for line in old.splitlines()}
        added = {line.strip() for line in new.splitlines() if line.strip()} - old_lines
        return added <= now_lines

    # -- recording units of work ------------------------------------------------------------

    def _append(self, entry: dict[str, Any]) -> None:
        if self.read_only:
            return
        self.dirty = True
        if self._journal is None:
            # Never through a link, never waiting on a FIFO: anything but a file is replaced.
            fd, _replaced = open_state_file(self.dir / JOURNAL, append=True)  # damage was reported on load
            size = os.fstat(fd).st_size
            self._journal = os.fdopen(fd, "a", encoding="utf-8")
            if size and os.pread(fd, 1, size - 1) != b"\n":
                self._journal.write("\n")  # end a killed run's torn line: the next entry starts its own
        fault_point("compile.journal.before_line")
        # One write() per entry; flushed so a killed process (not a lost machine) keeps it.
        self._journal.write(json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n")
        self._journal.flush()

    def record_source(self, record: SourceRecord) -> None:
        self.sources[record.path] = record
        self._append({"op": "source", "record": record.to_json()})

    def drop_source(self, path: str) -> None:
        self.sources.pop(path, None)
        self._append({"op": "drop_source", "path": path})

    def record_article(self, record: ArticleRecord) -> None:
        """Journal an article's new record *before* its file is replaced (see module doc)."""
        prev = self.articles.get(record.path)
        self.articles[record.path] = record
        self._append({"op": "article", "record": record.to_json(), "prev": prev.to_json() if prev else None})

    def drop_article(self, path: str) -> None:
        self.articles.pop(path, None)
        self._append({"op": "drop_article", "path": path})

    def set_rejection(self, path: str, reason: str | None) -> None:
        """Remember (or forget) why the model's output for an article was refused: the next
        attempt tells the model, which also keeps the response cache from replaying it."""
        if self.rejections.get(path) == reason:
            return
        if reason:
            self.rejections[path] = reason
        else:
            self.rejections.pop(path, None)
        self._append({"op": "rejection", "path": path, "reason": reason})

    def set_prompts(self, versions: dict[str, str]) -> None:
        self.prompts.update(versions)
        self._append({"op": "prompts", "prompts": versions})

    # -- the text kaas last wrote, per article ----------------------------------------------

    def _written_file(self, digest: str) -> Path:
        return self.dir / WRITTEN / digest[:2] / digest

    def keep_written(self, text: str) -> None:
        """Store ``text`` (about to be written to an article) under its hash. Called before the
        article's record is journaled, so a record never names a text that was not kept."""
        if self.read_only:
            return
        digest = text_hash(text)
        if self.written_text(digest, quiet=True) is None:
            # No fsync: a kept text is checked against its hash when read, and a lost one only
            # makes kaas count more lines as hand-written. Whatever was in its place is replaced.
            write_state_bytes(self._written_file(digest), text.encode("utf-8"), durable=False)

    def written_text(self, digest: str | None, *, quiet: bool = False) -> str | None:
        """The text kaas wrote with this hash, or None when it is not (or no longer) kept. A kept
        text that is damaged (not a file, not that text) is a warning, unless ``quiet``."""
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            return None
        try:
            data = read_state_bytes(self._written_file(digest), MAX_WRITTEN_BYTES)
            if data is None:
                return None
            text = data.decode("utf-8")
            if text_hash(text) != digest:
                raise DamagedFileError("not the text it is named after")
        except (DamagedFileError, UnicodeDecodeError) as exc:
            if not quiet:
                self._warn(f".kaas/{WRITTEN}/{digest[:2]}/{digest} is damaged ({_one_line(exc)}); "
                           "the lines of its article count as hand-written")
            return None
        return text

    def _drop_unused_written(self) -> None:
        """Remove kept texts no record names. Only what kaas puts there is touched: a folder of
        .kaas/written/ that is a link is removed as a link, never followed."""
        folder = self.dir / WRITTEN
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            remove_state_entry(folder)
            return
        if not folder.is_dir():
            return
        used = {r.written_hash for r in self.articles.values() if r.written_hash}
        for fan in os.scandir(folder):
            if not fan.is_dir(follow_symlinks=False):
                remove_state_entry(Path(fan.path))
                continue
            for entry in os.scandir(fan.path):
                if entry.name not in used or not entry.is_file(follow_symlinks=False):
                    try:
                        remove_state_entry(Path(entry.path))
                    except OSError:
                        pass

    # -- fingerprints -----------------------------------------------------------------------

    def fingerprints(self) -> dict[str, Fingerprint]:
        if self._fingerprints is None:
            self._fingerprints = {}
            try:
                data = read_state_json(self.dir / FINGERPRINTS, MAX_STATE_BYTES)
                if data is not None:
                    self._fingerprints = {_string(p): Fingerprint.from_json(v) for p, v in data.items()}
            except (DamagedFileError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
                self._warn(f".kaas/{FINGERPRINTS} is damaged ({_one_line(exc)}); dedup state rebuilt")
                self._fingerprints = {}
                self._fingerprints_dirty = True  # written afresh at the end of the run
        return self._fingerprints

    def set_fingerprint(self, path: str, fp: Fingerprint | None) -> None:
        fps = self.fingerprints()
        if fp is None:
            if path in fps:
                del fps[path]
                self._fingerprints_dirty = True
        elif fps.get(path) != fp:
            fps[path] = fp
            self._fingerprints_dirty = True

    def save_fingerprints(self) -> None:
        if self.read_only or not self._fingerprints_dirty or self._fingerprints is None:
            return
        data = {p: self._fingerprints[p].to_json() for p in sorted(self._fingerprints)}
        write_state_bytes(self.dir / FINGERPRINTS, json.dumps(data, separators=(",", ":")).encode("utf-8"))
        self._fingerprints_dirty = False

    # -- saving -----------------------------------------------------------------------------

    def save(self, meta: dict[str, Any]) -> None:
        """Write the manifest atomically, then empty the journal it now contains."""
        if self.read_only:
            return
        self.save_fingerprints()
        if (not self.dirty and self.resumed_units == 0 and not self._manifest_damaged
                and (self.dir / MANIFEST).is_file()):
            self.close()  # a no-op run: the manifest on disk is already exact (10,000 sources: ~3 s saved)
            return
        self.meta.update(meta)
        data = {
            "format": STATE_FORMAT,
            **self.meta,
            "prompts": dict(sorted(self.prompts.items())),
            "rejections": dict(sorted(self.rejections.items())),
            "sources": {p: self.sources[p].to_json() for p in sorted(self.sources)},
            "articles": {p: self.articles[p].to_json() for p in sorted(self.articles)},
        }
        write_state_bytes(self.dir / MANIFEST, json.dumps(data, ensure_ascii=False, indent=1).encode("utf-8"))
        self._drop_unused_written()
        self.close()
        remove_state_entry(self.dir / JOURNAL)

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None



def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, not {type(value).__name__}")
    return value


def _strings(value: Any) -> dict[str, str]:
    """A {str: str} table of the manifest or journal (missing: empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"expected a table, not {type(value).__name__}")
    return {_string(k): _string(v) for k, v in value.items()}


def _records(value: Any, kind: type) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError(f"expected a table, not {type(value).__name__}")
    records = {}
    for path, data in value.items():
        record = kind.from_json(data)
        if record.path != path:
            raise ValueError(f"record {path!r} names {record.path!r}")
        records[path] = record
    return records
