"""``kaas add``: put a document into ``raw/`` (a file given by path, or uploaded bytes).

One home for the rules every way of adding a source follows (the CLI, the server's upload route,
and a fetched web page, ``compile/fetch.py``):

- **Names.** A source is stored as ``raw/[FOLDER/]NAME``. NAME is the file's own name, cleaned:
  only its last component (``../../x.md`` is ``x.md``; a ``\\`` counts as a separator too),
  control characters and surrounding blanks removed, at most ``MAX_NAME_BYTES`` bytes; a name
  that is empty, hidden (``.x``), or only dots is refused. FOLDER (``kaas add --to``) is a
  relative path of such names. Nothing is ever written outside ``raw/`` or through a symbolic
  link below it (``files.write_below``).
- **Formats.** Only what ``kaas compile`` reads, judged by the rules compile judges raw/ by
  (``formats/registry.py``: type and content; ``raw/.kaasignore``: a user's rules, matched
  against the path the file gets in raw/): a file that is not a document (an image, code, a
  build file, an SVG named ``.txt``) or in a format kaas cannot read is refused with the reason,
  not copied to be skipped later. A folder (``add_folder``) is copied file by file by the same
  rules; what it holds that is not a document is left out and reported by reason.
- **Collisions.** The same bytes under the same name: nothing to do ("unchanged"). Different
  bytes under a name that is taken: stored as ``NAME-2.ext`` (``-3``, ...), never overwriting a
  source, unless ``replace`` is asked for, which makes the new file a revision of the old one
  (the next compile updates its articles). A web page always replaces its own earlier fetch.
- **Text from outside includes nothing.** A source uploaded through the server or fetched from
  the web is recorded in ``raw/.kaas-added.json`` (``ADDED_FILE``: its path and the sha256 of its
  bytes, and how it came). ``kaas compile`` resolves no include line (pymdownx snippets, reST
  ``include``/``literalinclude``) in a source recorded there, by path or by checksum, so the mark
  follows the bytes when the file is renamed or moved, whatever its extension; nor does any
  other source include it. ``kaas add FILE`` on the command line copies the owner's own file and
  records nothing: it is as if the owner had put it in raw/.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from kb_ai.compile.formats.registry import ARCHIVE_EXT, READABLE, reader_for
from kb_ai.compile.kaasignore import IGNORE_FILE, SourceRules, group_left_out
from kb_ai.compile.readers import sniff_document
from kb_ai.errors import KaasError
from kb_ai.files import (DamagedFileError, FileTooLargeError, LinkInPathError, NotRegularFileError, link_below,
                         read_named_file, read_regular_bytes, read_state_json, write_below)

MAX_NAME_BYTES = 160
MAX_ADD_BYTES = 50_000_000  # the largest source compile reads (ingest.MAX_SOURCE_BYTES)
ADDED_FILE = ".kaas-added.json"  # in raw/: the sources added from outside (never compiled itself)
MAX_ADDED_FILE_BYTES = 50_000_000
UPLOAD, WEB = "upload", "web"  # how a source came from outside
_storing = threading.Lock()
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


class AddError(KaasError):
    """A source that cannot be added (bad name, unsupported format, too large): one line."""

    code = "bad_source"
    exit_code = 2


class NotADocument(AddError):
    """A file the rules leave out (``reason``: a ``registry.LEFT_OUT_REASONS`` reason)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class Added:
    """One source handled: where it is (``raw/...``) and what happened (``added``, ``updated``,
    ``unchanged``), plus, for a web page, its title and URL."""

    path: str
    status: str
    size: int
    title: str | None = None
    url: str | None = None
    note: str | None = None

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def clean_name(name: str) -> str:
    """A file name from outside (a path, an upload's name, a page title) as one safe component,
    or ``AddError``."""
    last = re.split(r"[/\\]", str(name))[-1]
    cleaned = " ".join(_CONTROL.sub("", last).split())
    if not cleaned or cleaned.strip(".") == "" or cleaned.startswith("."):
        raise AddError(f"not a usable file name: {name[:80]!r}")
    while len(cleaned.encode("utf-8")) > MAX_NAME_BYTES:  # keep the suffix, cut the stem
        stem, suffix = _split_suffix(cleaned)
        cleaned = stem[:-1].rstrip() + suffix
        if not stem[:-1].strip():
            raise AddError(f"not a usable file name: {name[:80]!r}")
    return cleaned


def clean_folder(folder: str | None) -> str:
    """``kaas add --to FOLDER``: a relative path below raw/ ("" for raw/ itself)."""
    if not folder:
        return ""
    parts = [p for p in re.split(r"[/\\]", folder) if p not in ("", ".")]
    if any(p == ".." for p in parts) or folder.startswith(("/", "\\")):
        raise AddError(f"--to must be a folder inside raw/, not {folder[:80]!r}")
    return "/".join(clean_name(p) for p in parts)


def _split_suffix(name: str) -> tuple[str, str]:
    lower = name.lower()
    for archive in ARCHIVE_EXT:
        if lower.endswith(archive):
            return name[: -len(archive)], name[-len(archive):]
    suffix = PurePosixPath(name).suffix
    return (name[: -len(suffix)], suffix) if suffix and suffix != name else (name, "")


def check_document(raw_dir: Path, rel: str, data: bytes | None = None, rules: SourceRules | None = None) -> None:
    """``AddError`` unless the file that would be ``raw/REL`` is a document compile reads: by
    the rules of raw/ (type, ``raw/.kaasignore``), then by its content when ``data`` is given."""
    name = PurePosixPath(rel).name
    rules = rules if rules is not None else SourceRules.load(raw_dir)
    decision = rules.decide(rel)
    reason = decision.reason
    if reason is None and not decision.asked and data is not None:
        reason = sniff_document(name, data)
    if reason:
        raise NotADocument(f"{name}: not a document ({reason}), not added; kaas compile reads {READABLE}. "
                           f"To compile it anyway, add a line !{rel} to raw/{IGNORE_FILE}", reason)
    if reader_for(name) is None:
        suffix = _split_suffix(name)[1].lower() or "no extension"
        raise AddError(f"{name}: kaas compile cannot read this format ({suffix}); it reads {READABLE}")


def store_source(raw_dir: Path, name: str, data: bytes, *, folder: str = "", replace: bool = False,
                 rules: SourceRules | None = None, via: str | None = None) -> Added:
    """Write ``data`` as ``raw/FOLDER/NAME`` by the rules above (atomic, no link followed).
    ``via`` (``UPLOAD``, ``WEB``): the bytes came from outside; they are recorded in
    ``ADDED_FILE`` (before the source itself is written, so no compile ever sees it unrecorded).
    One at a time per process: two uploads of one name never both take it."""
    with _storing:
        return _store(raw_dir, name, data, folder=folder, replace=replace, rules=rules, via=via)


def _store(raw_dir: Path, name: str, data: bytes, *, folder: str, replace: bool, rules: SourceRules | None,
           via: str | None) -> Added:
    name = clean_name(name)
    folder = clean_folder(folder)
    if len(data) > MAX_ADD_BYTES:
        raise AddError(f"{name}: larger than {MAX_ADD_BYTES // 1_000_000} MB")
    check_document(raw_dir, f"{folder}/{name}" if folder else name, data, rules)
    stem, suffix = _split_suffix(name)
    for number in range(1, 1000):
        candidate = name if number == 1 else f"{stem}-{number}{suffix}"
        rel = f"{folder}/{candidate}" if folder else candidate
        existing = _existing(raw_dir, rel)
        if existing is None or existing == data or replace:
            break
    else:
        raise AddError(f"{name}: too many files of this name in raw/{folder}")
    label = f"raw/{rel}"
    if via is not None:
        _mark_added(raw_dir, label, data, via)
    if existing == data:
        return Added(label, "unchanged", len(data))
    try:
        write_below(raw_dir, rel, data)
    except LinkInPathError as exc:
        raise AddError(f"{label}: {exc.strerror} at {exc.filename}") from None
    status = "added" if existing is None else "updated"
    note = f"{name} was taken by another file" if candidate != name else None
    return Added(label, status, len(data), note=note)


@dataclass
class AddedSources:
    """What ``ADDED_FILE`` says: its entries ({path, sha256, via}), and ``damaged`` (why the file
    cannot be read: then every source counts as added from outside, a rule that cannot be read
    failing closed)."""

    entries: list[dict]
    damaged: str | None = None

    def __post_init__(self) -> None:
        self._by_path = {str(e.get("path")): str(e.get("via")) for e in self.entries}
        self._by_checksum = {str(e.get("sha256")): str(e.get("via")) for e in self.entries}

    def via(self, path: str, checksum: str) -> str | None:
        """How the source at ``path`` with these bytes came from outside; None: it did not."""
        if self.damaged:
            return f"unknown (raw/{ADDED_FILE} is damaged: {self.damaged})"
        return self._by_path.get(path) or self._by_checksum.get(checksum)


def read_added(raw_dir: Path) -> AddedSources:
    """``ADDED_FILE`` as recorded; empty when there is none."""
    try:
        value = read_state_json(Path(raw_dir) / ADDED_FILE, MAX_ADDED_FILE_BYTES)
    except DamagedFileError as exc:
        return AddedSources([], str(exc))
    entries = value.get("sources") if isinstance(value, dict) else [] if value is None else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        return AddedSources([], "not a list of sources")
    return AddedSources(entries)


def _mark_added(raw_dir: Path, label: str, data: bytes, via: str) -> None:
    """Record ``label`` (raw/...) with these bytes as added from outside (its earlier entry
    replaced). A damaged record is not overwritten (that would forget every other source it
    names): the source is refused until a person repairs or removes the file."""
    known = read_added(raw_dir)
    if known.damaged:
        raise AddError(f"raw/{ADDED_FILE} (the sources added from outside) is damaged ({known.damaged}); "
                       "repair or remove it, then add the source again")
    entries = [e for e in known.entries if e.get("path") != label]
    entries.append({"path": label, "sha256": hashlib.sha256(data).hexdigest(), "via": via})
    body = json.dumps({"format": 1, "sources": entries}, ensure_ascii=False, indent=1)
    try:
        write_below(raw_dir, ADDED_FILE, (body + "\n").encode("utf-8"))
    except LinkInPathError as exc:
        raise AddError(f"raw/{ADDED_FILE}: {exc.strerror} at {exc.filename}") from None


def _existing(raw_dir: Path, rel: str) -> bytes | None:
    """The bytes at raw/REL, None when nothing is there; a folder, link or device in the way is an error."""
    link = link_below(raw_dir, rel)
    if link is not None:  # never compared with (or written through to) a file elsewhere
        raise AddError(f"raw/{rel}: a symbolic link is in the way ({link}); not followed")
    target = raw_dir / rel
    if not target.exists() and not target.is_symlink():
        return None
    if target.is_symlink() or not target.is_file():
        raise AddError(f"raw/{rel} exists and is not a regular file; not replaced")
    try:
        return read_regular_bytes(target, MAX_ADD_BYTES)
    except (FileTooLargeError, NotRegularFileError):
        raise AddError(f"raw/{rel} exists and cannot be compared; not replaced") from None


def add_file(raw_dir: Path, path: Path, *, folder: str = "", replace: bool = False,
             rules: SourceRules | None = None) -> Added:
    """``kaas add PATH``: copy a regular file into raw/ (a folder: ``add_folder``)."""
    path = Path(path)
    if path.is_dir():
        raise AddError(f"{path}: a folder; kaas add copies folders with add_folder")
    rules = rules if rules is not None else SourceRules.load(raw_dir)
    folder = clean_folder(folder)
    check_document(raw_dir, f"{folder}/{path.name}" if folder else path.name, rules=rules)  # before reading it
    data = read_named_file(path, MAX_ADD_BYTES, AddError)
    if _inside(path, raw_dir):
        raise AddError(f"{path} is already in raw/")
    return store_source(raw_dir, path.name, data, folder=folder, replace=replace, rules=rules)


@dataclass
class FolderAdded:
    """What ``add_folder`` did: the files stored, the files refused with why (errors: too large,
    unreadable, a link), and what was left out as not documents, by reason (``group_left_out``)."""

    added: list[Added]
    refused: list[tuple[str, str]]
    left_out: list[dict]


def add_folder(raw_dir: Path, path: Path, *, folder: str = "", replace: bool = False) -> FolderAdded:
    """``kaas add DIR``: copy the documents of a folder, recursively, into ``raw/[FOLDER/]DIR/``
    (the folder keeps its name, as ``cp -r`` does), by the rules compile reads raw/ by, matched
    against the path each file gets in raw/: a folder those rules leave out is not entered,
    symbolic links are not followed, and each file is stored as ``add_file`` stores one."""
    root = Path(path)
    if _inside(root, raw_dir) or _inside(raw_dir, root):
        raise AddError(f"{root}: in raw/ or holding it; add a folder from outside the knowledge base's raw/")
    rules = SourceRules.load(raw_dir)
    base = "/".join(p for p in (clean_folder(folder), clean_name(root.resolve().name)) if p)
    result = FolderAdded([], [], [])
    left: list[tuple[str, str]] = []
    for current, dirs, files in os.walk(root):
        here = Path(current)
        sub = here.relative_to(root).as_posix()
        dest = base if sub == "." else f"{base}/{sub}"
        kept = []
        for name in sorted(dirs):
            reason = rules.decide(f"{dest}/{name}", is_dir=True).reason
            if reason:
                left.append((f"{here / name}/", reason))
            elif (here / name).is_symlink():
                result.refused.append((str(here / name), "a symbolic link to a folder: not followed"))
            else:
                kept.append(name)
        dirs[:] = kept
        for name in sorted(files):
            _add_member(raw_dir, here / name, dest, replace, rules, result, left)
    result.left_out = group_left_out(left)
    return result


def _add_member(raw_dir: Path, file: Path, dest: str, replace: bool, rules: SourceRules,
                result: FolderAdded, left: list[tuple[str, str]]) -> None:
    if file.is_symlink():
        result.refused.append((str(file), "a symbolic link: not followed"))
        return
    try:
        result.added.append(add_file(raw_dir, file, folder=dest, replace=replace, rules=rules))
    except NotADocument as exc:
        left.append((str(file), exc.reason))
    except AddError as exc:
        result.refused.append((str(file), exc.message))


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except (ValueError, OSError):
        return False
    return True
