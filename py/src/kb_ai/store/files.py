"""Atomic file writes: a reader sees the old file or the new one, never half of either. And
bounded reads of files a person may have replaced by anything (a folder, a FIFO, a huge file)."""

from __future__ import annotations

import errno
import os
import stat
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


def atomic_write_text(path: Path, text: str, *, durable: bool = True, mode: int | None = None) -> None:
    """Write ``text`` to ``path`` via a temp file in the same folder, fsync, then rename.
    ``durable=False`` skips the fsync: for caches whose readers verify what they read."""
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable, mode=mode)


def write_text_if_changed(path: Path, text: str) -> bool:
    """Atomically write ``text`` unless ``path`` already holds exactly it (generated files that
    change rarely stay untouched, mtime included). Returns True when it was written."""
    data = text.encode("utf-8")
    try:
        if read_regular_bytes(path, len(data)) == data:
            return False
    except (FileNotFoundError, IsADirectoryError, NotRegularFileError, FileTooLargeError):
        pass  # a folder in its place makes the write fail with a clear error; a FIFO is replaced
    atomic_write_bytes(path, data)
    return True


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True, mode: int | None = None) -> None:
    """Errors (disk full, permission denied, ...) are raised as the same ``OSError`` subclass
    naming ``path`` (not the temp file), and no temp file is left behind. ``mode``: the new
    file's permissions (e.g. 0o600 for a secret, private from its first byte); default: the
    existing file's, or what a plain open() would give."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=path.parent)
    except OSError as exc:
        raise _naming(exc, path) from None
    try:
        with os.fdopen(fd, "wb") as handle:  # owns fd from here: closed on every path
            os.fchmod(handle.fileno(), mode if mode is not None else _target_mode(path))
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
    """Append ``text`` to ``path`` in one write (used for append-only logs). If the write fails
    (disk full), the file is cut back to where it was: no torn line for the next append to
    continue."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    # O_NONBLOCK: a FIFO in the log's place must not wait for a reader (it is refused below).
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads
            raise NotRegularFileError(errno.EINVAL, "not a regular file", str(path)) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFileError(errno.EINVAL, "not a regular file", str(path))
        size = info.st_size
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        except BaseException:
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)


class NotRegularFileError(OSError):
    """The path names a FIFO, socket or device: reading it could block forever or never end."""


class FileTooLargeError(OSError):
    """The file is larger than the caller's limit."""


def read_regular_bytes(path: Path, max_bytes: int) -> bytes:
    """The bytes of the regular file at ``path``, at most ``max_bytes``. Opens without blocking
    (a FIFO must not wait for a writer) and checks what was opened, not what a name pointed to a
    moment before. Raises FileNotFoundError / IsADirectoryError / NotADirectoryError /
    PermissionError as ``open`` would, ``NotRegularFileError``, ``FileTooLargeError``."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFileError(errno.EINVAL, "not a regular file", str(path))
        chunks, size = [], 0
        while size <= max_bytes:  # the file may grow after fstat: read at most one byte past the limit
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if info.st_size > max_bytes or size > max_bytes:
            raise FileTooLargeError(errno.EFBIG, f"larger than {max_bytes} bytes", str(path))
        return b"".join(chunks)
    finally:
        os.close(fd)
