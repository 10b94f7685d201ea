"""The files of a saved ``LexicalIndex`` (``.kaas/lexical-index/``), read back and checked.

The saved index is kaas's own state: every file is read bounded and as plain arrays (numpy,
``allow_pickle=False``) or JSON; texts are NUL-joined UTF-8. ``check_saved`` raises
``DamagedFileError`` unless the files are an index ``LexicalIndex._save`` could have written, so
``offline/lexical.py`` reports one warning line and rebuilds the index.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import numpy as np

from kb_ai.files import DamagedFileError, check_regular_file, read_state_bytes, remove_state_entry
from kb_ai.store.lock import pid_alive

MAX_INDEX_FILE_BYTES = 1 << 30  # any one file of a saved index
ARRAYS = ("indptr", "docs", "tfs", "lengths", "live", "keys", "df")
MAPPED = ("docs", "tfs")  # the postings: mapped read-only (the pages a query touches are read)


def load_array(path: Path) -> np.ndarray:
    """A saved array: plain numbers only (``allow_pickle=False``). The postings are memory-mapped
    once the file is checked to be a regular file of bounded size; the rest is read bounded."""
    try:
        if path.stem in MAPPED:
            try:
                check_regular_file(path, MAX_INDEX_FILE_BYTES)
            except FileNotFoundError:
                raise DamagedFileError(f"{path.name} is missing") from None
            except OSError as exc:
                raise DamagedFileError(f"{path.name}: {exc.strerror or exc}") from None
            return np.load(path, mmap_mode="r", allow_pickle=False)
        data = read_state_bytes(path, MAX_INDEX_FILE_BYTES)
        if data is None:
            raise DamagedFileError(f"{path.name} is missing")
        return np.load(io.BytesIO(data), allow_pickle=False)
    except DamagedFileError:
        raise
    except Exception as exc:  # noqa: BLE001 - numpy meets a damaged file
        raise DamagedFileError(f"{path.name}: {type(exc).__name__}: {exc}") from None


def join_texts(texts) -> bytes:
    return "\0".join(texts).encode("utf-8", "surrogatepass")


def split_texts(data: bytes | None) -> list[str]:
    if data is None:
        raise DamagedFileError("a file of it is missing")
    try:
        text = data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise DamagedFileError(f"not UTF-8 ({exc.reason})") from None
    return text.split("\0") if text else []


def check_saved(paths, words, extra, arrays) -> tuple[dict[str, int], dict[int, list[tuple[int, int]]]]:
    """Raise DamagedFileError unless the saved files are an index ``LexicalIndex._save`` could
    have written: scoring it can then never fail (no term or page past the arrays)."""
    vocab = dict(zip(words, range(len(words))))
    if len(vocab) != len(words):
        raise DamagedFileError("kaas-vocab.txt lists a term twice")
    n, terms = len(paths), len(words)
    indptr, docs, tfs = arrays["indptr"], arrays["docs"], arrays["tfs"]
    lengths, live, keys, df = arrays["lengths"], arrays["live"], arrays["keys"], arrays["df"]
    ok = (all(isinstance(a, np.ndarray) and a.ndim == 1 for a in arrays.values())
          and indptr.dtype.kind in "iu" and docs.dtype.kind in "iu" and tfs.dtype.kind in "iu"
          and lengths.dtype.kind == "f" and live.dtype == np.bool_ and keys.dtype == np.uint64
          and len(lengths) == n and len(live) == n and len(keys) == n
          and df.dtype.kind in "iu" and len(df) == terms and (terms == 0 or int(df.min()) >= 0)
          and 1 <= len(indptr) <= terms + 1 and indptr[0] == 0 and indptr[-1] == len(docs) == len(tfs)
          and bool(np.all(np.diff(indptr) >= 0))
          and (len(docs) == 0 or (int(docs.min()) >= 0 and int(docs.max()) < n and int(tfs.min()) > 0))
          and bool(np.all(np.isfinite(lengths))) and bool(np.all(lengths >= 0))
          and np.array_equal(live, np.fromiter((p is not None for p in paths), dtype=bool, count=n)))
    if not ok:
        raise DamagedFileError("its arrays do not fit together")
    postings: dict[int, list[tuple[int, int]]] = {}
    if not isinstance(extra, list):
        raise DamagedFileError("kaas-extra.json is not a list")
    for item in extra:
        if not (isinstance(item, list) and len(item) == 3 and all(type(v) is int for v in item)
                and 0 <= item[0] < terms and 0 <= item[1] < n and item[2] > 0):
            raise DamagedFileError("kaas-extra.json does not fit the index")
        postings.setdefault(item[0], []).append((item[1], item[2]))
    return vocab, postings


def save_folders(cache_dir: Path) -> tuple[Path, Path]:
    """The folders a save of the index at ``cache_dir`` writes into and moves the old one to:
    ``<name>.tmp-<pid>`` and ``<name>.old-<pid>`` (one pair per process)."""
    pid = os.getpid()
    return (cache_dir.with_name(f"{cache_dir.name}.tmp-{pid}"), cache_dir.with_name(f"{cache_dir.name}.old-{pid}"))


def remove_abandoned_saves(cache_dir: Path) -> None:
    """The ``save_folders`` of saves cut short by a kill: their process is gone, so nobody will
    finish or remove them. A live process's (another server saving now) are left alone."""
    pattern = re.compile(re.escape(cache_dir.name) + r"\.(?:tmp|old)-(\d+)")
    try:
        names = os.listdir(cache_dir.parent)
    except OSError:
        return
    for name in names:
        match = pattern.fullmatch(name)
        if match and int(match.group(1)) != os.getpid() and not pid_alive(int(match.group(1))):
            try:
                remove_state_entry(cache_dir.parent / name)
            except OSError:
                pass

