"""What reading one source may inflate, and the one way kaas opens a ZIP container.

Every decompression done for a source (the members of a ZIP or TAR archive, the parts of a
DOCX, the streams of a PDF) goes through the same caps: one member, part or stream inflates to at
most ``MAX_MEMBER_BYTES``, and to at most ``MAX_RATIO`` times its compressed size once past
``RATIO_FLOOR``; everything one source inflates, nested containers included (a DOCX inside a
ZIP), is charged to one ``source_budget`` of ``MAX_TOTAL_BYTES``. A source past a cap is refused
with ``InflationLimit`` (an ``UnreadableError``: the message is the skip reason); an archive
skips that member and goes on, and stops once the budget is spent.

``BoundedZip`` reads ZIP members itself, never through ``zipfile.ZipExtFile`` (which trusts the
header's size and inflates a bzip2 block whole before cutting it): the declared sizes are
checked first, then the member is inflated chunk by chunk and stopped the moment the actual
bytes pass the cap, so a header claiming a small size costs at most the cap. A member whose
actual size or CRC differs from its header is refused as damaged.
"""

from __future__ import annotations

import bz2
import io
import lzma
import struct
import zipfile
import zlib
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

from kb_ai.compile.readers import UnreadableError

MAX_MEMBERS = 2_000
MAX_MEMBER_BYTES = 5_000_000
MAX_TOTAL_BYTES = 50_000_000
MAX_RATIO = 200  # uncompressed / compressed; text rarely passes 20
RATIO_FLOOR = 100_000  # a member inflating to less than this is never judged by its ratio
_CHUNK = 64 * 1024
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # signature ... name length, extra length (30 bytes)
_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate", zipfile.ZIP_BZIP2: "bzip2"}


class InflationLimit(UnreadableError):
    """A member, part or stream past a cap. ``total``: the source's whole budget is spent (an
    archive stops), not only this member's cap (an archive skips it and goes on)."""

    def __init__(self, message: str, *, total: bool = False) -> None:
        super().__init__(message)
        self.total = total


class Budget:
    """The bytes one source may still inflate."""

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.limit = limit

    def check(self, size: int, what: str) -> None:
        """``InflationLimit`` when ``what`` inflating to ``size`` bytes passes a cap."""
        if size > MAX_MEMBER_BYTES:
            raise InflationLimit(f"{what} inflates past {MAX_MEMBER_BYTES:,} bytes (possible compression bomb)")
        if size > self.left:
            raise InflationLimit(f"{what}: this source would inflate to over {self.limit:,} bytes in all "
                                 "(possible compression bomb)", total=True)

    def charge(self, size: int, what: str) -> None:
        """Count ``size`` inflated bytes of ``what``; ``InflationLimit`` past a cap."""
        self.check(size, what)
        self.left -= size

    def spend(self, size: int, what: str) -> None:
        """Count ``size`` bytes inflated to move past ``what`` (a TAR member, kept or not): only
        the source's total is judged."""
        if size > self.left:
            self.check(self.left + 1, what)  # raises: the total
        self.left -= size


_BUDGET: ContextVar[Budget | None] = ContextVar("kaas_inflation_budget", default=None)


@contextmanager
def source_budget() -> Iterator[Budget]:
    """The budget of the source being read: the open one when a container reads a member (a
    DOCX inside a ZIP charges the ZIP's budget), else a new one of ``MAX_TOTAL_BYTES``."""
    current = _BUDGET.get()
    if current is not None:
        yield current
        return
    budget = Budget(MAX_TOTAL_BYTES)
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


def current_budget() -> Budget | None:
    """The budget of the source being read, or None outside ``source_budget``."""
    return _BUDGET.get()


def member_cap(compressed: int) -> int:
    """The most a member of ``compressed`` bytes may inflate to: the member cap and the ratio cap."""
    return min(MAX_MEMBER_BYTES, max(RATIO_FLOOR, MAX_RATIO * compressed))


class BoundedZip:
    """A ZIP container (a ``.zip`` source, a DOCX) whose members are read under the caps.
    ``what``: how errors name the container ("ZIP archive", "DOCX")."""

    def __init__(self, data: bytes, what: str = "ZIP archive") -> None:
        self.data = data
        try:
            self.infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, struct.error) as exc:
            raise UnreadableError(f"not a readable {what} ({exc})") from None

    def unread_problem(self, info: zipfile.ZipInfo) -> str | None:
        """Why a member is not read at all (encrypted, a method kaas does not inflate), or None."""
        if info.flag_bits & 0x1:
            return "encrypted"
        if info.compress_type not in _METHODS:
            return f"compressed with a method kaas does not read ({info.compress_type})"
        return None

    def read(self, info: zipfile.ZipInfo) -> bytes:
        """The member's bytes, charged to the source's budget: ``InflationLimit`` past a cap,
        judged on the header's sizes first, then on the bytes actually inflated;
        ``UnreadableError`` for a member encrypted, damaged or in a method kaas does not read."""
        name = info.filename
        problem = self.unread_problem(info)
        if problem:
            raise UnreadableError(f"{name}: {problem}")
        with source_budget() as budget:
            if info.file_size > member_cap(info.compress_size) and info.file_size <= MAX_MEMBER_BYTES:
                raise InflationLimit(f"{name}: compression ratio over {MAX_RATIO} (possible compression bomb)")
            budget.check(info.file_size, name)
            limit = min(member_cap(info.compress_size), budget.left)
            content = _inflate(info.compress_type, self._raw(info), limit)
            if len(content) > limit:  # the header claims fewer bytes than the member inflates to
                budget.check(len(content), name)  # past the member cap or the budget: says which
                raise InflationLimit(f"{name}: compression ratio over {MAX_RATIO} (possible compression bomb; "
                                     "its header claims a smaller size)")
            if len(content) != info.file_size or zlib.crc32(content) != info.CRC:
                raise UnreadableError(f"{name}: damaged (its size or checksum differs from its header)")
            budget.charge(len(content), name)
            return content

    def _raw(self, info: zipfile.ZipInfo) -> memoryview:
        """The member's compressed bytes, found as ``zipfile`` finds them (its local header)."""
        start = info.header_offset
        header = self.data[start:start + _LOCAL_HEADER.size]
        if len(header) < _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
            raise UnreadableError(f"{info.filename}: damaged (no local header)")
        fields = _LOCAL_HEADER.unpack(header)
        begin = start + _LOCAL_HEADER.size + fields[-2] + fields[-1]
        raw = memoryview(self.data)[begin:begin + info.compress_size]
        if len(raw) < info.compress_size:
            raise UnreadableError(f"{info.filename}: damaged (truncated)")
        return raw


def _inflate(method: int, raw: memoryview, limit: int) -> bytes:
    """A ZIP member's ``raw`` bytes inflated, stopped once past ``limit`` (so at most ``limit``
    and one chunk are ever held): the caller sees more than ``limit`` bytes and refuses."""
    out = bytearray()
    for chunk in _inflated(_METHODS[method], raw):
        out += chunk
        if len(out) > limit:
            break
    return bytes(out)


def _decompressor(kind: str):
    if kind == "deflate":
        return zlib.decompressobj(-zlib.MAX_WBITS)
    if kind == "gzip":
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if kind == "bzip2":
        return bz2.BZ2Decompressor()
    return lzma.LZMADecompressor()  # "xz"


def _inflated(kind: str, raw: memoryview, *, concatenated: bool = False) -> Iterator[bytes]:
    """The bytes ``raw`` inflates to, in chunks of at most 64 KB: never more output at once,
    whatever the ratio (each decompressor is asked for at most a chunk). ``concatenated``: a
    gzip, bzip2 or xz file may hold several streams one after the other."""
    if kind == "stored":
        for start in range(0, len(raw), _CHUNK):
            yield bytes(raw[start:start + _CHUNK])
        return
    unpack, position = _decompressor(kind), 0
    with_tail = kind in ("deflate", "gzip")  # zlib keeps unread input in unconsumed_tail
    while True:
        if unpack.eof:
            if not concatenated:
                return
            rest = unpack.unused_data + bytes(raw[position:])
            if not rest.strip(b"\0"):  # the end, or the zeros some writers pad a file with
                return
            raw, position, unpack = memoryview(rest), 0, _decompressor(kind)
            continue
        data = unpack.unconsumed_tail if with_tail else b""
        if not data and (with_tail or unpack.needs_input):
            data = raw[position:position + _CHUNK]
            position += len(data)
            if not data:
                return  # truncated: the caller's size or checksum check says so
        out = unpack.decompress(data, _CHUNK)
        if out:
            yield out


class InflatingFile(io.RawIOBase):
    """A TAR file's bytes, inflated as they are read (gzip, bzip2, xz or none, known by their
    first bytes), each byte charged to ``budget``: moving past a member, or through a header
    ``tarfile`` reads whole (a pax header, a long name), costs at most the source's budget."""

    def __init__(self, data: bytes, budget: Budget) -> None:
        super().__init__()
        kind = ("gzip" if data[:2] == b"\x1f\x8b" else "bzip2" if data[:3] == b"BZh"
                else "xz" if data[:6] == b"\xfd7zXZ\x00" else "stored")
        self._chunks = _inflated(kind, memoryview(data), concatenated=True)
        self._budget = budget
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._budget.spend(len(chunk), "the archive")
            self._pending = chunk
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size
