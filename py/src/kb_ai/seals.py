"""Seals on kaas's own state: what a state file (or each file of a saved folder) held when kaas
wrote it, and what it was made from, checked before any of it is used.

Shape checks catch garbage, not a state file that is well formed and wrong: ``kaas-paths.txt``
reordered, a postings file from another build, a file cut short where the cut still parses, two
fields of the catalog snapshot swapped, a cache entry under another entry's name. Any of those
could make one page's data count under another page's path (a hidden page's words ranking a
public page) or show a reader a hidden title under a path they may read. So every state file
that decides what a reader sees or how pages rank is written with a seal: the SHA-256 of its
bytes, bound to ``about`` (what the file claims to be of: the catalog fingerprint an index was
built for, the key of a cache entry). A folder's seal (``kaas-seal.json``) is written last, after
every file it names. A reader checks every byte it uses against the seal first: a missing seal,
the seal of something else, a file the seal does not name (or that it names and is missing), or
bytes that do not match are a damaged file (``DamagedFileError``: the caller warns in one line
and rebuilds).

A seal detects damage and mixes, not forgery: whoever can write ``.kaas/`` with the owner's rights
can write a fresh seal as well (and the wiki itself), and is trusted as the owner.

Cost: SHA-256 runs at ~1.4 GB/s on a core with SHA instructions. A file read whole is hashed as
it is read. A memory-mapped file (the keyword index's postings) is hashed once per process: its
digest is remembered under the file's (device, inode, size, mtime, ctime), which any write,
truncation, ``utime`` or replacement of the file changes; a file this process wrote is remembered
as written, so a server's own saves are never hashed again.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from pathlib import Path

from kb_ai.files import DamagedFileError, atomic_write_text, read_state_json

SEAL_NAME = "kaas-seal.json"
SEAL_FORMAT = 1
_TRAILER = b"\nkaas-seal-1 "  # a sealed single file: the bytes, this, the hex digest, a newline
_TRAILER_BYTES = len(_TRAILER) + 64 + 1
_KEPT = 256  # digests of mapped files remembered per process (a saved index has two)


def digest(data, about: str = "") -> str:
    """The SHA-256 (hex) of ``about`` and ``data`` (bytes, or any buffer: a memory map)."""
    h = hashlib.sha256(about.encode("utf-8", "surrogatepass") + b"\0")
    h.update(data)
    return h.hexdigest()


class HashingWriter:
    """A binary file object that hashes what is written through it (``digest`` with no ``about``)."""

    def __init__(self, handle) -> None:
        self._handle = handle
        self._hash = hashlib.sha256(b"\0")

    def write(self, data) -> int:
        self._hash.update(data)
        return self._handle.write(data)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


_known: OrderedDict[tuple, str] = OrderedDict()
_known_lock = threading.Lock()


def _identity(info: os.stat_result) -> tuple:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _remember(info: os.stat_result, hexdigest: str) -> None:
    with _known_lock:
        _known[_identity(info)] = hexdigest
        _known.move_to_end(_identity(info))
        while len(_known) > _KEPT:
            _known.popitem(last=False)


def remember_written(path: Path, hexdigest: str) -> None:
    """Record the digest of a file this process just wrote (``mapped_digest`` then trusts it)."""
    _remember(os.stat(path), hexdigest)


def mapped_digest(buffer, info: os.stat_result) -> str:
    """``digest(buffer)`` of a mapped file whose stat is ``info``, computed once per process for
    one state of the file (see the module's docstring)."""
    with _known_lock:
        known = _known.get(_identity(info))
    if known is not None:
        return known
    found = digest(buffer)
    _remember(info, found)
    return found


def write_folder_seal(folder: Path, digests: dict[str, str], about: str) -> None:
    """Seal the files of ``folder`` named in ``digests`` (name -> ``digest``) as being of ``about``.
    Write it after every file it names."""
    text = json.dumps({"format": SEAL_FORMAT, "about": about, "files": digests}, sort_keys=True)
    atomic_write_text(folder / SEAL_NAME, text)


class FolderSeal:
    """A folder's seal, read back: ``check`` each file's bytes against it, ``check_all`` that
    exactly the sealed files were checked."""

    def __init__(self, folder: Path, about: str, names) -> None:
        data = read_state_json(folder / SEAL_NAME, 1 << 20)
        if data is None:
            raise DamagedFileError("it has no seal")
        files = data.get("files") if isinstance(data, dict) else None
        if not (isinstance(files, dict) and data.get("format") == SEAL_FORMAT
                and all(isinstance(v, str) for v in files.values())):
            raise DamagedFileError("its seal is not one kaas writes")
        if data.get("about") != about:
            raise DamagedFileError("its seal is of another build")
        if set(files) != set(names):
            raise DamagedFileError("its seal names other files")
        self._files: dict[str, str] = files

    def check(self, name: str, hexdigest: str) -> None:
        if self._files.get(name) != hexdigest:
            raise DamagedFileError(f"{name} is not the file its seal names")


def sealed(data: bytes, about: str) -> bytes:
    """``data`` with its seal after it (a single state file, written atomically in one piece; a
    reader that stops at the end of its own format, as pickle does, still reads it)."""
    return data + _TRAILER + digest(data, about).encode() + b"\n"


def unsealed(data: bytes, about: str) -> memoryview:
    """The bytes ``sealed(data, about)`` sealed (a view of ``data``, not a copy);
    ``DamagedFileError`` when there is no seal, or it is of other bytes or of something else
    than ``about``."""
    start = len(data) - _TRAILER_BYTES
    if start < 0 or data[start:start + len(_TRAILER)] != _TRAILER or not data.endswith(b"\n"):
        raise DamagedFileError("it has no seal")
    body = memoryview(data)[:start]
    if digest(body, about).encode() != data[start + len(_TRAILER):-1]:
        raise DamagedFileError("it is not what its seal names")
    return body
