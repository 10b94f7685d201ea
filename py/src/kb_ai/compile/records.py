"""The records of the compile state: one per source, one per article, and the plan targets.

What ``.kaas/manifest.json`` and ``.kaas/journal.jsonl`` hold (``state.CompileState`` reads and
writes them), each checked field by field when read back, since a damaged file may hold anything.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kb_ai.errors import UnsafePathError
from kb_ai.store.catalog import CatalogEntry
from kb_ai.files import FileTooLargeError, NotRegularFileError, read_regular_bytes
from kb_ai.store.paths import normalize_wiki_path

MAX_WRITTEN_BYTES = 64 << 20  # a kept text: an article's size limit, with room


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

    @classmethod
    def update_of(cls, entry: CatalogEntry, reason: str = "") -> "PlanTarget":
        """The plan to update an existing article, as the catalog lists it."""
        return cls(entry.path, entry.title, entry.summary, entry.topic, new=False, reason=reason)

    def entry(self) -> CatalogEntry:
        """The article as the catalog will list it (with the access it is created with)."""
        access = tuple(self.access) if self.access is not None else None
        return CatalogEntry(self.path, self.title, self.summary, self.topic, access)


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
    unlinked: list[str] = field(default_factory=list)  # its links to nothing compiled (kept as text)

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
        values = _fields(cls, data)
        if not values["path"].startswith("raw/") or ".." in values["path"].split("/"):
            raise ValueError(f"not a source path: {values['path']!r}")
        if values.get("status") not in (COMPILED, DUPLICATE, SKIPPED, PLANNED, FAILED):
            raise ValueError(f"unknown source status {values.get('status')!r}")
        for path in values.get("articles") or []:
            _article_path(path)
        if values.get("plan") is not None:
            values["plan"] = [PlanTarget(**_fields(PlanTarget, t)) for t in values["plan"]]
            for target in values["plan"]:
                _article_path(target.path)
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
    # Sources it was made from that left raw/ (deleted, or moved out): path -> last checksum, so
    # that the document coming back (there or elsewhere) gets this article again (``relink``).
    former: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = {"path": self.path, "written_hash": self.written_hash, "merged": dict(self.merged),
                "hand_edited": self.hand_edited, "orphaned": self.orphaned}
        if self.hand_lines:
            data["hand_lines"] = list(self.hand_lines)
        if self.former:
            data["former"] = dict(self.former)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ArticleRecord":
        values = _fields(cls, data)
        _article_path(values["path"])
        for path in [*(values.get("merged") or {}), *(values.get("former") or {})]:
            if not path.startswith("raw/"):
                raise ValueError(f"not a source path: {path!r}")
        return cls(**values)


# -- checking what the manifest and journal say (a damaged file may hold anything) ---------------

_TYPES = {"str": str, "int": int, "float": (int, float), "bool": bool}


def _fields(cls: type, data: Any) -> dict[str, Any]:
    """The known fields of ``data`` for dataclass ``cls``, each checked against its annotation
    (``str``, ``int``, ``float``, ``bool``, ``list[str]``, ``dict[str, str]``, ``| None``; a
    ``list[PlanTarget]`` is checked as a list of tables). Raises TypeError / ValueError."""
    if not isinstance(data, dict):
        raise TypeError(f"a {cls.__name__} must be a table, not {type(data).__name__}")
    values = {}
    for name, spec in cls.__dataclass_fields__.items():
        if name not in data:
            continue
        value = data[name]
        hint = str(spec.type).replace(" ", "")
        if hint.endswith("|None"):
            if value is None:
                values[name] = value
                continue
            hint = hint[: -len("|None")]
        if hint in _TYPES:
            ok = isinstance(value, _TYPES[hint]) and (hint == "bool" or not isinstance(value, bool))
        elif hint == "list[str]":
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        elif hint == "dict[str,str]":
            ok = isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
        elif hint.startswith("list["):
            ok = isinstance(value, list) and all(isinstance(v, dict) for v in value)
        else:
            raise AssertionError(f"no check for {cls.__name__}.{name}: {hint}")
        if not ok:
            raise TypeError(f"{cls.__name__}.{name} is a {type(value).__name__}")
        values[name] = value
    if not isinstance(values.get("path"), str):
        raise KeyError("path")
    return values


def _article_path(path: str) -> None:
    try:
        ok = normalize_wiki_path(path) == path
    except UnsafePathError:
        ok = False
    if not ok:
        raise ValueError(f"not an article path: {path!r}")



def file_hash(file: Path) -> str | None:
    """sha256 of an article file's bytes (what ``text_hash`` gives for the text kaas wrote), None
    if it is missing or is not a file kaas could have written (a folder, a FIFO, a huge file)."""
    try:
        return hashlib.sha256(read_regular_bytes(file, MAX_WRITTEN_BYTES)).hexdigest()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, NotRegularFileError, FileTooLargeError):
        return None

