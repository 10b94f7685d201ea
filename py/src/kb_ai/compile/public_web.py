"""Connections to public web servers only, for the server's URL fetch (``compile/fetch.py``).

A host name is looked up once per connection; every address it resolves to must be public
(not loopback, private, link-local, multicast, reserved...), and the connection goes to one of
those very addresses. Nothing looks the name up a second time, so a DNS answer that changes
between the check and the connect (DNS rebinding: a public address for the check, then
127.0.0.1 or 10.x for the connect) cannot steer the request anywhere that was not checked.
The URL keeps its name: the ``Host`` header is the name, and for https the TLS server name
(SNI) and the certificate check are for the name too, as for any other connection.

``PublicOnlyTransport`` is an ``httpx.HTTPTransport`` whose connection pool opens its TCP
connections through ``_CheckedBackend``; every new connection (each redirect hop to a host not
already connected to) is checked again. No proxy is used (a proxy would connect by name).
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any, Iterable

import httpcore
import httpx

from kb_ai.errors import KaasError


class NotPublicError(KaasError):
    """A host that resolves to a local or private address, or does not resolve."""

    code = "fetch_refused"
    exit_code = 2


def is_public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """A globally routable unicast address (an IPv4-mapped IPv6 address as its IPv4 one)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def refuse_unless_public(host: str, address: str) -> None:
    """``NotPublicError`` unless ``address`` (``host``'s) is public."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if not is_public(ip):
        raise NotPublicError(f"{host} is a local or private address ({ip}); this server only fetches public web pages")


def public_addresses(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to, looked up once; ``NotPublicError`` unless all of
    them are public (an answer mixing a public and a private address is refused whole)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise NotPublicError(f"cannot resolve {host}: {exc}") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise NotPublicError(f"cannot resolve {host}: no address")
    for address in addresses:
        refuse_unless_public(host, address)
    return addresses


class _CheckedBackend(httpcore.NetworkBackend):
    """httpcore's own blocking backend, given the checked address instead of the name."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        failure: Exception | None = None
        for address in public_addresses(host, port):
            try:  # an IP address: socket.create_connection does not look anything up
                return self._inner.connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                               socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("no Unix sockets: public web servers only")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class PublicOnlyTransport(httpx.HTTPTransport):
    """An httpx transport that connects only to public addresses, each the very one it checked.
    ``verify``: as httpx's (True: the system's certificate authorities, or an ``ssl.SSLContext``)."""

    def __init__(self, verify: Any = True) -> None:
        ssl_context = httpx.create_ssl_context(verify=verify, trust_env=False)
        super().__init__(verify=ssl_context, trust_env=False)
        # httpx's HTTPTransport sends every request through ``self._pool`` and takes no network
        # backend of its own: the same pool, built with the checking backend (tested end to end
        # in test_fetch_rebinding.py, so an httpx that changes this fails there, not silently).
        self._pool = httpcore.ConnectionPool(ssl_context=ssl_context, network_backend=_CheckedBackend())
