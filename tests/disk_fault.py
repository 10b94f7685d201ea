"""Disk faults for tests: ``os.replace`` / ``os.fsync`` failing with ENOSPC or EACCES for the
files of one knowledge base (see tests/test_disk_faults.py for what is expected of kaas then)."""

from __future__ import annotations

import os
from pathlib import Path


class DiskFault:
    """Make ``os.replace`` (and optionally ``os.fsync``) fail with ``err`` for files under
    ``root`` whose path matches ``which`` (a substring of the path; None: every file)."""

    def __init__(self, monkeypatch, root: Path, err: int, *, which: str | None = None, at: str = "replace"):
        self.root, self.err, self.which, self.at = str(Path(root).resolve()), err, which, at
        self.hits = 0
        self._monkeypatch = monkeypatch
        self._real_replace, self._real_fsync = os.replace, os.fsync

    def _matches(self, path: str) -> bool:
        path = os.path.abspath(path)
        if not path.startswith(self.root + os.sep):
            return False
        return self.which is None or self.which in path

    def _raise(self, path: str):
        self.hits += 1
        raise OSError(self.err, os.strerror(self.err), path)

    def _replace(self, src, dst, *args, **kwargs):
        # The article writer renames inside a folder descriptor (store.files.write_below): the
        # names are relative to src_dir_fd / dst_dir_fd.
        where = lambda name, fd: (os.path.join(os.readlink(f"/proc/self/fd/{fd}"), str(name))  # noqa: E731
                                  if fd is not None and not os.path.isabs(str(name)) else str(name))
        if self.at == "replace" and self._matches(where(dst, kwargs.get("dst_dir_fd"))):
            self._raise(where(src, kwargs.get("src_dir_fd")))
        return self._real_replace(src, dst, *args, **kwargs)

    def _fsync(self, fd):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        # A temp file's name says nothing of its target, only its folder does.
        folder = None if self.which is None else (self.which if self.which.endswith("/") else self.which.rsplit("/", 1)[0] + "/")
        under = os.path.abspath(path).startswith(self.root + os.sep) if path else False
        if self.at == "fsync" and under and (folder is None or folder in path):
            self._raise(path)
        return self._real_fsync(fd)

    def __enter__(self) -> "DiskFault":
        self._monkeypatch.setattr(os, "replace", self._replace)
        self._monkeypatch.setattr(os, "fsync", self._fsync)
        return self

    def __exit__(self, *exc) -> None:
        self._monkeypatch.setattr(os, "replace", self._real_replace)
        self._monkeypatch.setattr(os, "fsync", self._real_fsync)
