"""Atomic file writes: a reader sees the old file or the new one, never half of either. And
bounded reads of files a person may have replaced by anything (a folder, a FIFO, a huge file).

kaas's own state (``.kaas/``) is read and written through ``read_state_bytes`` /
``read_state_json`` / ``write_state_bytes`` / ``open_state_file`` / ``state_folder``: a state
file that is missing reads as None; anything else that is not a regular file of kaas's own
making (a folder, a FIFO, a device, a link to one, a huge or unreadable file, bytes that are not
UTF-8 JSON) raises ``DamagedFileError`` saying what is wrong, and the writers replace whatever is
in the way, since ``.kaas/`` is documented as kaas's own and safe to delete."""

from __future__ import annotations

import errno
import json
import mmap
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

from kb_ai.errors import KaasError
from kb_ai.untrusted_text import json_problem, refuse_json_constant

TEMP_PREFIX = ".kaas-tmp-"
MAX_STATE_JSON_DEPTH = 32  # the manifest, the deepest state file, nests 6 levels
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


class LinkInPathError(OSError):
    """A symbolic link sits where a write below a root would have to follow it."""


def write_below(root: Path, rel: str, data: bytes, *, durable: bool = True) -> Path:
    """Atomically write ``data`` at ``root/rel`` without following any symbolic link below
    ``root``: each folder of ``rel`` is opened with O_NOFOLLOW (made when missing), the temp file
    is created in the last one and renamed onto the name. A link in place of a folder or of the
    file itself raises ``LinkInPathError`` (naming it): a write meant for one page never lands in
    another page, or anywhere else, through a link. ``root`` itself may be a link (a wiki kept on
    another disk). Returns ``root/rel``. Errors name ``root/rel``; no temp file is left.

    One function on purpose (its cyclomatic complexity is over 20): it is a security-critical,
    linear walk that holds one folder descriptor at a time (each replaced by the next, the last
    closed on every way out); split into parts, the descriptor's ownership would cross function
    boundaries, which is harder to check than reading the steps in order."""
    path = root / rel
    parts = [p for p in rel.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise ValueError(f"not a relative path: {rel!r}")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
    try:
        root.mkdir(parents=True, exist_ok=True)
        dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    except OSError as exc:
        raise _naming(exc, path) from None
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                fd = os.open(part, flags, dir_fd=dfd)
            except FileNotFoundError:
                try:
                    os.mkdir(part, 0o777, dir_fd=dfd)
                except FileExistsError:
                    pass
                fd = os.open(part, flags, dir_fd=dfd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(part, dfd):
                    raise LinkInPathError(errno.ELOOP, "a symbolic link is in the way (not followed)",
                                          str(root / "/".join(parts[: i + 1]))) from None
                raise _naming(exc, path) from None
            os.close(dfd)
            dfd = fd
        name = parts[-1]
        if _is_link(name, dfd):
            raise LinkInPathError(errno.ELOOP, "a symbolic link (not followed)", str(path))
        try:
            mode = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o666 & ~_UMASK
        tmp = None
        for _ in range(100):
            candidate = f"{TEMP_PREFIX}{os.urandom(6).hex()}"
            try:
                fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC, 0o600,
                             dir_fd=dfd)
            except FileExistsError:
                continue
            tmp = candidate
            break
        if tmp is None:
            raise FileExistsError(errno.EEXIST, "no free temp file name", str(path))
        try:
            with os.fdopen(fd, "wb") as handle:
                os.fchmod(handle.fileno(), mode)
                handle.write(data)
                handle.flush()
                if durable:
                    os.fsync(handle.fileno())
            # rename() replaces the name itself: a link swapped in since the check above is
            # replaced, never written through.
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException as exc:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except FileNotFoundError:
                pass
            if isinstance(exc, OSError):
                raise _naming(exc, path) from None
            raise
    finally:
        os.close(dfd)
    return path


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def link_below(root: Path, rel: str) -> Path | None:
    """The first symbolic link on ``root/rel`` below ``root`` (a folder or the file itself), or None."""
    path = root
    for part in (p for p in rel.split("/") if p):
        path = path / part
        if path.is_symlink():
            return path
    return None


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
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFileError(errno.EINVAL, "not a regular file", str(path))
        _append_whole(fd, data)
    finally:
        os.close(fd)


def _append_whole(fd: int, data: bytes) -> None:
    """Append ``data`` to the regular file open on ``fd`` (O_APPEND), durably, or cut the file
    back to its previous size and raise (no torn line for the next append to continue)."""
    size = os.fstat(fd).st_size
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


class NotRegularFileError(OSError):
    """The path names a FIFO, socket or device: reading it could block forever or never end."""


class FileTooLargeError(OSError):
    """The file is larger than the caller's limit."""


_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _open_regular(path: Path, max_bytes: int, flags: int = os.O_RDONLY) -> tuple[int, os.stat_result]:
    """An fd on the regular file at ``path`` and its stat, checked on what was opened (not on what
    the name pointed to a moment before). O_NONBLOCK: a FIFO must not wait for a writer."""
    fd = os.open(path, flags | os.O_NONBLOCK | _CLOEXEC)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFileError(errno.EINVAL, "not a regular file", str(path))
        if info.st_size > max_bytes:
            raise FileTooLargeError(errno.EFBIG, f"larger than {max_bytes} bytes", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd, info


_READ_CHUNK = 1 << 20  # os.read allocates what it is asked for before reading: ask for a megabyte at a time


def read_regular_bytes(path: Path, max_bytes: int) -> bytes:
    """The bytes of the regular file at ``path``, at most ``max_bytes``. Opens without blocking
    (a FIFO must not wait for a writer) and checks what was opened, not what a name pointed to a
    moment before. Raises FileNotFoundError / IsADirectoryError / NotADirectoryError /
    PermissionError as ``open`` would, ``NotRegularFileError``, ``FileTooLargeError``."""
    fd, _info = _open_regular(path, max_bytes)
    try:
        chunks, size = [], 0
        while size <= max_bytes:  # the file may grow after fstat: read at most one byte past the limit
            chunk = os.read(fd, min(_READ_CHUNK, max_bytes + 1 - size))  # not a buffer of max_bytes
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise FileTooLargeError(errno.EFBIG, f"larger than {max_bytes} bytes", str(path))
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_named_file(path: Path, max_bytes: int, error: type[KaasError] = KaasError) -> bytes:
    """The bytes of a file a person named (a command's argument: a document for ``kaas add``, the
    questions of ``kaas eval``), read as ``read_regular_bytes`` reads it. Whatever stops the read
    is raised as ``error`` (the caller's error class) with one line naming the path: ``no such
    file``, ``a folder``, ``not a regular file`` (a FIFO, never waited on; a device; a socket),
    ``larger than 50 MB``, ``cannot read (Permission denied)``."""
    try:
        return read_regular_bytes(path, max_bytes)
    except OSError as exc:
        raise error(f"{path}: {_named_file_problem(exc, max_bytes)}") from None


def read_named_text(path: Path, max_bytes: int, error: type[KaasError] = KaasError) -> str:
    """``read_named_file`` as UTF-8 text (a byte-order mark dropped); other bytes: ``not UTF-8 text``."""
    try:
        return read_named_file(path, max_bytes, error).decode("utf-8-sig")
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text") from None


def _named_file_problem(exc: OSError, max_bytes: int) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, NotADirectoryError):
        return "no such file (a part of its path is a file, not a folder)"
    if isinstance(exc, IsADirectoryError):
        return "a folder"
    if isinstance(exc, NotRegularFileError):
        return "not a regular file"
    if isinstance(exc, FileTooLargeError):
        return f"larger than {_size(max_bytes)}"
    return f"cannot read ({exc.strerror or exc})"


def _size(count: int) -> str:
    if count >= 1_000_000:
        return f"{count / 1_000_000:g} MB"
    if count >= 1_000:
        return f"{count / 1_000:g} kB"
    return f"{count} bytes"


def check_regular_file(path: Path, max_bytes: int) -> None:
    """Raise what ``read_regular_bytes`` would for ``path``, without reading it: for a library
    that opens the file itself (it must not be handed a FIFO, a device or a huge file)."""
    fd, _info = _open_regular(path, max_bytes)
    os.close(fd)


# -- kaas's own state (.kaas/) ----------------------------------------------------------------------


class DamagedFileError(ValueError):
    """A file of kaas's own state cannot be used; the message says what is wrong, in a few words
    (``not a regular file``, ``a folder``, ``not JSON (...)``)."""


def _damage(exc: BaseException) -> str:
    if isinstance(exc, IsADirectoryError):
        return "a folder"
    if isinstance(exc, NotADirectoryError):
        return "a folder on its path is not a folder"
    if isinstance(exc, (NotRegularFileError, FileTooLargeError)):
        return exc.strerror or str(exc)
    if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
        return "a symlink loop"
    if isinstance(exc, OSError):
        return f"cannot read ({exc.strerror or exc})"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply"
    return f"not JSON ({exc})"


def read_state_bytes(path: Path, max_bytes: int) -> bytes | None:
    """The bytes of the state file at ``path``; None when there is none. Anything else in its
    place, or a file larger than ``max_bytes``, raises ``DamagedFileError``."""
    try:
        return read_regular_bytes(path, max_bytes)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DamagedFileError(_damage(exc)) from None


def map_state_file(path: Path, max_bytes: int) -> tuple[mmap.mmap, os.stat_result] | None:
    """The state file at ``path`` mapped read-only, with the stat of what was mapped; None when
    there is none. What is mapped is what was opened and checked (a regular file of at most
    ``max_bytes``; no name is opened twice); anything else raises ``DamagedFileError``."""
    try:
        fd, info = _open_regular(path, max_bytes)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DamagedFileError(_damage(exc)) from None
    try:
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ), info
    except (OSError, ValueError) as exc:  # an empty file cannot be mapped
        raise DamagedFileError(f"cannot map it ({exc})") from None
    finally:
        os.close(fd)


def read_state_json(path: Path, max_bytes: int) -> Any:
    """The JSON value of the state file at ``path``; None when there is none. Raises
    ``DamagedFileError`` as ``read_state_bytes`` does, and for bytes that are not UTF-8 JSON
    (NaN and Infinity included), JSON nested deeper than any state file kaas writes, or a string
    holding a lone surrogate (which no later step could print or write)."""
    data = read_state_bytes(path, max_bytes)
    return None if data is None else state_json_of(data)


def state_json_of(data: bytes) -> Any:
    """The JSON value of a state file's bytes, checked as ``read_state_json`` checks it."""
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=refuse_json_constant)
    except (ValueError, RecursionError) as exc:
        raise DamagedFileError(_damage(exc)) from None
    problem = json_problem(value, MAX_STATE_JSON_DEPTH)
    if problem:
        raise DamagedFileError(problem)
    return value



def remove_state_entry(path: Path) -> None:
    """Remove whatever is at ``path`` without following it: a folder with everything in it, a
    file, a FIFO, a link (never what the link points to). Missing is fine."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(path)
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


STATE_DIR_NAME = ".kaas"  # KnowledgeBase.state_dir; nothing outside a folder of this name is ever removed here


def state_folder(folder: Path) -> bool:
    """Make ``folder`` (and its parents) exist as a folder. A file, FIFO, device or dangling link
    in place of it or of a parent inside ``.kaas/`` (``.kaas`` included) is removed first; a link
    to a folder is kept (a person may keep state elsewhere that way). Returns True when
    something was removed."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return False
    except (FileExistsError, NotADirectoryError):
        parts = [folder, *folder.parents]
        if not any(p.name == STATE_DIR_NAME for p in parts):
            raise
    for part in reversed(parts):
        if part.is_dir() or not (part.is_symlink() or part.exists()):
            continue
        if not any(p.name == STATE_DIR_NAME for p in (part, *part.parents)):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(part))
        remove_state_entry(part)
        break
    folder.mkdir(parents=True, exist_ok=True)
    return True


def write_state_bytes(path: Path, data: bytes, *, durable: bool = True, mode: int | None = None) -> None:
    """``atomic_write_bytes`` for a state file: a folder in the file's place, or anything but a
    folder in place of the folder it goes in, is removed first. ``mode``: as for
    ``atomic_write_bytes`` (0o600 for a file holding a secret)."""
    state_folder(path.parent)
    if path.is_dir() and not path.is_symlink():
        remove_state_entry(path)
    atomic_write_bytes(path, data, durable=durable, mode=mode)


def open_state_file(path: Path, *, append: bool = False) -> tuple[int, str | None]:
    """A read-write descriptor on the state file at ``path`` (created when missing; with
    ``append``, every write goes to its end). Never follows a link and never waits on a FIFO: a
    link, FIFO, device or folder in its place is removed and the file started afresh. Returns
    the fd (the caller closes it) and, when something was replaced, what it was."""
    state_folder(path.parent)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC | (os.O_APPEND if append else 0)
    replaced = None
    for attempt in (1, 2):
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:
            if attempt == 2 or exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                raise
            replaced = "a link" if exc.errno == errno.ELOOP else "a folder" if exc.errno == errno.EISDIR else "not a file"
            remove_state_entry(path)
            continue
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd, replaced
        os.close(fd)
        if attempt == 2:
            raise NotRegularFileError(errno.EINVAL, "not a regular file", str(path))
        replaced = "not a regular file"
        remove_state_entry(path)
    raise AssertionError("unreachable")


def append_state_text(path: Path, text: str) -> str | None:
    """``append_text`` for a state log (``.kaas/logs/``): anything but a regular file in its place
    is replaced (see ``open_state_file``), and what it was is returned for a warning."""
    fd, replaced = open_state_file(path, append=True)
    try:
        _append_whole(fd, text.encode("utf-8"))
    finally:
        os.close(fd)
    return replaced
