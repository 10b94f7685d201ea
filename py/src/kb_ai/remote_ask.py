"""Ask a running ``kaas serve`` of the same knowledge base instead of answering in-process.

A fresh ``kaas ask`` process pays for its imports (the model client alone takes seconds) and,
on a large wiki, for loading the catalog and the keyword index. ``kaas serve`` has all of that
loaded, so when one is running for this KB with the same model, the CLI sends the question to
it over loopback and prints the same events. Standard library only: this path must import fast.

``kaas serve`` announces itself in ``.kaas/server.json`` (URL, pid, model) while it runs.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

from kb_ai.store.files import DamagedFileError, read_state_json

log = logging.getLogger(__name__)

SERVER_FILE = "server.json"
CONNECT_TIMEOUT = 2.0


class ServerUnavailable(Exception):
    """The announced server could not take the question (before any event was received)."""


def announcement(url: str, model: str | None) -> dict[str, Any]:
    return {"url": url, "pid": os.getpid(), "model": model or None}


def running_server(state_dir: Path, model: str | None) -> dict[str, Any] | None:
    """The announced server for this KB, if the announcement is ours (same user), its process is
    alive, it is on loopback and it answers with ``model``."""
    file = state_dir / SERVER_FILE
    try:
        if hasattr(os, "getuid") and file.stat().st_uid != os.getuid():
            return None  # written by someone else: do not send them our question and token
        info = read_state_json(file, 64_000)  # a FIFO in its place is refused, not waited on
        if info is None:
            return None
        pid, url = int(info["pid"]), str(info["url"])
        if not 0 < pid < 1 << 31:
            raise ValueError(f"pid {pid}")
    except FileNotFoundError:
        return None
    except (DamagedFileError, OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
        # kaas ask answers in-process; the next `kaas serve` writes the announcement afresh
        log.warning(".kaas/%s is damaged (%s); not used", SERVER_FILE, exc)
        return None
    if info.get("model") != (model or None) or urlsplit(url).hostname not in ("127.0.0.1", "::1", "localhost"):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's process
    return info


def ask_events_remote(url: str, body: dict[str, Any], token: str | None) -> Iterator[tuple[str, dict[str, Any]]]:
    """POST /api/chat and yield (event, data) as they stream in. Raises ServerUnavailable when
    no event could be read (the caller answers locally instead)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=CONNECT_TIMEOUT)
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request("POST", "/api/chat", body=json.dumps(body).encode(), headers=headers)
        response = conn.getresponse()
    except OSError as exc:
        conn.close()
        raise ServerUnavailable(str(exc)) from None
    if response.status != 200:
        conn.close()
        raise ServerUnavailable(f"HTTP {response.status}")
    conn.sock.settimeout(None)  # the answer may take as long as the model takes
    try:
        yield from _parse_sse(response)
    finally:
        conn.close()


def _parse_sse(response) -> Iterator[tuple[str, dict[str, Any]]]:
    name, data = "message", []
    for raw in response:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", []
        elif line.startswith(":"):
            continue  # keep-alive comment
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
