"""Compile state on disk: the coverage manifest, a write-ahead journal, dedup fingerprints.

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
  edit can be told apart line by line from what kaas wrote (``write.hand_written_lines``).
  Without it every line of a hand-edited article counts as hand-written.

Everything here is safe to delete: kaas then treats existing articles as hand-written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb_ai.compile.dedup import Fingerprint
from kb_ai.store.files import atomic_write_text

log = logging.getLogger(__name__)

STATE_FORMAT = 1
MANIFEST = "manifest.json"
JOURNAL = "journal.jsonl"
FINGERPRINTS = "fingerprints.json"
WRITTEN = "written"  # .kaas/written/<sha256[:2]>/<sha256>: the exact text kaas last wrote, per article

# Source statuses. "compiled", "duplicate" and "skipped" are final for an unchanged file.
COMPILED = "compiled"
DUPLICATE = "duplicate"
SKIPPED = "skipped"
PLANNED = "planned"  # plan done, some article writes pending
FAILED = "failed"
FINAL_STATUSES = {COMPILED, DUPLICATE, SKIPPED}


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class PlanTarget:
    """One article a source feeds, as decided by the plan (validated: ``path`` is a safe slug path)."""

    path: str
    title: str
    summary: str
    topic: str
    new: bool
    reason: str = ""
    # For a new article: the access rule it is created with (None: public). Set when the plan
    # prompt showed restricted articles (see ``plan.plan_view``), so the page written from that
    # prompt is readable only by those who could read everything the prompt showed.
    access: list[str] | None = None


@dataclass
class SourceRecord:
    path: str
    status: str
    checksum: str | None = None
    size: int = 0
    mtime_ns: int = 0
    kind: str | None = None
    title: str | None = None
    date: str | None = None
    reason: str | None = None
    duplicate_of: str | None = None
    duplicate_kind: str | None = None
    revision_of: str | None = None
    similarity: float | None = None
    articles: list[str] = field(default_factory=list)
    plan: list[PlanTarget] | None = None
    plan_prompt: str | None = None
    notes: list[str] = field(default_factory=list)
    boilerplate_removed: int = 0

    def to_json(self) -> dict[str, Any]:
        # Hand-rolled rather than asdict(): this runs for every journal entry (asdict deep-copies).
        data: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name == "plan" and value is not None:
                value = [{k: v for k, v in t.__dict__.items() if k != "access" or v is not None} for t in value]
            elif isinstance(value, list):
                value = list(value)
            if value not in (None, [], 0) or name in ("path", "status"):
                data[name] = value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "SourceRecord":
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        if values.get("plan") is not None:
            values["plan"] = [PlanTarget(**t) for t in values["plan"]]
        return cls(**values)


@dataclass
class ArticleRecord:
    path: str
    written_hash: str | None = None
    merged: dict[str, str] = field(default_factory=dict)  # source path -> checksum merged in
    hand_edited: bool = False
    orphaned: bool = False
    # Short hashes of the lines a person wrote (``hand_line_keys``), carried from run to run so
    # that text merged once is still protected from the next model edit.
    hand_lines: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = {"path": self.path, "written_hash": self.written_hash, "merged": dict(self.merged),
                "hand_edited": self.hand_edited, "orphaned": self.orphaned}
        if self.hand_lines:
            data["hand_lines"] = list(self.hand_lines)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ArticleRecord":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


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

    # -- loading ----------------------------------------------------------------------------

    @classmethod
    def load(cls, state_dir: Path, wiki_dir: Path, *, read_only: bool = False) -> "CompileState":
        state = cls(state_dir, read_only=read_only)
        manifest = state.dir / MANIFEST
        if manifest.is_file():
            try:
                data = json.loads(manifest.read_text(encoding="utf-8"))
                if data.get("format") != STATE_FORMAT:
                    raise ValueError(f"format {data.get('format')!r}")
                state.sources = {p: SourceRecord.from_json(r) for p, r in data.get("sources", {}).items()}
                state.articles = {p: ArticleRecord.from_json(r) for p, r in data.get("articles", {}).items()}
                state.prompts = dict(data.get("prompts") or {})
                state.rejections = dict(data.get("rejections") or {})
                state.meta = {k: data.get(k) for k in ("mode", "model", "compiled_at")}
            except (OSError, ValueError, TypeError, KeyError, RecursionError) as exc:
                state.warnings.append(f".kaas/{MANIFEST} unreadable ({exc}); starting from an empty state")
                state.sources, state.articles = {}, {}
        state._replay_journal(wiki_dir)
        return state

    def _replay_journal(self, wiki_dir: Path) -> None:
        journal = self.dir / JOURNAL
        if not journal.is_file():
            return
        touched: dict[str, dict | None] = {}  # article path -> the record before the journal's last entry
        with open(journal, encoding="utf-8") as handle:
            for line in handle:
                try:
                    entry = json.loads(line)
                except (ValueError, RecursionError):
                    continue  # torn last line of a killed run (or a line nested past the stack)
                op = entry.get("op")
                if op == "source":
                    record = SourceRecord.from_json(entry["record"])
                    self.sources[record.path] = record
                elif op == "drop_source":
                    self.sources.pop(entry["path"], None)
                elif op == "article":
                    record = ArticleRecord.from_json(entry["record"])
                    touched[record.path] = entry.get("prev")
                    self.articles[record.path] = record
                elif op == "drop_article":
                    self.articles.pop(entry["path"], None)
                elif op == "rejection":
                    if entry.get("reason"):
                        self.rejections[entry["path"]] = entry["reason"]
                    else:
                        self.rejections.pop(entry["path"], None)
                elif op == "prompts":
                    self.prompts.update(entry.get("prompts") or {})
                self.resumed_units += 1
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
            elif prev_record is None and current is None:
                del self.articles[path]
            # else: edited by hand after the entry; the hand-edit check will see the mismatch.

    # -- recording units of work ------------------------------------------------------------

    def _append(self, entry: dict[str, Any]) -> None:
        if self.read_only:
            return
        self.dirty = True
        if self._journal is None:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._journal = open(self.dir / JOURNAL, "a", encoding="utf-8")
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
        file = self._written_file(text_hash(text))
        if not file.is_file():
            # No fsync: a kept text is checked against its hash when read, and a lost one only
            # makes kaas count more lines as hand-written.
            atomic_write_text(file, text, durable=False)

    def written_text(self, digest: str | None) -> str | None:
        """The text kaas wrote with this hash, or None when it is not (or no longer) kept."""
        if not digest or not re.fullmatch(r"[0-9a-f]{64}", digest):
            return None
        try:
            text = self._written_file(digest).read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        return text if text_hash(text) == digest else None

    def _drop_unused_written(self) -> None:
        folder = self.dir / WRITTEN
        if not folder.is_dir():
            return
        used = {r.written_hash for r in self.articles.values() if r.written_hash}
        for file in folder.glob("*/*"):
            if file.name not in used:
                try:
                    file.unlink()
                except OSError:
                    pass

    # -- fingerprints -----------------------------------------------------------------------

    def fingerprints(self) -> dict[str, Fingerprint]:
        if self._fingerprints is None:
            self._fingerprints = {}
            file = self.dir / FINGERPRINTS
            if file.is_file():
                try:
                    data = json.loads(file.read_text(encoding="utf-8"))
                    self._fingerprints = {p: Fingerprint.from_json(v) for p, v in data.items()}
                except (OSError, ValueError, TypeError, KeyError, RecursionError) as exc:
                    self.warnings.append(f".kaas/{FINGERPRINTS} unreadable ({exc}); dedup state rebuilt")
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
        atomic_write_text(self.dir / FINGERPRINTS, json.dumps(data, separators=(",", ":")))
        self._fingerprints_dirty = False

    # -- saving -----------------------------------------------------------------------------

    def save(self, meta: dict[str, Any]) -> None:
        """Write the manifest atomically, then empty the journal it now contains."""
        if self.read_only:
            return
        self.save_fingerprints()
        if not self.dirty and self.resumed_units == 0 and (self.dir / MANIFEST).is_file():
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
        atomic_write_text(self.dir / MANIFEST, json.dumps(data, ensure_ascii=False, indent=1))
        self._drop_unused_written()
        self.close()
        try:
            os.unlink(self.dir / JOURNAL)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None


def file_hash(file: Path) -> str | None:
    """sha256 of a file's bytes (what ``text_hash`` gives for the text kaas wrote), None if missing."""
    try:
        return hashlib.sha256(file.read_bytes()).hexdigest()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
