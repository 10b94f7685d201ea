"""Atomic file writes: a reader sees the old file or the new one, never half of either."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

TEMP_PREFIX = ".kaas-tmp-"
# Read once at import: os.umask can only be read by setting it, which races with other threads.
_UMASK = os.umask(0)
os.umask(_UMASK)


def _target_mode(path: Path) -> int:
    """The existing file's permissions, or what a plain open() would give (0666 minus umask):
    mkstemp's private 0600 must not leak into the wiki."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~_UMASK


def atomic_write_text(path: Path, text: str, *, durable: bool = True) -> None:
    """Write ``text`` to ``path`` via a temp file in the same folder, fsync, then rename.
    ``durable=False`` skips the fsync: for caches whose readers verify what they read."""
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def write_text_if_changed(path: Path, text: str) -> bool:
    """Atomically write ``text`` unless ``path`` already holds exactly it (generated files that
    change rarely stay untouched, mtime included). Returns True when it was written."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    atomic_write_text(path, text)
    return True


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Errors (disk full, permission denied, ...) are raised as the same ``OSError`` subclass
    naming ``path`` (not the temp file), and no temp file is left behind."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=path.parent)
    except OSError as exc:
        raise _naming(exc, path) from None
    try:
        os.fchmod(fd, _target_mode(path))
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException as exc:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise _naming(exc, path) from None
        raise


def _naming(exc: OSError, path: Path) -> OSError:
    """``exc`` as the same kind of error, about ``path`` (what a person can act on)."""
    if exc.filename == str(path):
        return exc
    return type(exc)(exc.errno, exc.strerror or str(exc), str(path))


def append_text(path: Path, text: str) -> None:
    """Append ``text`` to ``path`` in one write (used for append-only logs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
