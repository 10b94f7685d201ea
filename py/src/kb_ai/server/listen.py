"""The listening socket of ``kaas serve``, bound before anything says the server is up.

uvicorn binds inside ``run()`` and answers a busy port with a log line and ``sys.exit``, after
kaas has already printed "serving at ...". Binding here first turns a busy or forbidden address
into one error a person can act on, and the real port (``--port 0``) is known before it is shown.
"""

from __future__ import annotations

import errno
import socket

from kb_ai.errors import ListenError


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` as uvicorn binds it (``SO_REUSEADDR``, inheritable for
    worker processes); ``ListenError`` naming the address and the cause when it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family=family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            why = "the port is in use (another server? choose one with --port)"
        elif exc.errno == errno.EACCES:
            why = "permission denied (ports below 1024 need privileges; choose one with --port)"
        else:
            why = exc.strerror or str(exc)
        raise ListenError(f"cannot listen on {shown}: {why}") from None
    sock.set_inheritable(True)
    return sock


def bound_port(sock: socket.socket) -> int:
    """The port the socket listens on (the one the OS chose for ``--port 0``)."""
    return int(sock.getsockname()[1])
