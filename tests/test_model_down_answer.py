"""Model down, still an answer (issue 15, item 4): when the model fails the answer step — it cannot
be reached, answers 5xx after the retries, or times out — the answer is the offline extract of the
pages read, marked as such by one line saying why, with its citations (and their passages), exit
0; through the CLI (text and --json), HTTP SSE (an ``offline`` event) and MCP. Unless the person
asked for model-only answers (``--model-only``, ``answer_fallback = false``, ``model_only``):
then it is the error it always was."""

from __future__ import annotations

import json

import httpx
import pytest
from click.testing import CliRunner
from mcp import Client
from starlette.testclient import TestClient

from kb_ai.cli import cli
from kb_ai.server.app import create_app
from kb_ai.server.mcp import build_mcp_server

from helpers import llm_settings
from llm_fakes import ANSWER, API_BASE, MODEL, SELECT, FakeOpenAI
from server_fakes import parse_sse

QUESTION = "How are citations validated?"
CLOSED_PORT = "http://127.0.0.1:9/v1"  # the discard port: connection refused


def _env(monkeypatch, api_base: str = API_BASE) -> None:
    for name, value in {"KAAS_MODEL": MODEL, "KAAS_API_BASE": api_base, "KAAS_API_KEY": "sk-test",
                        "KAAS_MAX_RETRIES": "0", "KAAS_CACHE": "false", "KAAS_TIMEOUT": "5"}.items():
        monkeypatch.setenv(name, value)


def _answer_fails(fake: FakeOpenAI, how: str) -> None:
    fake.reply_json({"paths": ["retrieval/citations.md"]}, when=SELECT)
    if how == "500":
        fake.fail(500, "the model crashed", when=ANSWER, repeat=True)
    else:
        def slow(body):
            raise httpx.ReadTimeout("timed out")
        fake.add(slow, when=ANSWER, repeat=True)


def _diagnosis_lines(text: str, needle: str) -> list[str]:
    return [line for line in text.splitlines() if needle in line]


def test_closed_port_gives_the_offline_answer_with_one_line_saying_why(sample_kb, monkeypatch):
    _env(monkeypatch, CLOSED_PORT)
    result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "ask", QUESTION])
    assert result.exit_code == 0, result.output
    # the line is beside the answer (stderr), not its first line (issue 28 item 9)
    assert "Model unavailable" not in result.stdout and result.stdout.startswith("- ")
    assert "Model unavailable (cannot reach" in result.stderr and "without a model" in result.stderr
    # one line of diagnosis in all the output, not one per step that failed
    assert len(_diagnosis_lines(result.stdout + result.stderr, "127.0.0.1:9")) == 1, result.output
    assert "Sources:" in result.stdout and "retrieval/citations.md" in result.stdout


@pytest.mark.parametrize("how", ["500", "timeout"])
def test_a_failed_answer_step_gives_the_offline_answer_in_json(sample_kb, monkeypatch, how):
    _env(monkeypatch)
    with FakeOpenAI() as fake:
        _answer_fails(fake, how)
        result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "ask", "--json", QUESTION])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert "error" not in data and data["mode"] == "offline"
    assert data["offline"]["message"].startswith("Model unavailable (")
    assert "Model unavailable" not in data["answer"]  # issue 28 item 9: beside the answer, not in it
    assert ("500" in data["offline"]["reason"]) if how == "500" else ("did not answer" in data["offline"]["reason"]
                                                                      or "timed out" in data["offline"]["reason"])
    [citation] = [c for c in data["citations"] if c["path"] == "retrieval/citations.md"]
    assert citation["passages"] and "valid citations" in citation["quote"]


def test_model_only_keeps_the_error(sample_kb, monkeypatch):
    _env(monkeypatch)
    with FakeOpenAI() as fake:
        _answer_fails(fake, "500")
        flagged = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "ask", "--model-only", QUESTION])
    assert flagged.exit_code == 1 and "kaas: error:" in flagged.stderr and "500" in flagged.stderr
    assert "Model unavailable" not in flagged.stdout

    (sample_kb.root / "kaas.toml").write_text("answer_fallback = false\n", encoding="utf-8")
    with FakeOpenAI() as fake:
        _answer_fails(fake, "500")
        configured = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "ask", "--json", QUESTION])
    assert configured.exit_code == 1
    assert json.loads(configured.stdout)["error"]["code"] == "llm_server_error"


def test_sse_says_the_answer_is_offline_and_why(sample_kb):
    with FakeOpenAI() as fake, TestClient(create_app(llm_settings(sample_kb.root))) as client:
        _answer_fails(fake, "500")
        events = parse_sse(client.post("/api/chat", json={"question": QUESTION}).text)
        _answer_fails(fake, "500")
        strict = parse_sse(client.post("/api/chat", json={"question": QUESTION, "model_only": True}).text)
    names = [n for n, _ in events]
    assert "error" not in names and names[-1] == "done"
    assert names.index("pages") < names.index("offline") < names.index("token")
    data = dict(events)
    assert data["offline"]["message"].startswith("Model unavailable (") and "500" in data["offline"]["reason"]
    answer = "".join(d["text"] for n, d in events if n == "token")
    assert "Model unavailable" not in answer  # issue 28 item 9: the offline event says it, not the text
    assert data["citations"]["citations"][0]["passages"]
    assert data["usage"]["mode"] == "offline"
    assert [n for n, _ in strict][-1] == "error" and "offline" not in [n for n, _ in strict]


async def test_mcp_ask_answers_offline_when_the_model_fails_and_errs_when_model_only(sample_kb):
    settings = llm_settings(sample_kb.root)
    with FakeOpenAI() as fake:
        async with Client(build_mcp_server(settings)) as client:
            _answer_fails(fake, "500")
            result = await client.call_tool("ask", {"question": QUESTION})
            _answer_fails(fake, "500")
            strict = await client.call_tool("ask", {"question": QUESTION, "model_only": True})
    assert not result.is_error, result.content
    out = result.structured_content
    assert out["mode"] == "offline" and out["offline"]["message"].startswith("Model unavailable (")
    # issue 28 item 9: the mode beside the answer, not in it
    assert not out["answer"].startswith("*") and out["citations"][0]["passages"]
    assert strict.is_error and "llm_server_error" in strict.content[0].text
