"""The parsed catalog saved in ``.kaas/catalog-snapshot.pickle``, so a cold process (``kaas ask``,
``kaas mcp``, a server starting) does not parse 100,000 catalog lines and stat 100,000 files.

What it holds: the catalog's entries as ``CatalogStore`` resolved them (every line of
master-index.md, a hand-edited article re-read), each listed file's (size, mtime) or None when it
was missing, the parse warnings, the mtime of every folder holding a listed file, the catalog's
identity (a digest of all that, which the keyword index uses as its fingerprint) and the size
of its lines (``line_chars``: what showing the whole catalog to a model costs), and the title keys
a text can mention each page by (``mentions``: ``store/mention_keys.py``; a flat list of keys and
their rows' positions as int32 bytes), which every offline question looks for and which cost
~0.4 s to compute at 100,000 pages but ~20 ms to load and hash. The other name maps (``by_title``,
``by_stem``) are not kept: only a model's reply needs them, and loading them would cost every cold
question more than building them costs the few that do.

Keyed by master-index.md's identity (size, mtime_ns, inode) and by this module's format and
kaas's version: a snapshot of another index or another version is ignored and rewritten. It is
kaas's own state, read from the knowledge base's own ``.kaas`` folder only, bounded in size,
unpickled by an unpickler that refuses every class and function (plain lists, tuples, dicts,
strings and numbers only): a damaged or foreign file is a rebuild, never code run. Written
atomically, sealed (``kb_ai/seals.py``: the SHA-256 of its bytes and of the master-index.md it
is of, after the pickle): a snapshot that is well formed but not the bytes kaas wrote (two
entries' titles or access rules swapped, which would list a hidden page's title under a public
path) is damaged and rebuilt.

Freshness, without a stat per article: a folder's mtime changes when a file in it is created,
deleted or renamed (which is also how most editors, ``git`` and kaas itself save a file). On load,
every folder holding listed files is stat-ed (tens, not 100,000); the files of a folder that
changed, and every file that was missing, are stat-ed again and handled exactly as a full load
would (gone: dropped with a warning; changed after the index was written: re-read). A folder
written to within ``RACY_SECONDS`` of the snapshot is always re-checked (its mtime could hide a
second change in the same clock tick). What this does not see without reading the file is an
edit in place (truncate and write) of a page in an unchanged folder: the running server's
watcher re-indexes on the operating system's file events, ``kaas index`` and every compile
rewrite the snapshot, and a page a question reads is read from disk, its access rule checked
again (``store/pages.py``).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import pickle
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kb_ai import __version__
from kb_ai.files import DamagedFileError, read_state_bytes, write_state_bytes
from kb_ai.seals import sealed, unsealed
from kb_ai.store.mention_keys import MAX_TITLE_WORDS

log = logging.getLogger(__name__)

SNAPSHOT_NAME = "catalog-snapshot.pickle"
SNAPSHOT_FORMAT = 4  # 2: with the mention keys; 3: sealed; 4: with aliases
MAX_SNAPSHOT_BYTES = 1 << 30
RACY_SECONDS = 2.0

IndexId = tuple[int, int, int]  # master-index.md's (size, mtime_ns, inode)
Stamp = tuple[int, int]  # an article file's (size, mtime_ns)


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles builtin containers, strings and numbers; refuses every global (no class, no
    function: nothing in the file can name code to run)."""

    def find_class(self, module: str, name: str):  # noqa: ANN201
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def plain_unpickle(stream) -> object:
    """A pickle of builtin containers, strings and numbers only (``_PlainUnpickler``)."""
    return _PlainUnpickler(stream).load()


@dataclass
class Snapshot:
    """The saved state of one master-index.md (see the module's docstring). ``entries`` are the
    fields of ``CatalogEntry`` as tuples, in catalog order; ``stamps`` runs parallel to them."""

    index_id: IndexId
    entries: list[tuple]
    stamps: list[Stamp | None]
    warnings: list[str]
    folders: dict[str, int | None]  # folder under wiki/ ("" for wiki/ itself) -> mtime_ns; None: always re-check
    identity: str
    line_chars: int
    # the mention keys of the rows (``mention_rows``): keys, each key's row as an int32 array
    # (saved as bytes) and the most words in a key; None when not saved (a row's file was missing)
    mentions: "tuple[list[str], np.ndarray, int] | None" = None

    def payload(self) -> dict:
        mentions = None
        if self.mentions is not None:
            keys, rows, longest = self.mentions
            mentions = (keys, np.asarray(rows, dtype="<i4").tobytes(), longest)
        return {"format": SNAPSHOT_FORMAT, "version": __version__, "index_id": list(self.index_id),
                "entries": self.entries, "stamps": self.stamps, "warnings": self.warnings,
                "folders": self.folders, "identity": self.identity, "line_chars": self.line_chars,
                "mentions": mentions}


def mention_rows(entries, keys_of) -> tuple[list[str], np.ndarray, int]:
    """Every key ``keys_of(entry)`` gives, flat, with the position of its entry (ascending), and
    the most words in a key."""
    keys: list[str] = []
    rows: list[int] = []
    for position, entry in enumerate(entries):
        for key in sorted(keys_of(entry)):
            keys.append(key)
            rows.append(position)
    return keys, np.array(rows, dtype=np.int32), max((key.count(" ") + 1 for key in keys), default=0)


def _mentions_of(raw, rows: int) -> "tuple[list[str], np.ndarray, int] | None":
    """The saved mention keys, checked to have the shapes ``payload`` writes (ValueError if not)."""
    if raw is None:
        return None
    if not (type(raw) is tuple and len(raw) == 3 and type(raw[0]) is list and type(raw[1]) is bytes
            and len(raw[1]) == 4 * len(raw[0]) and type(raw[2]) is int and 0 <= raw[2] <= MAX_TITLE_WORDS
            and all(type(k) is str for k in raw[0])):
        raise ValueError("its mention keys do not have the shapes kaas writes")
    positions = np.frombuffer(raw[1], dtype="<i4").astype(np.int32)
    if len(positions) and (positions.min() < 0 or positions.max() >= rows or bool((np.diff(positions) < 0).any())):
        raise ValueError("its mention keys name rows it does not have")
    return raw[0], positions, raw[2]


def folder_of(path: str) -> str:
    return path.rpartition("/")[0]


def folder_mtimes(wiki_dir: Path, folders, now_ns: int) -> dict[str, int | None]:
    """The mtime of each folder (a folder missing or written to within ``RACY_SECONDS`` of
    ``now_ns`` is None: checked again on every load)."""
    root = str(wiki_dir)
    racy = now_ns - int(RACY_SECONDS * 1e9)
    found: dict[str, int | None] = {}
    for folder in folders:
        try:
            st = os.stat(f"{root}/{folder}" if folder else root)
        except OSError:
            found[folder] = None
            continue
        found[folder] = st.st_mtime_ns if stat.S_ISDIR(st.st_mode) and st.st_mtime_ns < racy else None
    return found


def changed_folders(wiki_dir: Path, folders: dict[str, int | None]) -> set[str]:
    """The folders whose mtime is not the one saved (or that must always be checked)."""
    root = str(wiki_dir)
    changed = set()
    for folder, mtime in folders.items():
        if mtime is None:
            changed.add(folder)
            continue
        try:
            st = os.stat(f"{root}/{folder}" if folder else root)
        except OSError:
            changed.add(folder)
            continue
        if st.st_mtime_ns != mtime:
            changed.add(folder)
    return changed


def identity_of(index_id: IndexId, entries: list[tuple], stamps: list[Stamp | None]) -> str:
    """A digest of the resolved catalog: every entry's fields and its file's stamp."""
    digest = hashlib.sha256(f"{SNAPSHOT_FORMAT}:{index_id}".encode())
    digest.update(repr(entries).encode("utf-8", "surrogatepass"))
    digest.update(repr(stamps).encode())
    return digest.hexdigest()


def load_snapshot(state_dir: Path, index_id: IndexId) -> Snapshot | None:
    """The snapshot of this master-index.md; None when there is none, it is of another index or
    another kaas, or it is damaged (with a warning: it is rebuilt)."""
    path = state_dir / SNAPSHOT_NAME
    try:
        data = read_state_bytes(path, MAX_SNAPSHOT_BYTES)
    except (DamagedFileError, OSError) as exc:
        log.warning("catalog snapshot %s is damaged (%s); rebuilt", path, exc)
        return None
    if data is None:
        return None
    try:
        raw = _PlainUnpickler(io.BytesIO(data)).load()
        if not isinstance(raw, dict) or raw.get("format") != SNAPSHOT_FORMAT or raw.get("version") != __version__:
            return None  # another kaas wrote it: rebuilt quietly
        if tuple(raw["index_id"]) != tuple(index_id):
            return None  # the snapshot of another master-index.md
        unsealed(data, _about(index_id))  # the bytes kaas wrote for this master-index.md, or damage
        snapshot = Snapshot(index_id=index_id, entries=raw["entries"], stamps=raw["stamps"],
                            warnings=raw["warnings"], folders=raw["folders"], identity=raw["identity"],
                            line_chars=raw["line_chars"])
        _check(snapshot)
        snapshot.mentions = _mentions_of(raw.get("mentions"), len(snapshot.entries))
    except Exception as exc:  # noqa: BLE001 - a damaged file of our own: anything can fail; rebuild
        log.warning("catalog snapshot %s is damaged (%s); rebuilt", path, " ".join(str(exc).split())[:200])
        return None
    return snapshot


def _check(s: Snapshot) -> None:
    """Raise ValueError unless the fields have the shapes ``save_snapshot`` writes (each entry's
    fields are checked as the catalog is made from them: ``entries_of``)."""
    ok = (isinstance(s.entries, list) and isinstance(s.stamps, list) and len(s.entries) == len(s.stamps)
          and all(t is None or (type(t) is tuple and len(t) == 2 and type(t[0]) is int and type(t[1]) is int)
                  for t in s.stamps)
          and isinstance(s.warnings, list) and all(isinstance(w, str) for w in s.warnings)
          and isinstance(s.folders, dict)
          and all(isinstance(k, str) and (v is None or type(v) is int) for k, v in s.folders.items())
          and isinstance(s.identity, str) and type(s.line_chars) is int)
    if not ok:
        raise ValueError("its fields do not have the shapes kaas writes")


def _strings(value) -> bool:
    return type(value) is tuple and all(type(v) is str for v in value)


def entries_of(rows: list, make):
    """``make(*row)`` for each saved row, each field checked to be what the catalog holds (four
    strings, an access rule of strings or None, a tuple of paths); ValueError when one is not."""
    out = []
    append = out.append
    for row in rows:
        if type(row) is not tuple or len(row) != 7:
            raise ValueError("an entry is not seven fields")
        path, title, summary, topic, access, depends, aliases = row
        if not (type(path) is str and type(title) is str and type(summary) is str and type(topic) is str
                and (access is None or _strings(access)) and (not depends or _strings(depends))
                and type(depends) is tuple and _strings(aliases)):
            raise ValueError("an entry's fields are not text")
        append(make(path, title, summary, topic, access, depends, aliases))
    return out


def _about(index_id) -> str:
    """What a snapshot's seal binds it to: the master-index.md it was made from."""
    return f"{SNAPSHOT_NAME}:{tuple(index_id)}"


def snapshot_bytes(payload: dict) -> bytes:
    """The file of a snapshot's ``payload``: the pickle, sealed."""
    return sealed(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL), _about(payload["index_id"]))


def save_snapshot(state_dir: Path, snapshot: Snapshot) -> None:
    """Write it atomically; a KB whose .kaas cannot be written still answers (rebuilt next time)."""
    try:
        write_state_bytes(state_dir / SNAPSHOT_NAME, snapshot_bytes(snapshot.payload()), durable=False)
    except OSError as exc:  # a read-only KB: loaded the slow way each time, said once per process
        log.info("could not save the catalog snapshot in %s: %s", state_dir, exc)


def now_ns() -> int:
    return time.time_ns()
