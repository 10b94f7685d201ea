"""The network under a URL fetch (``compile/fetch.py``): one deadline, and public servers only.

**The deadline.** Every step of a fetch runs against the clock of its one deadline: the name
lookup (in a helper thread, waited for no longer than the time left), each TCP connect, the TLS
handshake and every socket read and write (each given at most the time left, and refused once
it is gone). So a server that sends one byte now and then, in its headers or its body, cannot
stretch a fetch past its deadline: the read waiting when the time is up fails with a timeout.

**Public only** (``public_only=True``, the server's policy). A host name is looked up once per
connection; every address it resolves to must be public (``is_public``: not loopback, private,
link-local, multicast, reserved..., and an IPv6 address that carries an IPv4 one, such as
NAT64's ``64:ff9b::7f00:1``, only if that IPv4 address is public), and the connection goes to
one of those very addresses. Nothing looks the name up a second time, so a DNS answer that
changes between the check and the connect (DNS rebinding: a public address for the check, then
127.0.0.1 or 10.x for the connect) cannot steer the request anywhere that was not checked.
The URL keeps its name: the ``Host`` header is the name, and for https the TLS server name
(SNI) and the certificate check are for the name too, as for any other connection. No proxy is
used then (a proxy would connect by name).

``FetchTransport`` is an ``httpx.HTTPTransport`` whose connection pool opens its connections
through ``FetchBackend``; every new connection (each redirect hop to a host not already
connected to) is looked up and checked again. ``proxy_mounts`` gives the environment's proxies
(the command line's fetch) the same backend, so the deadline holds through a proxy too.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from typing import Any, Iterable

import httpcore
import httpx

from kb_ai.errors import KaasError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# IPv6 forms that stand for an IPv4 address: the address is reached as that IPv4 one.
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated; ::1 and :: are 0.0.0.1 and 0.0.0.0 here
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # SIIT (RFC 2765)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # the well-known prefix (RFC 6052): the last 32 bits
# Local-use NAT64 (RFC 8215): where the IPv4 address sits depends on the local network's prefix
# length, so only the /96 layout (the last 32 bits) is read; any other address in it is refused.
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_NAT64_LOCAL_96 = ipaddress.ip_network("64:ff9b:1::/96")


class NotPublicError(KaasError):
    """A host that resolves to a local or private address."""

    code = "fetch_refused"
    exit_code = 2


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address] | None:
    """The IPv4 addresses an IPv6 address carries and is routed by (IPv4-mapped, -compatible
    and -translated, NAT64, 6to4, Teredo's server and client), or None for a plain IPv6 address."""
    low = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.ipv4_mapped is not None or ip in _IPV4_COMPATIBLE or ip in _IPV4_TRANSLATED or ip in _NAT64:
        return [low]
    if ip in _NAT64_LOCAL:
        return [low] if ip in _NAT64_LOCAL_96 else [ipaddress.IPv4Address(0)]  # 0.0.0.0: refused
    if ip.sixtofour is not None:
        return [ip.sixtofour]
    if ip.teredo is not None:
        return list(ip.teredo)  # (server, client): ipaddress undoes the client's XOR
    return None


def is_public(ip: IPAddress) -> bool:
    """A globally routable unicast address. An IPv6 address carrying IPv4 ones (``embedded_ipv4``)
    is public only if each of them is, by this same rule; an IPv4-mapped, -compatible or
    -translated one is judged as its IPv4 address alone."""
    if isinstance(ip, ipaddress.IPv6Address) and (carried := embedded_ipv4(ip)) is not None:
        if not all(is_public(v4) for v4 in carried):
            return False
        if ip.ipv4_mapped is not None or ip in _IPV4_COMPATIBLE or ip in _IPV4_TRANSLATED:
            return True
    return ip.is_global and not ip.is_multicast


def refuse_unless_public(host: str, address: str) -> None:
    """``NotPublicError`` unless ``address`` (``host``'s) is public."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if not is_public(ip):
        raise NotPublicError(f"{host} is a local or private address ({ip}); this server only fetches public web pages")


def lookup(host: str, port: int, timeout: float | None = None) -> list[str]:
    """Every address ``host`` resolves to, looked up once, waited for at most ``timeout``
    seconds (``httpcore.ConnectTimeout``; the lookup itself goes on in its daemon thread until
    the resolver gives up); ``httpcore.ConnectError`` if it does not resolve."""
    answer: list = []

    def resolve() -> None:
        try:
            answer.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except Exception as exc:  # noqa: BLE001 (handed to the waiting thread)
            answer.append(exc)

    worker = threading.Thread(target=resolve, name="kaas-lookup", daemon=True)
    worker.start()
    worker.join(timeout)
    if not answer:
        raise httpcore.ConnectTimeout(f"cannot resolve {host} within the time left")
    if isinstance(answer[0], (socket.gaierror, UnicodeError)):
        raise httpcore.ConnectError(f"cannot resolve {host}: {answer[0]}")
    if isinstance(answer[0], Exception):
        raise answer[0]
    addresses = list(dict.fromkeys(str(info[4][0]) for info in answer[0]))
    if not addresses:
        raise httpcore.ConnectError(f"cannot resolve {host}: no address")
    return addresses


def public_addresses(host: str, port: int, timeout: float | None = None) -> list[str]:
    """``lookup``, and ``NotPublicError`` unless every address is public (an answer mixing a
    public and a private address is refused whole)."""
    addresses = lookup(host, port, timeout)
    for address in addresses:
        refuse_unless_public(host, address)
    return addresses


class FetchBackend(httpcore.NetworkBackend):
    """httpcore's own blocking backend under a deadline (``time.monotonic()`` seconds, None: no
    deadline), connecting to the looked-up addresses (checked public if ``public_only``)."""

    def __init__(self, *, public_only: bool, deadline: float | None = None) -> None:
        self._inner = httpcore.SyncBackend()
        self.public_only = public_only
        self.deadline = deadline

    def time_left(self, timeout: float | None, expired: type[Exception]) -> float | None:
        """``timeout`` cut to the time left before the deadline; ``expired`` once none is left."""
        if self.deadline is None:
            return timeout
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise expired("the deadline of the fetch has passed")
        return left if timeout is None else min(timeout, left)

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        resolve = public_addresses if self.public_only else lookup
        failure: Exception | None = None
        for address in resolve(host, port, self.time_left(timeout, httpcore.ConnectTimeout)):
            try:  # an IP address: socket.create_connection does not look anything up
                stream = self._inner.connect_tcp(address, port, timeout=self.time_left(timeout, httpcore.ConnectTimeout),
                                                 local_address=local_address, socket_options=socket_options)
                return _DeadlineStream(stream, self)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("no Unix sockets: web servers only")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read, write and TLS handshake ends by the backend's deadline."""

    def __init__(self, inner: httpcore.NetworkStream, backend: FetchBackend) -> None:
        self._inner, self._backend = inner, backend

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._backend.time_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._backend.time_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        inner = self._inner.start_tls(ssl_context, server_hostname, self._backend.time_left(timeout, httpcore.ConnectTimeout))
        return _DeadlineStream(inner, self._backend)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class FetchTransport(httpx.HTTPTransport):
    """An httpx transport whose connections are ``FetchBackend``'s. ``verify``: as httpx's
    (True: the system's certificate authorities, or an ``ssl.SSLContext``); ``trust_env``: read
    ``SSL_CERT_FILE``/``SSL_CERT_DIR``; ``proxy``: connect through this proxy (not public_only)."""

    def __init__(self, *, public_only: bool, deadline: float | None = None, verify: Any = True,
                 trust_env: bool = False, proxy: str | None = None) -> None:
        assert not (public_only and proxy), "a proxy connects by name: not for public_only"
        ssl_context = httpx.create_ssl_context(verify=verify, trust_env=trust_env)
        super().__init__(verify=ssl_context, trust_env=False, proxy=proxy)
        # httpx's HTTPTransport sends every request through ``self._pool`` (a connection pool, or
        # a proxy's, built above) and takes no network backend of its own: the pool is given this
        # one (tested end to end in test_fetch_rebinding.py and test_fetch_limits.py, so an httpx
        # or httpcore that changes this fails there, not silently).
        assert isinstance(getattr(self._pool, "_network_backend", None), httpcore.NetworkBackend)
        self._pool._network_backend = FetchBackend(public_only=public_only, deadline=deadline)


class PublicOnlyTransport(FetchTransport):
    """A ``FetchTransport`` that connects only to public addresses, each the very one it checked."""

    def __init__(self, verify: Any = True, deadline: float | None = None) -> None:
        super().__init__(public_only=True, deadline=deadline, verify=verify)


def proxy_mounts(deadline: float | None) -> dict[str, FetchTransport | None]:
    """httpx ``mounts`` for the environment's proxies (``HTTP(S)_PROXY``, ``ALL_PROXY``,
    ``NO_PROXY``, as httpx reads them), each a ``FetchTransport`` under ``deadline``."""
    from httpx._utils import get_environment_proxies  # noqa: PLC0415 (httpx's own reading of them)

    return {pattern: None if url is None else FetchTransport(public_only=False, deadline=deadline, trust_env=True, proxy=url)
            for pattern, url in get_environment_proxies().items()}
