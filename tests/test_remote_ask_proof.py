"""`kaas ask` sends its question (and the API token) only to the `kaas serve` announced in
.kaas/server.json after it proved it holds the announcement's secret, and never waits without
bound for it: a stale announcement (whatever listens on its port now gets nothing), a server
that stalls before or after the answer started, one that trickles, one that closes the
connection — each ends in seconds, answered here or with an error that keeps what came."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from click.testing import CliRunner

import kb_ai.cli.ask
import kb_ai.server.remote
from kb_ai.cli import cli
from kb_ai.server.remote import SERVER_FILE

TOKEN = "admin-token-that-must-stay-home-1234"
SECRET = "5e" * 32
QUESTION = "How are citations validated?"


class Hung(BaseException):
    """Raised by the alarm: not an Exception, so nothing on the way can swallow it."""


@contextlib.contextmanager
def alarm(seconds: int):
    """Fail (instead of hanging the test run) when the block takes longer than ``seconds``."""
    def hung(*_):
        raise Hung(f"still waiting after {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _proof(challenge: str) -> str:
    return kb_ai.server.remote.proof(SECRET, challenge) if hasattr(kb_ai.server.remote, "proof") else "none"


class FakeServe:
    """A loopback HTTP/1.1 server that plays `kaas serve` (it knows SECRET, or not) and answers
    POST /api/chat with ``frames`` then ``ending``: "done" (ends the response), "stall" (keeps the
    connection open, silent), "trickle" (a keep-alive comment every 0.2 s, forever)."""

    def __init__(self, *, proves: bool = True, frames: list[str] = (), ending: str = "done", close: bool = False):
        self.requests: list[dict] = []
        self.stop = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                fake.requests.append({"path": self.path, "authorization": self.headers.get("Authorization")})
                challenge = parse_qs(urlsplit(self.path).query).get("challenge", [""])[0]
                data = {"status": "ok"}
                if proves and challenge:
                    data["proof"] = _proof(challenge)
                body = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                fake.requests.append({"path": self.path, "authorization": self.headers.get("Authorization"),
                                      "body": self.rfile.read(length).decode()})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                if close:
                    self.send_header("Connection", "close")
                else:
                    self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def send(text: str) -> None:
                    data = text.encode()
                    self.wfile.write(data if close else b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()

                send(": ping\n\n")
                for frame in frames:
                    send(frame)
                if ending == "done":
                    if not close:
                        self.wfile.write(b"0\r\n\r\n")
                    return
                while not fake.stop.is_set():
                    if ending == "trickle":
                        send(": ping\n\n")
                    fake.stop.wait(0.2)
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> "FakeServe":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def chat_requests(self) -> list[dict]:
        return [r for r in self.requests if r["path"] == "/api/chat"]


def announce(kb_root: Path, url: str, *, mode: int = 0o600) -> None:
    file = kb_root / ".kaas" / SERVER_FILE
    file.parent.mkdir(exist_ok=True)
    file.write_text(json.dumps({"url": url, "pid": os.getpid(), "model": None, "secret": SECRET}))
    file.chmod(mode)


def ask(kb_root: Path, *extra: str, seconds: int = 30):
    with alarm(seconds):
        return CliRunner().invoke(cli, ["--kb", str(kb_root), "ask", QUESTION, *extra])


def frame(name: str, data: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n"


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setenv("KAAS_API_TOKEN", TOKEN)
    # Both by name, and raising when the name is gone: a rename fails here instead of making the
    # trials below wait for the real limits (60 s per read, minutes in all) or pass for nothing.
    monkeypatch.setattr(kb_ai.server.remote, "READ_TIMEOUT", 0.5)
    monkeypatch.setattr(kb_ai.cli.ask, "_remote_deadline", lambda settings: 1.5)


@pytest.mark.parametrize("proves, mode", [(False, 0o600), (True, 0o644)])
def test_a_listener_that_does_not_prove_itself_gets_nothing(sample_kb, proves, mode):
    # A stale announcement: kaas serve died, its port now belongs to someone else.
    with FakeServe(proves=proves, frames=[frame("token", {"text": "impostor"}), frame("done", {})]) as impostor:
        announce(sample_kb.root, impostor.url, mode=mode)
        result = ask(sample_kb.root, "--json")
    assert result.exit_code == 0, result.output
    assert impostor.chat_requests == []  # neither the question nor the token left this process
    assert all(r["authorization"] is None and QUESTION not in json.dumps(r) for r in impostor.requests)
    data = json.loads(result.stdout)
    assert "impostor" not in data["answer"] and data["mode"] == "offline" and data["citations"]
    if proves:  # group-readable announcement: its secret proves nothing, it is not even asked
        assert impostor.requests == []
    else:
        assert any("did not prove" in n for n in data["notices"]), data["notices"]


def test_a_proven_server_gets_the_question_and_the_token(sample_kb):
    frames = [frame("pages", {"pages": [], "method": "given"}), frame("token", {"text": "from the server"}),
              frame("citations", {"citations": [], "invalid": []}), frame("done", {})]
    with FakeServe(frames=frames) as server:
        announce(sample_kb.root, server.url)
        result = ask(sample_kb.root, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["answer"] == "from the server"
    assert [r["path"].split("?")[0] for r in server.requests] == ["/healthz", "/api/chat"]
    assert server.chat_requests[0]["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize("ending, close", [("stall", False), ("trickle", True)])
def test_a_server_that_stalls_before_any_event_is_answered_here(sample_kb, ending, close):
    with FakeServe(ending=ending, close=close) as server:
        announce(sample_kb.root, server.url)
        result = ask(sample_kb.root, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["mode"] == "offline" and data["citations"]  # answered in-process
    assert any("Answered here" in n for n in data["notices"]), data["notices"]
    assert "Traceback" not in result.output


@pytest.mark.parametrize("ending, close, reason", [("stall", False, "nothing came for"),
                                                   ("stall", True, "nothing came for"),  # conn.sock is None
                                                   ("trickle", False, "took longer than")])
def test_a_server_that_stalls_after_the_answer_started_is_an_error_keeping_what_came(sample_kb, ending, close, reason):
    frames = [frame("pages", {"pages": [], "method": "given"}), frame("token", {"text": "The first half"})]
    with FakeServe(frames=frames, ending=ending, close=close) as server:
        announce(sample_kb.root, server.url)
        result = ask(sample_kb.root, *(["--json"] if close else []))
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert reason in result.stderr and "broke off the answer" in result.stderr, result.stderr
    if close:
        data = json.loads(result.stdout)
        assert data["answer"] == "The first half" and data["error"]["code"] == "llm_unreachable"
    else:
        assert result.stdout.startswith("The first half")


def test_a_server_that_closes_the_connection_after_a_whole_answer_is_fine(sample_kb):
    frames = [frame("pages", {"pages": [], "method": "given"}), frame("token", {"text": "whole"}), frame("done", {})]
    with FakeServe(frames=frames, close=True) as server:
        announce(sample_kb.root, server.url)
        result = ask(sample_kb.root, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["answer"] == "whole"
