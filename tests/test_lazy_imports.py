"""litellm (seconds of CPU, ~150 MB) is imported only by a call that goes through it: a server
of an OpenAI-compatible model never imports it (not at start-up, not to price a reply), and
neither does a compile's ``--dry-run`` estimate (prices come from the model map, read as JSON).
Each check runs in a fresh interpreter, so nothing another test imported counts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent)


def _run(script: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": TESTS + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env = {k: v for k, v in env.items() if not k.startswith("KAAS_")}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.split()


def test_serving_an_openai_compatible_model_never_imports_litellm(sample_kb):
    """The app as `kaas serve` builds it (transport warmed at start-up), one streamed chat, a
    model litellm's price list knows (so the reply is priced): still no litellm."""
    script = f"""
import sys, time
from server_fakes import FakeLLMServer
from starlette.testclient import TestClient
from kb_ai.config import Settings
from kb_ai.server.app import create_app
with FakeLLMServer(token_delay=0) as llm:
    settings = Settings(kb={str(sample_kb.root)!r}, model="openai/gpt-4o-mini", api_base=llm.api_base,
                        api_key="x", cache=False)
    app = create_app(settings, warm_up=True, watch_interval=0.5)
    with TestClient(app) as client:
        time.sleep(1.0)  # the warm-up thread has run
        text = client.post("/api/chat", json={{"question": "How are citations validated?"}}).text
print("event: done" in text, '"cost_usd": 0.0,' not in text, "litellm" in sys.modules)
"""
    assert _run(script) == ["True", "True", "False"]


def test_a_dry_run_estimate_prices_without_importing_litellm(sample_kb):
    raw = sample_kb.root / "raw"
    raw.mkdir(exist_ok=True)
    (raw / "notes.md").write_text("# Notes\n\nThe depot opens at nine and closes at five.\n", encoding="utf-8")
    script = f"""
import sys
from click.testing import CliRunner
from kb_ai.cli.commands import cli
result = CliRunner().invoke(cli, ["compile", "--kb", {str(sample_kb.root)!r}, "--dry-run"],
                            env={{"KAAS_MODEL": "openai/gpt-4o-mini", "KAAS_API_KEY": "x"}})
print(result.exit_code, "$" in result.output, "litellm" in sys.modules)
"""
    assert _run(script) == ["0", "True", "False"]


def test_a_server_imports_the_mcp_sdk_only_when_an_agent_calls_mcp(sample_kb):
    """The MCP SDK and its pydantic models (~33 MB) load at the first request to /mcp, not at
    start-up nor for a chat; then /mcp answers an MCP client (initialize, tools listed), and the
    app's shutdown (which stops it) raises nothing."""
    script = f"""
import sys
from starlette.testclient import TestClient
from kb_ai.config import Settings
from kb_ai.server.app import create_app
app = create_app(Settings(kb={str(sample_kb.root)!r}))
with TestClient(app) as client:
    text = client.post("/api/chat", json={{"question": "How are citations validated?"}}).text
    print("event: done" in text, "mcp" in sys.modules, "pydantic" in sys.modules)
    headers = {{"Accept": "application/json, text/event-stream"}}
    init = client.post("/mcp", headers=headers, json={{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {{
        "protocolVersion": "2025-06-18", "capabilities": {{}}, "clientInfo": {{"name": "t", "version": "1"}}}}}})
    session = init.headers.get("mcp-session-id")
    if session:
        headers["mcp-session-id"] = session
    client.post("/mcp", headers=headers, json={{"jsonrpc": "2.0", "method": "notifications/initialized"}})
    tools = client.post("/mcp", headers=headers, json={{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}})
    print(init.status_code, "list_pages" in tools.text, "mcp" in sys.modules)
"""
    assert _run(script) == ["True", "False", "False", "200", "True", "True"]
