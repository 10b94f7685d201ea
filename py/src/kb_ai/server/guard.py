"""Every request passes one guard: host allow-list, same-origin writes, bearer token, and
security headers on every response.

- Host: a server bound to loopback answers only to loopback host names, so a web page that
  rebinds its DNS name to 127.0.0.1 cannot read the wiki through the visitor's browser.
- Origin: a request that changes something (POST/PUT/DELETE) must come from the UI's own origin
  when the browser says where it comes from.
- Token: with ``KAAS_API_TOKEN`` set or users configured in ``kaas.toml`` (``kb_ai/store/users.py``),
  every ``/api``, ``/mcp`` and ``/wiki`` route needs ``Authorization: Bearer <token>`` (compared in
  constant time), and nothing else: never a cookie. Cookies ignore ports, so a token in a cookie
  would be sent to every other server on the same host name and readable by the pages it serves.
  A browser that opens a ``/wiki`` page without the header gets a page that links to the same
  article in the app (``/#/wiki/<path>``), which sends the header. The token's reader (its
  groups) is put in the request scope (``reader_of``): every route serves only what that reader
  may read.
- Headers: a strict Content-Security-Policy (scripts and styles only from this server, no remote
  images), no sniffing, no framing, no referrer; and ``Cache-Control: no-store`` on every
  response of ``/api``, ``/mcp`` and ``/wiki`` (wiki text, or what one reader may see).
"""

from __future__ import annotations

import html
import json
from urllib.parse import quote, urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kb_ai.store.access import OWNER, Reader
from kb_ai.store.users import UserDirectory

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
UNSAFE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
PROTECTED_PREFIXES = ("/api", "/mcp")  # /mcp: the MCP endpoint, when mounted next to the API
READER_KEY = "kaas.reader"


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    return any(path == prefix or path.startswith(prefix + "/") for prefix in prefixes)


def carries_wiki_content(path: str) -> bool:
    """Routes whose responses carry wiki text or a reader's own view (catalog, pages, answers,
    MCP, and their errors): every one of them is sent with ``Cache-Control: no-store``."""
    return _under(path, (*PROTECTED_PREFIXES, "/wiki"))


def reader_of(scope_or_request) -> Reader:
    """The reader a request was authenticated as (the owner when the server has no users)."""
    scope = getattr(scope_or_request, "scope", scope_or_request)
    return scope.get(READER_KEY, OWNER)

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key == name:
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                return value.decode("latin-1")
    return None


def _host_name(host_header: str) -> str:
    if host_header.startswith("["):
        return host_header.split("]", 1)[0] + "]"
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def _netloc(url: str) -> str | None:
    """``host[:port]`` of a URL, lower-cased; None when it does not parse (``http://[::1``)."""
    try:
        return urlsplit(url).netloc.lower()
    except ValueError:
        return None


def bearer_token(scope: Scope) -> str | None:
    value = _header(scope, b"authorization")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


class RequestGuard:
    """Pure ASGI middleware (no buffering, so SSE streams pass through untouched)."""

    def __init__(self, app: ASGIApp, *, users: UserDirectory, allowed_hosts: list[str] | None):
        self.app = app
        self.users = users
        self.allowed_hosts = None if allowed_hosts is None else {h.lower() for h in allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            status, code, message = refusal
            path: str = scope.get("path", "")
            if code == "unauthorized" and (path == "/wiki" or path.startswith("/wiki/")):
                await _send_wiki_login_page(send, path.removeprefix("/wiki").lstrip("/"))
            else:
                await _send_json_error(send, status, code, message, bearer=(code == "unauthorized"))
            return

        private = carries_wiki_content(scope.get("path", ""))

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                if private:  # wiki text or one reader's view: never kept by a browser or a proxy
                    headers = [(k, v) for k, v in headers if k.lower() != b"cache-control"]
                    headers.append((b"cache-control", b"no-store"))
                present = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in SECURITY_HEADERS if k not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        if self.allowed_hosts is not None:
            host = _host_name((_header(scope, b"host") or "").lower())
            if host not in self.allowed_hosts:
                return 421, "bad_host", "this server answers only to its own host names"
        path: str = scope.get("path", "")
        if scope.get("method", "GET") in UNSAFE_METHODS:
            origin = _header(scope, b"origin")
            host = (_header(scope, b"host") or "").lower()
            if origin is not None and (origin == "null" or _netloc(origin) != host):
                return 403, "bad_origin", "cross-origin requests may not change anything"
        api = _under(path, PROTECTED_PREFIXES)
        wiki = _under(path, ("/wiki",))
        if not (api or wiki):
            return None
        if not self.users.required():
            scope[READER_KEY] = OWNER  # no tokens configured: a loopback server for its owner
            return None
        token = bearer_token(scope)
        reader = self.users.reader_for(token)
        if reader is None:
            if token:  # the person typed one: tell them it is that token, not a missing one
                return 401, "unauthorized", "that token was refused (Authorization: Bearer <token>)"
            return 401, "unauthorized", "this server needs an API token (Authorization: Bearer <token>)"
        scope[READER_KEY] = reader
        return None


async def _send_json_error(send: Send, status: int, code: str, message: str, *, bearer: bool) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"cache-control", b"no-store"), *SECURITY_HEADERS]
    if bearer:
        headers.append((b"www-authenticate", b'Bearer realm="kaas"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_wiki_login_page(send: Send, rel: str) -> None:
    """401 for a ``/wiki`` page opened without the token (a link, a new tab, a bookmark): the same
    article in the app, which holds the token and sends it as a header."""
    target = html.escape("/#/wiki" + (f"/{quote(rel, safe='/')}" if rel else ""))
    body = (
        '<!doctype html>\n<html lang="en">\n<head>\n  <meta charset="utf-8">\n'
        '  <meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '  <title>Token needed · KaaS</title>\n  <link rel="stylesheet" href="/static/app.css">\n</head>\n'
        '<body>\n  <main class="page-shell">\n    <div class="empty-state">\n'
        '      <h1>This page needs the API token</h1>\n'
        '      <p class="lede">This server asks for a token, which the app keeps and sends with each of its '
        'requests (never in a cookie), so a plain link cannot open the page.</p>\n'
        f'      <p><a id="open-in-app" href="{target}">Open this page in the app</a></p>\n'
        '    </div>\n  </main>\n</body>\n</html>\n'
    ).encode("utf-8")
    headers = [(b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(body)).encode()),
               (b"cache-control", b"no-store"), (b"www-authenticate", b'Bearer realm="kaas"'), *SECURITY_HEADERS]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})
