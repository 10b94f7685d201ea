"""`kaas ask` hands the question to a running `kaas serve` of the same KB (fast start, nothing to
load), and answers in-process when there is none, it is dead, or it runs another model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from kb_ai.config import Settings
from kb_ai.navigate.ask import AskService
from kb_ai.server.remote import SERVER_FILE
from kb_ai.server.app import create_app

from server_fakes import PacedNavigator, ServerThread, bound_socket

KAAS = [sys.executable, "-m", "kb_ai.cli"] if not (Path(sys.executable).parent / "kaas").exists() else [str(Path(sys.executable).parent / "kaas")]


def kaas(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAAS_")}
    return subprocess.run([*KAAS, *args], capture_output=True, text=True, timeout=120, env=env)


def announce(kb_root: Path, url: str, pid: int | None = None, model: str | None = None, secret: str = "0" * 64) -> None:
    (kb_root / ".kaas").mkdir(exist_ok=True)
    file = kb_root / ".kaas" / SERVER_FILE
    file.write_text(json.dumps({"url": url, "pid": pid or os.getpid(), "model": model, "secret": secret}))
    file.chmod(0o600)


def test_ask_is_answered_by_the_running_server(sample_kb):
    navigator = PacedNavigator(tokens=3)
    settings = Settings(kb=sample_kb.root)
    sock, url = bound_socket()
    app = create_app(settings, service=AskService(sample_kb, settings, navigator), mcp=False, announce_url=url)
    with ServerThread(app, sock=sock):
        done = kaas("ask", "--kb", str(sample_kb.root), "How are citations validated?", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["answer"].startswith("word0 word1 word2 ")  # the server's navigator answered
    assert navigator.questions == ["How are citations validated?"]
    assert data["citations"] and data["pages"]


@pytest.mark.slow
def test_ask_answers_itself_when_the_server_is_gone_dead_or_runs_another_model(sample_kb, tmp_path):
    question = ("ask", "--kb", str(sample_kb.root), "How are citations validated?")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    navigator = PacedNavigator(tokens=3)
    settings = Settings(kb=sample_kb.root)
    app = create_app(settings, service=AskService(sample_kb, settings, navigator), mcp=False)
    sock, served_url = bound_socket()
    app = create_app(settings, service=AskService(sample_kb, settings, navigator), mcp=False, announce_url=served_url)
    with ServerThread(app, sock=sock):
        secret = json.loads((sample_kb.state_dir / SERVER_FILE).read_text())["secret"]  # the real one
        for url, pid, model in [("http://127.0.0.1:9", None, None),      # nothing listens
                                (served_url, dead.pid, None),             # process is gone
                                (served_url, None, "openai/other-model"),  # answers with a model
                                ("http://10.0.0.1:8000", None, None)]:    # not loopback: never used
            announce(sample_kb.root, url, pid, model, secret)
            done = kaas(*question)
            assert done.returncode == 0, done.stderr
            assert "offline mode" in done.stderr and "word0" not in done.stdout
    assert navigator.questions == []


def test_serve_announces_itself_while_running_and_withdraws_after(sample_kb):
    target = sample_kb.state_dir / SERVER_FILE
    app = create_app(Settings(kb=sample_kb.root), mcp=False, announce_url="http://127.0.0.1:8123")
    with TestClient(app):
        info = json.loads(target.read_text())
        secret = info.pop("secret")
        assert info == {"url": "http://127.0.0.1:8123", "pid": os.getpid(), "model": None}
        assert len(secret) == 64 and (target.stat().st_mode & 0o777) == 0o600  # only its owner reads the secret
    assert not target.exists()


def test_an_announcement_written_by_another_user_is_ignored(sample_kb):
    from kb_ai.server.remote import running_server

    announce(sample_kb.root, "http://127.0.0.1:8123")
    assert running_server(sample_kb.state_dir, None) is not None
    if os.geteuid() != 0:
        pytest.skip("needs root to give the file to another user (chown)")
    os.chown(sample_kb.state_dir / SERVER_FILE, 65534, 65534)
    assert running_server(sample_kb.state_dir, None) is None
