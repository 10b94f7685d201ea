"""A web page's body, decoded from its ``Content-Encoding`` with every stage bounded.

A fetch asks for ``ACCEPT_ENCODING`` (gzip and deflate: what the standard library's zlib
decodes) and reads the body as it came over the wire. ``decoded`` undoes the encodings the
server names, the last applied first (``Content-Encoding: deflate, gzip`` is gzip of deflate),
at most ``MAX_STACKED`` of them; ``identity`` is nothing and ``x-gzip`` is gzip. Any other
(``br``, ``zstd``, ``compress``...: not asked for) is refused with ``ContentCodingError``, as is a
damaged or cut-short compressed body. Each stage hands on at most ``PIECE`` bytes at a time
(zlib's ``max_length``, the rest of its input kept in ``unconsumed_tail``), and the bytes out of
every stage, the wire's included, are counted against the same limit: a compression bomb (a
few hundred bytes that inflate to gigabytes, or a gzip of a gzip) is refused with ``BodyTooLarge``
once one stage has passed the limit, having held no more than a piece of it at any time.
``deflate`` is read as browsers read it: zlib-wrapped (RFC 1950) or, without that header, raw.
"""

from __future__ import annotations

import zlib
from typing import Iterable, Iterator

ACCEPT_ENCODING = "gzip, deflate"
MAX_STACKED = 2
PIECE = 65536
_ALIASES = {"x-gzip": "gzip"}
_CODINGS = ("gzip", "deflate")


class ContentCodingError(ValueError):
    """A content encoding that is not decoded here, too many of them, or a damaged body."""


class BodyTooLarge(ValueError):
    """A body (at some stage of its decoding) larger than the limit."""


def codings(header: str | None) -> list[str]:
    """The encodings of a ``Content-Encoding`` header, in the order they were applied."""
    names = [_ALIASES.get(n, n) for n in (part.strip().lower() for part in (header or "").split(","))
             if n and n != "identity"]
    for name in names:
        if name not in _CODINGS:
            raise ContentCodingError(f"the page is sent in the content encoding {name[:40]!r}, which kaas "
                                     f"does not decode (it asks for {ACCEPT_ENCODING})")
    if len(names) > MAX_STACKED:
        raise ContentCodingError(f"the page is sent in {len(names)} stacked content encodings "
                                 f"({', '.join(names)[:100]}); at most {MAX_STACKED} are decoded")
    return names


def decoded(chunks: Iterable[bytes], header: str | None, limit: int) -> Iterator[bytes]:
    """The body of ``chunks`` (the bytes on the wire) decoded per ``header``, in pieces; every
    stage at most ``limit`` bytes (``BodyTooLarge``)."""
    stream = _bounded(chunks, limit)
    for name in reversed(codings(header)):
        stream = _bounded(_inflate(stream, name), limit)
    return stream


def _bounded(chunks: Iterable[bytes], limit: int) -> Iterator[bytes]:
    size = 0
    for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"larger than {limit:,} bytes")
        yield chunk


def _inflate(chunks: Iterable[bytes], name: str) -> Iterator[bytes]:
    """Undo one zlib encoding (gzip, of one or more members; deflate, zlib-wrapped or raw)."""
    inflater, head = None, b""
    try:
        for chunk in chunks:
            if inflater is None:
                head += chunk
                if len(head) < 2:  # the first two bytes tell zlib-wrapped deflate from raw
                    continue
                inflater, chunk = zlib.decompressobj(_window_bits(name, head)), head
            yield from _drain(inflater, chunk)
            while name == "gzip" and inflater.eof and inflater.unused_data:  # the next gzip member
                rest, inflater = inflater.unused_data, zlib.decompressobj(_window_bits(name, b""))
                yield from _drain(inflater, rest)
    except zlib.error as exc:
        raise ContentCodingError(f"the {name} body is damaged ({exc})") from None
    if (inflater is None and head) or (inflater is not None and not inflater.eof):
        raise ContentCodingError(f"the {name} body ends before its end")


def _window_bits(name: str, head: bytes) -> int:
    if name == "gzip":
        return 16 + zlib.MAX_WBITS
    zlib_wrapped = head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0
    return zlib.MAX_WBITS if zlib_wrapped else -zlib.MAX_WBITS


def _drain(inflater, data: bytes) -> Iterator[bytes]:
    """Everything ``data`` inflates to, ``PIECE`` bytes at most at a time."""
    while True:
        out = inflater.decompress(data, PIECE)
        if out:
            yield out
        data = inflater.unconsumed_tail
        if not data and len(out) < PIECE:  # a full piece may leave output inside zlib: ask again
            return
