"""One compile at a time per knowledge base: an exclusive ``flock`` on ``.kaas/compile.lock``.

The kernel releases a ``flock`` when its process dies, however it dies, so a compile killed with
``kill -9`` never leaves a lock that blocks the next one: the next compile takes it over and
says so (the file still names the dead pid). The file records the holder's pid, host and start
time for the message a second compile prints. It is never deleted: unlinking a locked file
would let two processes lock two different files of the same name. The one exception is a lock
"file" that is not a regular file (a folder, a FIFO, a link): no kaas can hold a lock on one,
so it is replaced by a real lock file, and ``replaced`` says so.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path

from kb_ai.errors import LockedError, StorageError
from kb_ai.files import open_state_file

LOCK_NAME = "compile.lock"
log = logging.getLogger(__name__)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (another user's counts as running)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # gone, or a number no process can have
        return False
    except PermissionError:
        return True
    return True


def _describe(info: dict) -> str:
    started = info.get("started")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) else "?"
    return f"pid {info.get('pid', '?')} on {info.get('host', '?')}, started {when}"


class CompileLock:
    """Context manager. ``took_over`` is set when the previous holder died without releasing."""

    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / LOCK_NAME
        self.took_over: str | None = None
        self.replaced: str | None = None  # a warning when the lock file was not a regular file
        self._fd: int | None = None

    def acquire(self) -> "CompileLock":
        """Take the lock or raise: ``LockedError`` when another process holds it,
        ``StorageError`` when the lock file cannot be created or written (disk full, read-only
        folder). Whatever fails, nothing stays locked or open."""
        try:
            fd, replaced = open_state_file(self.path)
        except OSError as exc:
            raise StorageError.from_os_error(exc, "create the lock file") from None
        if replaced:
            self.replaced = f".kaas/{LOCK_NAME} was {replaced}; replaced by a new lock file"
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (BlockingIOError, PermissionError):
            info = _read_info(fd)
            os.close(fd)
            raise LockedError(
                f"another kaas compile is running on this knowledge base ({_describe(info)}); "
                "wait for it to finish"
            ) from None
        except BaseException as exc:
            os.close(fd)
            if isinstance(exc, OSError):
                raise StorageError.from_os_error(exc, "lock") from None
            raise
        try:
            previous = _read_info(fd)
            if previous.get("pid") and previous.get("pid") != os.getpid():
                # The file was not cleared on release: its holder died mid-compile.
                self.took_over = f"the previous compile ({_describe(previous)}) did not finish; resuming its work"
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}).encode(), 0)
        except BaseException as exc:
            # Disk full while recording the holder: give the lock back (closing the file releases
            # the flock) rather than keep it until the process ends, refusing every later writer.
            _unlock_and_close(fd)
            if isinstance(exc, OSError):
                raise StorageError.from_os_error(_naming(exc, self.path), "write") from None
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        """Give the lock back. Never raises: a release runs on error paths, where an exception
        would replace the error being reported."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # "no holder": the next compile does not think this one died
        except OSError:
            pass
        _unlock_and_close(fd)

    def __enter__(self) -> "CompileLock":
        self.acquire()
        if self.replaced:  # (a compile reports it in its report instead)
            log.warning("%s", self.replaced)
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _unlock_and_close(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError:
        pass  # closing the last descriptor of the file releases the lock anyway
    finally:
        os.close(fd)


def _naming(exc: OSError, path: Path) -> OSError:
    """``exc`` about ``path`` (a failed ``pwrite`` names no file)."""
    return exc if exc.filename else type(exc)(exc.errno, exc.strerror or str(exc), str(path))


def _read_info(fd: int) -> dict:
    try:
        data = os.pread(fd, 4096, 0)
        info = json.loads(data.decode("utf-8")) if data.strip() else {}
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError, RecursionError):  # damaged: nothing is known of the holder
        return {}
