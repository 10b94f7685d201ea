"""A tiny web site on 127.0.0.1 for ``kaas add URL`` and the UI's URL ingest: routes map a path
to (status, headers, body); every request is recorded. No test reaches the internet."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeSite:
    """``host``/``port``: where it listens (another loopback address such as 127.0.0.2 stands
    for a second machine); ``tls``: an ``ssl.SSLContext`` to serve https with. ``requests``:
    the paths asked for; ``hosts``: each request's ``Host`` header; ``headers``: each request's
    headers (a dict, names as sent)."""

    def __init__(self, routes: dict[str, tuple[int, dict[str, str], bytes]] | None = None, *,
                 host: str = "127.0.0.1", port: int = 0, tls=None):
        self.routes = dict(routes or {})
        self.requests: list[str] = []
        self.hosts: list[str | None] = []
        self.headers: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                outer.requests.append(self.path)
                outer.hosts.append(self.headers.get("Host"))
                outer.headers.append(dict(self.headers.items()))
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


class DripSite:
    """A web server on 127.0.0.1 that answers every request with ``head`` at once, then ``drip``
    one byte every ``every`` seconds, for ``for_at_most`` seconds, then closes the connection.
    ``requests``: each request's first line."""

    def __init__(self, head: bytes, drip: bytes, *, every: float = 0.2, for_at_most: float = 3.0):
        self.head, self.drip, self.every, self.for_at_most = head, drip, every, for_at_most
        self.requests: list[str] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)  # so that the serving thread sees the stop
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                data = conn.recv(4096)
                if not data:
                    return
                request += data
            self.requests.append(request.split(b"\r\n", 1)[0].decode("latin-1"))
            until = time.monotonic() + self.for_at_most
            try:
                conn.sendall(self.head)
                for byte in self.drip:
                    if self._stop.wait(self.every) or time.monotonic() > until:
                        return
                    conn.sendall(bytes([byte]))
            except OSError:  # the client gave up
                return

    def __enter__(self) -> "DripSite":
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        time.sleep(0.06)
        self.listener.close()


ARTICLE_HTML = """<!doctype html><html><head><title>{title}</title></head><body>
<nav>Home | Blog | About</nav>
<article><h1>{heading}</h1>
<p>{text}</p>
<p>The warranty covers parts and labour for two years from the date of purchase, and it can be
extended by one more year when the product is registered within thirty days.</p>
</article><footer>Copyright Example Corp</footer></body></html>"""


def article(title: str, text: str, heading: str | None = None) -> str:
    return ARTICLE_HTML.format(title=title, heading=heading or title, text=text)
