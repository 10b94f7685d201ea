"""The server's URL fetch connects to the very address it checked (DNS rebinding).

A resolver stub stands for an attacker's DNS: a name answers a "public" address the first time
and a local one (127.0.0.2, where an internal service listens on the same port) on any later
lookup. 127.0.0.1 stands for the public web server: the address rule is told to treat it as
public, and only it (``public_web.is_public``); every other address is judged by the real rule.
No test reaches the internet.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl

import httpx
import pytest

from kb_ai.compile import public_web
from kb_ai.compile.fetch import FetchError, FetchPolicy, add_url
from kb_ai.store.kb import init_kb

from web_fakes import FakeSite, article

PUBLIC = "127.0.0.1"   # the public web server, as far as the address rule is told
INSIDE = "127.0.0.2"   # an internal service the rebinding answer points to


@pytest.fixture
def kb(tmp_path):
    init_kb(tmp_path / "kb")
    return tmp_path / "kb"


@pytest.fixture
def dns(monkeypatch):
    """``dns.names[name] = [first answer, later answer]``; ``dns.lookups[name]``: how often the
    name was looked up. Other names resolve as usual."""
    real = socket.getaddrinfo
    real_is_public = public_web.is_public

    class Dns:
        names: dict[str, list[str]] = {}
        lookups: dict[str, int] = {}

    def getaddrinfo(host, port, *args, **kwargs):
        if host not in Dns.names:
            return real(host, port, *args, **kwargs)
        count = Dns.lookups.get(host, 0)
        Dns.lookups[host] = count + 1
        answers = Dns.names[host]
        address = answers[min(count, len(answers) - 1)]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(public_web, "is_public", lambda ip: ip == ipaddress.ip_address(PUBLIC) or real_is_public(ip))
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    return Dns


def _sites(tls=None, inside_tls=None):
    """The public site on 127.0.0.1 and the internal one on 127.0.0.2, on the same port."""
    public = FakeSite(tls=tls)
    inside = FakeSite(host=INSIDE, port=public.port, tls=inside_tls)
    inside.page("/page", article("Internal admin", "The internal admin console lists every secret token."))
    return public, inside


def test_a_name_that_rebinds_after_the_check_is_fetched_from_the_checked_address(kb, dns):
    public, inside = _sites()
    dns.names["rebind.example"] = [PUBLIC, INSIDE]
    with public, inside:
        public.page("/page", article("Kettle guide", "Descale the kettle every month with white vinegar."))
        added = add_url(kb / "raw", f"http://rebind.example:{public.port}/page", FetchPolicy.for_server())
        assert dns.lookups["rebind.example"] == 1  # the connect used the checked answer, no second lookup
        # A later fetch is a new connection, looked up and checked again: the name is now local.
        with pytest.raises(FetchError, match=r"rebind\.example is a local or private address \(127\.0\.0\.2\)"):
            add_url(kb / "raw", f"http://rebind.example:{public.port}/page", FetchPolicy.for_server())
    assert inside.requests == []  # the internal service never saw a request
    assert public.requests == ["/page"]
    assert public.hosts == [f"rebind.example:{public.port}"]  # the URL keeps its name
    assert "white vinegar" in (kb / added.path).read_text()


def test_a_redirect_hop_is_checked_when_it_connects(kb, dns):
    public, inside = _sites()
    dns.names["rebind.example"] = [PUBLIC]
    dns.names["inside.example"] = [INSIDE]
    with public, inside:
        public.redirect("/page", f"http://inside.example:{public.port}/page")
        with pytest.raises(FetchError, match=r"inside\.example is a local or private address \(127\.0\.0\.2\)"):
            add_url(kb / "raw", f"http://rebind.example:{public.port}/page", FetchPolicy.for_server())
    assert public.requests == ["/page"] and inside.requests == []
    assert not (kb / "raw" / "web").exists()


def test_an_answer_mixing_public_and_private_addresses_is_refused_whole(kb, dns, monkeypatch):
    public, inside = _sites()
    real = socket.getaddrinfo

    def both(host, port, *args, **kwargs):
        if host == "mixed.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in (PUBLIC, INSIDE)]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", both)
    with public, inside:
        public.page("/page", article("Kettle guide", "Descale the kettle every month."))
        with pytest.raises(FetchError, match="local or private address"):
            add_url(kb / "raw", f"http://mixed.example:{public.port}/page", FetchPolicy.for_server())
    assert public.requests == [] and inside.requests == []


def test_local_addresses_are_refused_however_the_url_spells_them(kb):
    """The real address rule, no stub: names and spellings that resolve to this machine."""
    with FakeSite() as site:
        site.page("/page", article("Admin", "The admin page of this machine."))
        port = site.port
        for url in (f"http://127.0.0.1:{port}/page", f"http://localhost:{port}/page",
                    f"http://2130706433:{port}/page", f"http://[::ffff:127.0.0.1]:{port}/page",
                    f"http://0.0.0.0:{port}/page"):
            with pytest.raises(FetchError, match="local or private address|cannot resolve"):
                add_url(kb / "raw", url, FetchPolicy.for_server())
        assert site.requests == []


# IPv6 forms that carry an IPv4 address (and are routed to it): 127.0.0.1 and 169.254.169.254 (a
# cloud's metadata service) in each. On a NAT64 network 64:ff9b::7f00:1 reaches 127.0.0.1.
CARRYING_LOCAL = [
    "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe",          # NAT64, the well-known prefix
    "64:ff9b:1::7f00:1", "64:ff9b:1::a9fe:a9fe",      # NAT64, local use
    "64:ff9b:1:1::808:808",                            # local use, not the /96 layout: refused whole
    "2002:7f00:1::1", "2002:a9fe:a9fe::1",             # 6to4
    "::127.0.0.1", "::169.254.169.254",                # IPv4-compatible
    "::ffff:0:7f00:1", "::ffff:0:a9fe:a9fe",           # IPv4-translated
    "::ffff:127.0.0.1", "::ffff:169.254.169.254",      # IPv4-mapped
    "2001:0:808:808:0:0:80ff:fffe",                    # Teredo, client 127.0.0.1 (XOR-ed)
    "2001:0:a9fe:a9fe:0:0:f7f7:f7f7",                  # Teredo, server 169.254.169.254
]
CARRYING_PUBLIC = ["64:ff9b::808:808", "2002:808:808::1", "::ffff:8.8.8.8", "::ffff:0:808:808", "2001:4860:4860::8888"]


def test_an_ipv6_address_carrying_an_ipv4_one_is_judged_by_that_ipv4_address():
    for address in CARRYING_LOCAL:
        assert not public_web.is_public(ipaddress.ip_address(address)), address
    for address in CARRYING_PUBLIC:
        assert public_web.is_public(ipaddress.ip_address(address)), address


def test_a_local_address_carried_in_ipv6_is_refused_before_connecting(kb, monkeypatch):
    """The real address rule: a literal in the URL, and a name whose AAAA answer is one."""
    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, *a, **k: (
        [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (host[5:-8].replace("_", ":"), port, 0, 0))]
        if host.startswith("aaaa-") else real(host, port, *a, **k)))
    for address in CARRYING_LOCAL:
        for url in (f"http://[{address}]:8080/page", f"http://aaaa-{address.replace(':', '_')}.example:8080/page"):
            with pytest.raises(FetchError, match=r"is a local or private address \("):
                add_url(kb / "raw", url, FetchPolicy.for_server())


def _certificate(tmp_path, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(a server context with a self-signed certificate for ``name``, a client context trusting it)."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_file, key_file)
    client = ssl.create_default_context(cafile=str(cert_file))
    return server, client


def test_https_is_verified_for_the_name_while_connecting_to_the_checked_address(tmp_path, dns):
    server_tls, client_tls = _certificate(tmp_path, "rebind.example")
    names: list[str | None] = []
    server_tls.sni_callback = lambda sock, name, ctx: names.append(name)
    public, inside = _sites(tls=server_tls, inside_tls=server_tls)
    dns.names["rebind.example"] = [PUBLIC, INSIDE]
    with public, inside:
        public.page("/page", "<p>hello over TLS</p>")
        with httpx.Client(transport=public_web.PublicOnlyTransport(verify=client_tls)) as client:
            response = client.get(f"https://rebind.example:{public.port}/page")
    assert response.status_code == 200 and response.text == "<p>hello over TLS</p>"
    assert names == ["rebind.example"]  # SNI: the name, not the address connected to
    assert public.hosts == [f"rebind.example:{public.port}"] and inside.requests == []
    assert dns.lookups["rebind.example"] == 1
