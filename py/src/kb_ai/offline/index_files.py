"""The files of a saved ``LexicalIndex`` (``.kaas/lexical-index/``), read back and checked.

The saved index is kaas's own state: every file is read bounded and as plain arrays (numpy,
``allow_pickle=False``) or JSON; texts are NUL-joined UTF-8. Every file is checked against the
folder's seal (``kb_ai/seals.py``: the SHA-256 of each file, bound to the catalog fingerprint the
index was built for, written last) before any of it is used, so a well-formed file that is not
the one written with the others (``kaas-paths.txt`` reordered, postings from another build, a
file cut short) is damage, not an index that counts one page's words under another's path.
``check_saved`` then raises ``DamagedFileError`` unless the files are an index
``LexicalIndex._save`` could have written. On either, ``offline/lexical.py`` reports one warning
line and rebuilds the index.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import numpy as np

from kb_ai.files import DamagedFileError, map_state_file, read_state_bytes, remove_state_entry, state_json_of
from kb_ai.seals import FolderSeal, HashingWriter, digest, mapped_digest, remember_written, write_folder_seal
from kb_ai.store.lock import pid_alive

MAX_INDEX_FILE_BYTES = 1 << 30  # any one file of a saved index
ARRAYS = ("indptr", "docs", "tfs", "lengths", "live", "keys", "df")
MAPPED = ("docs", "tfs")  # the postings: mapped read-only (the pages a query touches are read)


TEXTS = ("kaas-fingerprint", "kaas-paths.txt", "kaas-vocab.txt", "kaas-extra.json")
FILES = (*TEXTS, *(f"{name}.npy" for name in ARRAYS))  # every file the seal names


def read_sealed(folder: Path, name: str, seal: FolderSeal) -> bytes:
    """The bytes of one file of the index, read bounded and checked against the seal."""
    try:
        data = read_state_bytes(folder / name, MAX_INDEX_FILE_BYTES)
    except DamagedFileError as exc:
        raise DamagedFileError(f"{name}: {exc}") from None
    if data is None:
        raise DamagedFileError(f"{name} is missing")
    seal.check(name, digest(data))
    return data


def read_extra(folder: Path, seal: FolderSeal):
    try:
        return state_json_of(read_sealed(folder, "kaas-extra.json", seal))
    except DamagedFileError as exc:
        raise DamagedFileError(f"kaas-extra.json: {exc}") from None


def load_array(folder: Path, name: str, seal: FolderSeal) -> np.ndarray:
    """A saved array (``name``: one of ``ARRAYS``), checked against the seal: plain numbers only
    (``allow_pickle=False``). The postings are memory-mapped from the file kaas opened and checked
    (a regular file of bounded size), hashed once per process (``seals.mapped_digest``); the rest
    is read bounded."""
    file = f"{name}.npy"
    try:
        if name in MAPPED:
            mapped = map_state_file(folder / file, MAX_INDEX_FILE_BYTES)
            if mapped is None:
                raise DamagedFileError(f"{file} is missing")
            buffer, info = mapped
            seal.check(file, mapped_digest(buffer, info))
            return _array_in(buffer)
        return np.load(io.BytesIO(read_sealed(folder, file, seal)), allow_pickle=False)
    except DamagedFileError as exc:
        raise DamagedFileError(str(exc) if str(exc).startswith(file) else f"{file}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - numpy meets a damaged file
        raise DamagedFileError(f"{file}: {type(exc).__name__}: {exc}") from None


def _array_in(buffer) -> np.ndarray:
    """The array a ``.npy`` file's bytes hold, as a read-only view of ``buffer`` (no copy)."""
    buffer.seek(0)
    version = np.lib.format.read_magic(buffer)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(buffer)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(buffer)
    else:
        raise ValueError(f"a .npy format kaas does not write ({version})")
    if dtype.hasobject:
        raise ValueError("it holds objects")
    return np.ndarray(shape, dtype=dtype, buffer=buffer, offset=buffer.tell(), order="F" if fortran else "C")


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
    vocab = dict(zip(words, range(len(words)), strict=True))
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


def write_index_files(folder: Path, arrays: dict[str, np.ndarray], texts: dict[str, bytes], fingerprint: str) -> None:
    """Write an index's ``arrays`` (``ARRAYS``) and ``texts`` into ``folder``, with
    ``kaas-fingerprint``, then the seal of them all (last: it vouches for every file before it)."""
    digests = {}
    for name, array in arrays.items():
        with open(folder / f"{name}.npy", "wb") as handle:
            writer = HashingWriter(handle)
            np.save(writer, array, allow_pickle=False)
        digests[f"{name}.npy"] = writer.hexdigest()
        if name in MAPPED:  # mapped when loaded: this process need not hash it again
            remember_written(folder / f"{name}.npy", writer.hexdigest())
    for name, data in {**texts, "kaas-fingerprint": fingerprint.encode()}.items():
        (folder / name).write_bytes(data)
        digests[name] = digest(data)
    write_folder_seal(folder, digests, fingerprint)


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

