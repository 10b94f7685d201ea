"""Ask a running ``kaas serve`` of the same knowledge base instead of answering in-process.

A fresh ``kaas ask`` process pays for its imports (the model client alone takes seconds) and,
on a large wiki, for loading the catalog and the keyword index. ``kaas serve`` has all of that
loaded, so when one is running for this KB with the same model, the CLI sends the question to
it over loopback and prints the same events. Standard library only: this path must import fast.

``kaas serve`` announces itself in ``.kaas/server.json`` (URL, pid, model, and a secret made
for this run) while it runs: written atomically, readable by its owner only (0600). An
announcement can outlive its server (``kill -9``), and whatever listens on its port later — a
process that reused the pid, another program — is not that server. So before anything of the
question (or the API token) is sent, the server must prove it holds the secret: ``kaas ask``
sends a random challenge to ``GET /healthz?challenge=…`` and checks the HMAC the server returns.
No proof, no question: the answer is made in-process, with a notice. The question then goes on
the same connection (no reconnect in between).

Every remote call is bounded: the connection, each read (``READ_TIMEOUT``: the server sends a
keep-alive comment every 15 s while it works) and the whole answer (``deadline``). When nothing
of the answer came yet, the question is answered in-process; a stall after the answer started is
an error that keeps what came.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import os
import re
import secrets
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

from kb_ai.files import DamagedFileError, read_state_json

log = logging.getLogger(__name__)

SERVER_FILE = "server.json"
CONNECT_TIMEOUT = 2.0
PROOF_TIMEOUT = 5.0    # /healthz answers at once; a listener that does not is not our server
READ_TIMEOUT = 60.0    # per read while the answer streams (the server pings every 15 s)
MAX_LINE_BYTES = 1_000_000  # one SSE line; the server's events are far smaller
MAX_EVENT_BYTES = 4_000_000
_SECRET = re.compile(r"[0-9a-f]{64}")
_PROOF_LABEL = b"kaas serve proof\n"


class ServerUnavailable(Exception):
    """The announced server could not take the question (before any event was received): the
    caller answers locally instead. ``notice``: the person should be told why (an impostor, a
    stall), not just the log (a server that is simply gone)."""

    def __init__(self, message: str, *, notice: bool = False):
        super().__init__(message)
        self.notice = notice


def new_secret() -> str:
    """A secret for one run of ``kaas serve`` (hex): only it and the announcement's reader know it."""
    return secrets.token_hex(32)


def proof(secret: str, challenge: str) -> str:
    """What the server answers to ``challenge``: an HMAC only the holder of ``secret`` can make."""
    return hmac.new(bytes.fromhex(secret), _PROOF_LABEL + challenge.encode("ascii"), hashlib.sha256).hexdigest()


def valid_challenge(challenge: str | None) -> bool:
    return bool(challenge) and re.fullmatch(r"[0-9a-f]{32,128}", challenge) is not None


def announcement(url: str, model: str | None, secret: str) -> dict[str, Any]:
    return {"url": url, "pid": os.getpid(), "model": model or None, "secret": secret}


def running_server(state_dir: Path, model: str | None) -> dict[str, Any] | None:
    """The announced server for this KB, if the announcement is ours (same user, private), holds
    a secret, its process is alive and ours, it is on loopback and it answers with ``model``.
    Whether the listener on its port really is that server is checked by ``ask_events_remote``."""
    file = state_dir / SERVER_FILE
    try:
        info_stat = file.stat()
        if hasattr(os, "getuid") and info_stat.st_uid != os.getuid():
            return None  # written by someone else: do not send them our question and token
        if stat.S_IMODE(info_stat.st_mode) & 0o077:
            return None  # others can read its secret: it proves nothing
        info = read_state_json(file, 64_000)  # a FIFO in its place is refused, not waited on
        if info is None:
            return None
        pid, url, secret = int(info["pid"]), str(info["url"]), str(info["secret"])
        if not 0 < pid < 1 << 31:
            raise ValueError(f"pid {pid}")
    except FileNotFoundError:
        return None
    except (DamagedFileError, OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
        # kaas ask answers in-process; the next `kaas serve` writes the announcement afresh
        log.warning(".kaas/%s is damaged (%s); not used", SERVER_FILE, exc)
        return None
    if not _SECRET.fullmatch(secret):
        return None
    if info.get("model") != (model or None) or urlsplit(url).hostname not in ("127.0.0.1", "::1", "localhost"):
        return None
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or another user's process: not our server
        return None
    except OSError:
        return None
    return info


def ask_events_remote(server: dict[str, Any], body: dict[str, Any], token: str | None, *,
                      deadline: float) -> Iterator[tuple[str, dict[str, Any]]]:
    """Prove the announced ``server`` (``running_server``), then POST /api/chat on the same
    connection and yield (event, data) as they stream in, for at most ``deadline`` seconds.
    Raises ServerUnavailable when no event could be read (the caller answers locally instead),
    TimeoutError or OSError or ValueError when the answer breaks off after it started."""
    parts = urlsplit(str(server["url"]))
    started = time.monotonic()
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=CONNECT_TIMEOUT)
    try:
        try:
            conn.connect()
        except OSError as exc:
            raise ServerUnavailable(str(exc)) from None
        sock = conn.sock  # kept: http.client hands it to a response that will close it
        _prove(conn, str(server["secret"]), str(server["url"]))
        conn.auto_open = 0  # the question goes on the proven connection, never a new one
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            sock.settimeout(READ_TIMEOUT)
            conn.request("POST", "/api/chat", body=json.dumps(body).encode(), headers=headers)
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            raise ServerUnavailable(f"no answer to the question ({exc})", notice=True) from None
        if response.status != 200:
            raise ServerUnavailable(f"HTTP {response.status}")
        yield from _bounded_events(response, sock, started + deadline, deadline)
    finally:
        conn.close()


def _prove(conn: http.client.HTTPConnection, secret: str, url: str) -> None:
    challenge = secrets.token_hex(32)
    try:
        conn.sock.settimeout(PROOF_TIMEOUT)
        conn.request("GET", f"/healthz?challenge={challenge}", headers={"Accept": "application/json"})
        response = conn.getresponse()
        data = response.read(64_000)
    except (OSError, http.client.HTTPException) as exc:
        raise ServerUnavailable(f"the server announced at {url} did not answer its challenge ({exc})",
                                notice=True) from None
    try:
        given = json.loads(data).get("proof") if response.status == 200 else None
    except (ValueError, AttributeError, RecursionError):
        given = None
    if not isinstance(given, str) or not hmac.compare_digest(given, proof(secret, challenge)):
        raise ServerUnavailable(f"whatever listens at {url} did not prove it is the `kaas serve` announced in "
                                ".kaas/server.json (a stale announcement?); it was sent nothing", notice=True)
    if conn.sock is None:  # it closed the connection: a new one would not be the proven one
        raise ServerUnavailable(f"the server at {url} closed the connection after its proof", notice=True)


def _bounded_events(response, sock: socket.socket, end: float, deadline: float) -> Iterator[tuple[str, dict[str, Any]]]:
    """The events of ``response``, each read bounded by the socket's timeout, the whole by
    ``end`` (a watchdog shuts the socket down then, which ends a read that trickles)."""
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    watchdog = threading.Timer(max(0.0, end - time.monotonic()), expire)
    watchdog.daemon = True
    watchdog.start()
    received = False
    try:
        for event in _parse_sse(response):
            received = True
            yield event
        if expired.is_set():
            raise TimeoutError(f"the answer took longer than {deadline:.0f} s")
    except (OSError, ValueError, http.client.HTTPException) as exc:
        if expired.is_set():
            exc = TimeoutError(f"the answer took longer than {deadline:.0f} s")
        elif isinstance(exc, TimeoutError) or isinstance(exc, socket.timeout):
            exc = TimeoutError(f"nothing came for {READ_TIMEOUT:.0f} s")
        elif isinstance(exc, http.client.HTTPException):
            exc = OSError(f"the answer broke off ({exc})")
        if not received:
            raise ServerUnavailable(f"no event came ({exc})", notice=True) from None
        raise exc from None
    finally:
        watchdog.cancel()


def _parse_sse(response) -> Iterator[tuple[str, dict[str, Any]]]:
    name, data, size = "message", [], 0
    while True:
        raw = response.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES:
            raise ValueError(f"an event line longer than {MAX_LINE_BYTES} bytes")
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield name, json.loads("\n".join(data))
            name, data, size = "message", [], 0
        elif line.startswith(":"):
            continue  # keep-alive comment
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
            size += len(line)
            if size > MAX_EVENT_BYTES:
                raise ValueError(f"an event larger than {MAX_EVENT_BYTES} bytes")
