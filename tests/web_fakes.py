"""A tiny web site on 127.0.0.1 for ``kaas add URL`` and the UI's URL ingest: routes map a path
to (status, headers, body); every request is recorded. No test reaches the internet."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeSite:
    """``host``/``port``: where it listens (another loopback address such as 127.0.0.2 stands
    for a second machine); ``tls``: an ``ssl.SSLContext`` to serve https with. ``requests``:
    the paths asked for; ``hosts``: each request's ``Host`` header."""

    def __init__(self, routes: dict[str, tuple[int, dict[str, str], bytes]] | None = None, *,
                 host: str = "127.0.0.1", port: int = 0, tls=None):
        self.routes = dict(routes or {})
        self.requests: list[str] = []
        self.hosts: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                outer.requests.append(self.path)
                outer.hosts.append(self.headers.get("Host"))
                status, headers, body = outer.routes.get(self.path, (404, {"Content-Type": "text/plain"}, b"no"))
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if "Content-Length" not in headers:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.port = self.httpd.server_address[1]
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"{'https' if tls is not None else 'http'}://{host}:{self.port}"

    def page(self, path: str, html: str, kind: str = "text/html; charset=utf-8") -> str:
        self.routes[path] = (200, {"Content-Type": kind}, html.encode("utf-8"))
        return self.url + path

    def redirect(self, path: str, to: str, status: int = 302) -> str:
        self.routes[path] = (status, {"Location": to}, b"")
        return self.url + path

    def __enter__(self) -> "FakeSite":
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


ARTICLE_HTML = """<!doctype html><html><head><title>{title}</title></head><body>
<nav>Home | Blog | About</nav>
<article><h1>{heading}</h1>
<p>{text}</p>
<p>The warranty covers parts and labour for two years from the date of purchase, and it can be
extended by one more year when the product is registered within thirty days.</p>
</article><footer>Copyright Example Corp</footer></body></html>"""


def article(title: str, text: str, heading: str | None = None) -> str:
    return ARTICLE_HTML.format(title=title, heading=heading or title, text=text)
