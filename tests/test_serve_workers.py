"""``kaas serve --workers N``: several server processes on one port (issue 17 item 5).

The real CLI in a subprocess on 127.0.0.1: the workers answer chats and MCP calls, every worker
proves the one announcement in ``.kaas/server.json`` (so ``kaas ask`` can use the server), MCP
over HTTP keeps no sessions (a session's next request may reach another process), and stopping
the parent stops every worker and withdraws the announcement.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from kb_ai.server.remote import proof

pytestmark = pytest.mark.slow  # starts three Python processes and waits for them

KAAS = str(Path(sys.executable).parent / "kaas")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid and "spawn_main" in Path(f"/proc/{entry}/cmdline").read_text():
                found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    """A process that runs (not gone, not a zombie waiting for its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def workers_server(sample_kb, tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAAS_")}
    log = open(tmp_path / "serve.log", "w+")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([KAAS, "serve", "--kb", str(sample_kb.root), "--port", str(port), "--offline",
                             "--workers", "2"], env=env, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, (tmp_path / "serve.log").read_text()
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200 and len(children(proc.pid)) == 2:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
        time.sleep(0.2)
    workers = children(proc.pid)
    try:
        yield proc, url, sample_kb
    finally:
        if proc.poll() is None:
            proc.terminate()  # the supervisor stops its workers
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for pid in workers:  # whatever the test did: no worker outlives it
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        log.close()


def test_workers_answer_and_prove_the_one_announcement(workers_server):
    proc, url, kb = workers_server
    announced = json.loads((kb.state_dir / "server.json").read_text())
    assert announced["pid"] == proc.pid and announced["url"] == url
    for i in range(12):  # a new connection each time: the kernel hands them to either worker
        challenge = f"{i:02x}" * 16
        health = httpx.get(f"{url}/healthz", params={"challenge": challenge}, timeout=10).json()
        assert health["proof"] == proof(announced["secret"], challenge)
    text = httpx.post(f"{url}/api/chat", json={"question": "How are citations validated?"}, timeout=30).text
    assert "event: pages" in text and "event: done" in text
    # `kaas ask` sends its question to the announced server and gets the answer from it.
    out = subprocess.run([KAAS, "--kb", str(kb.root), "ask", "How are citations validated?"], capture_output=True,
                         text=True, timeout=60, env={k: v for k, v in os.environ.items() if not k.startswith("KAAS_")})
    assert out.returncode == 0 and out.stdout.strip(), out.stderr


def test_mcp_over_http_needs_no_session_with_workers(workers_server):
    _proc, url, _kb = workers_server
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "mcp-protocol-version": "2025-06-18"}
    with httpx.Client(timeout=30) as http:
        init = http.post(url + "/mcp", headers=headers, json={
            "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        assert init.status_code == 200 and "mcp-session-id" not in init.headers
        for request_id in range(1, 5):  # no session id: any worker answers
            response = http.post(url + "/mcp", headers=headers, json={
                "jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                "params": {"name": "list_pages", "arguments": {}}})
            assert response.status_code == 200, response.text
            assert '"total"' in response.text


def test_stopping_the_parent_stops_every_worker_and_withdraws_the_announcement(workers_server):
    proc, _url, kb = workers_server
    workers = children(proc.pid)
    assert len(workers) == 2
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in workers)
    assert not (kb.state_dir / "server.json").exists()


def test_workers_stop_when_the_parent_is_killed(workers_server):
    """kill -9 of `kaas serve`: its workers stop too instead of serving the port on their own."""
    proc, url, _kb = workers_server
    workers = children(proc.pid)
    assert len(workers) == 2
    proc.kill()
    proc.wait(10)
    deadline = time.monotonic() + 15
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in workers)
    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/healthz", timeout=2)
