"""The time and size limits of a URL fetch (``kaas add URL``, the Sources tab's "add a web page").

Size: a compressed body is inflated a piece at a time and every stage of its decoding counts
against ``max_bytes``, so a compression bomb (one encoding or two stacked) is refused having held
no more than a piece of it (measured with tracemalloc). Time: one deadline for the whole fetch,
held by the clock in every socket operation, so a server dripping a byte at a time (in its
headers, its body, or through a proxy) or a name lookup that hangs ends the fetch on time.
Servers listen on 127.0.0.1; no test reaches the internet.
"""

from __future__ import annotations

import functools
import gzip
import ipaddress
import socket
import threading
import time
import tracemalloc
import zlib

import pytest

from kb_ai.compile import public_web
from kb_ai.compile.fetch import FetchError, FetchPolicy, add_url
from kb_ai.store.kb import init_kb

from web_fakes import DripSite, FakeSite, article

LIMIT = 1_000_000
BOMB = 40_000_000  # bytes the bomb inflates to: forty times the limit


@pytest.fixture
def kb(tmp_path):
    init_kb(tmp_path / "kb")
    return tmp_path / "kb"


@pytest.fixture
def public_loopback(monkeypatch):
    """The server's address rule, told that 127.0.0.1 (the test's web server) is public."""
    real = public_web.is_public
    monkeypatch.setattr(public_web, "is_public", lambda ip: ip == ipaddress.ip_address("127.0.0.1") or real(ip))


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


@functools.cache
def _zeros(coding: str) -> bytes:
    return {"gzip": gzip.compress, "deflate": zlib.compress, "raw deflate": _raw_deflate}[coding](bytes(BOMB))


# (Content-Encoding, the body: the encodings applied in the header's order)
BOMBS = {
    "gzip": lambda: _zeros("gzip"),
    "deflate": lambda: _zeros("deflate"),
    "raw deflate": lambda: _zeros("raw deflate"),
    "gzip, gzip": lambda: gzip.compress(_zeros("gzip")),
    "deflate, gzip": lambda: gzip.compress(_zeros("deflate")),
    "gzip, deflate": lambda: _raw_deflate(_zeros("gzip")),
}


@pytest.mark.parametrize("label", list(BOMBS))
def test_a_compression_bomb_is_refused_at_the_limit_without_inflating_it(kb, label):
    body = BOMBS[label]()
    header = label.replace("raw deflate", "deflate")
    with FakeSite() as site:
        site.routes["/bomb"] = (200, {"Content-Type": "text/html", "Content-Encoding": header}, body)
        tracemalloc.start()
        try:
            with pytest.raises(FetchError, match=f"larger than {LIMIT:,} bytes"):
                add_url(kb / "raw", site.url + "/bomb", FetchPolicy(max_bytes=LIMIT))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert len(body) < 100_000
    assert peak < 3 * LIMIT  # the limit and a few pieces, never the 40 MB it inflates to
    assert not (kb / "raw" / "web").exists()


def _page(text: str) -> bytes:
    return article("Kettle guide", text).encode("utf-8")


ENCODED = [  # (Content-Encoding, how the page is encoded for it)
    pytest.param("gzip", gzip.compress, id="gzip"),
    pytest.param("x-gzip", gzip.compress, id="x-gzip"),
    pytest.param("deflate", zlib.compress, id="deflate"),  # zlib-wrapped, as RFC 9110 says
    pytest.param("Deflate", _raw_deflate, id="raw deflate"),  # as some servers send it and browsers accept
    pytest.param("identity", lambda page: page, id="identity"),
    pytest.param("gzip, gzip", lambda page: gzip.compress(gzip.compress(page)), id="gzip, gzip"),
    pytest.param("deflate, gzip", lambda page: gzip.compress(zlib.compress(page)), id="deflate, gzip"),
    pytest.param("gzip", lambda page: gzip.compress(page[:100]) + gzip.compress(page[100:]), id="two gzip members"),
]


@pytest.mark.parametrize("header, encode", ENCODED)
def test_an_encoded_page_is_decoded(kb, header, encode):
    text = "Descale the kettle every month with white vinegar."
    with FakeSite() as site:
        site.routes["/page"] = (200, {"Content-Type": "text/html", "Content-Encoding": header}, encode(_page(text)))
        added = add_url(kb / "raw", site.url + "/page")
    assert site.headers[0]["Accept-Encoding"] == "gzip, deflate"  # only what is decoded here
    assert added.title == "Kettle guide" and "white vinegar" in (kb / added.path).read_text()


@pytest.mark.parametrize("header, body, error", [  # brotli and zstd: no module here decodes them
    ("br", b"\x1b\x03\x00\xf8\xa5\x02", "content encoding 'br', which kaas does not decode"),
    ("gzip, br", b"\x1b\x03\x00\xf8\xa5\x02", "content encoding 'br'"),
    ("zstd", b"(\xb5/\xfd\x00", "content encoding 'zstd'"),
    ("compress", b"\x1f\x9d", "content encoding 'compress'"),
    # mtime=0: a parameter is part of the test's id, which must be the same in every process (xdist)
    ("gzip, gzip, gzip", gzip.compress(gzip.compress(gzip.compress(b"<p>hi</p>", mtime=0), mtime=0), mtime=0),
     "3 stacked content encodings"),
    ("gzip", b"\x1f\x8b\x08\x00not gzip at all", "the gzip body is damaged"),
    ("gzip", gzip.compress(b"<p>" + b"words " * 1000 + b"</p>", mtime=0)[:-20], "the gzip body ends before its end"),
    ("deflate", b"x", "the deflate body ends before its end"),
])
def test_an_encoding_that_is_not_decoded_or_a_damaged_body_is_refused(kb, header, body, error):
    with FakeSite() as site:
        site.routes["/page"] = (200, {"Content-Type": "text/html", "Content-Encoding": header}, body)
        with pytest.raises(FetchError, match=error):
            add_url(kb / "raw", site.url + "/page")
    assert not (kb / "raw" / "web").exists()


TIMEOUT = 0.6
MARGIN = 0.5
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
DRIPS = {
    "body": (HEAD + b"Content-Length: 100000\r\n\r\n<p>", b"a" * 1000),
    "headers": (HEAD, b"X-Slow: " + b"a" * 1000),
    "status line": (b"", b"HTTP/1.1 200 OK" + b" " * 1000),
}


@pytest.mark.slow  # real deadlines and time bounds: flaky on a loaded machine
@pytest.mark.parametrize("policy", ["command line", "server"])
@pytest.mark.parametrize("part", list(DRIPS))
def test_a_server_dripping_a_byte_at_a_time_is_cut_at_the_deadline(kb, part, policy, request):
    if policy == "server":
        request.getfixturevalue("public_loopback")
    head, drip = DRIPS[part]
    with DripSite(head, drip, every=0.2) as site:
        started = time.monotonic()
        with pytest.raises(FetchError, match=f"not fetched within {TIMEOUT:g} s"):
            add_url(kb / "raw", site.url + "/page", FetchPolicy(allow_private=policy == "command line", timeout=TIMEOUT))
        took = time.monotonic() - started
    assert site.requests == ["GET /page HTTP/1.1"]
    assert TIMEOUT - 0.05 < took < TIMEOUT + MARGIN


@pytest.mark.slow  # real deadlines and time bounds: flaky on a loaded machine
def test_the_deadline_holds_through_a_proxy(kb, monkeypatch):
    """The command line uses the environment's proxy: the proxy's connection keeps the deadline."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    head, drip = DRIPS["body"]
    with DripSite(head, drip) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        started = time.monotonic()
        with pytest.raises(FetchError, match="not fetched within"):
            add_url(kb / "raw", "http://far.example/page", FetchPolicy(timeout=TIMEOUT))
        took = time.monotonic() - started
    assert proxy.requests == ["GET http://far.example/page HTTP/1.1"]
    assert took < TIMEOUT + MARGIN


@pytest.mark.slow  # real deadlines and time bounds: flaky on a loaded machine
@pytest.mark.parametrize("policy", ["command line", "server"])
def test_a_name_lookup_that_hangs_is_cut_at_the_deadline(kb, monkeypatch, policy, request):
    if policy == "server":
        request.getfixturevalue("public_loopback")
    release = threading.Event()
    real = socket.getaddrinfo

    def slow(host, port, *args, **kwargs):
        if host != "slow.example":
            return real(host, port, *args, **kwargs)
        release.wait(3)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    monkeypatch.setattr(socket, "getaddrinfo", slow)
    with FakeSite() as site:
        site.page("/page", article("Kettle guide", "Descale the kettle every month."))
        started = time.monotonic()
        try:
            with pytest.raises(FetchError, match="not fetched within"):
                add_url(kb / "raw", f"http://slow.example:{site.port}/page",
                        FetchPolicy(allow_private=policy == "command line", timeout=TIMEOUT))
            took = time.monotonic() - started
        finally:
            release.set()
    assert took < TIMEOUT + MARGIN and site.requests == []
