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
