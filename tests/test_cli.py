"""The kaas CLI through click's runner: real files, offline by default, one-line errors."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from kb_ai.cli import cli
from helpers import page_refs


@pytest.fixture
def runner():
    return CliRunner()


def test_ask_streams_answer_and_lists_sources(runner, sample_kb):
    result = runner.invoke(cli, ["--kb", str(sample_kb.root), "ask", "How are citations validated?"])
    assert result.exit_code == 0, result.output
    # The mode is said beside the answer (stderr), never as a line of it (issue 28 item 9).
    assert "Offline mode" not in result.stdout and "offline mode (no model configured)" in result.stderr
    assert "[Citations](retrieval/citations.md)" in result.stdout
    assert "Sources:\n  - Citations (wiki/retrieval/citations.md)" in result.stdout


def test_ask_json_prints_one_object(runner, sample_kb):
    result = runner.invoke(cli, ["--kb", str(sample_kb.root), "ask", "Which variable selects the language model?", "--json", "--pages", "2"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"answer", "citations", "pages", "mode", "usage"} <= set(data)
    assert data["mode"] == "offline"
    assert page_refs(data["citations"])[0] == {"path": "ops/configuration.md", "title": "Configuration"}
    assert all(c["path"] in {p["path"] for p in data["pages"]} for c in data["citations"])
    assert len(data["pages"]) <= 2
    assert data["usage"]["llm_calls"] == 0


def test_ask_suggest_and_explicit_pages(runner, sample_kb):
    result = runner.invoke(cli, ["--kb", str(sample_kb.root), "ask", "reverse proxy", "--suggest", "--page", "ops/deployment.md", "--json"])
    data = json.loads(result.stdout)
    assert [p["path"] for p in data["pages"]] == ["ops/deployment.md"]
    assert isinstance(data["suggestions"], list)


def _one_line_error(result, fragment):
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kaas: error: ") and fragment in lines[0], result.stderr
    assert "Traceback" not in result.output


def test_error_no_wiki(runner, tmp_path):
    _one_line_error(runner.invoke(cli, ["--kb", str(tmp_path), "ask", "anything"]), "no wiki")


def test_error_empty_catalog(runner, tmp_path):
    runner.invoke(cli, ["init", str(tmp_path)])
    _one_line_error(runner.invoke(cli, ["--kb", str(tmp_path), "ask", "anything"]), "catalog")


def test_error_unknown_model(runner, sample_kb, monkeypatch):
    monkeypatch.setenv("KAAS_MODEL", "nonsense-provider/xyz")
    _one_line_error(runner.invoke(cli, ["--kb", str(sample_kb.root), "ask", "citations?"]), "unknown model")


def test_error_missing_api_key(runner, sample_kb, monkeypatch):
    monkeypatch.setenv("KAAS_MODEL", "openai/gpt-4o-mini")
    _one_line_error(runner.invoke(cli, ["--kb", str(sample_kb.root), "ask", "citations?"]), "API key")


def test_error_unreachable_server(runner, sample_kb, monkeypatch):
    monkeypatch.setenv("KAAS_MODEL", "openai/test-model")
    monkeypatch.setenv("KAAS_API_BASE", "http://127.0.0.1:9/v1")  # discard port: connection refused
    monkeypatch.setenv("KAAS_MAX_RETRIES", "1")
    monkeypatch.setenv("KAAS_TIMEOUT", "5")
    result = runner.invoke(cli, ["--kb", str(sample_kb.root), "ask", "citations?"])
    # Degrade, don't fail: once the model did not answer (the selection), the ask does not ask it
    # again; the answer is the offline extract, and one line says why (red team B6) — the one
    # line about it (issue 15), on stderr beside the answer, not in its text (issue 28 item 9).
    assert result.exit_code == 0, result.output
    assert "Model unavailable" not in result.stdout and result.stdout.startswith("- ")
    assert result.stderr.count("cannot reach") == 1
    assert "kaas: note: Model unavailable (cannot reach" in result.stderr and "without a model" in result.stderr
    assert "Traceback" not in result.output


def test_error_empty_question(runner, sample_kb):
    _one_line_error(runner.invoke(cli, ["--kb", str(sample_kb.root), "ask", "   "]), "empty")


def test_init_and_index(runner, tmp_path):
    result = runner.invoke(cli, ["init", str(tmp_path / "kb")])
    assert result.exit_code == 0 and "created" in result.stdout
    page = tmp_path / "kb" / "wiki" / "notes" / "hand.md"
    page.parent.mkdir(parents=True)
    page.write_text("# Hand made\n\nA page written by hand without frontmatter.\n")
    result = runner.invoke(cli, ["--kb", str(tmp_path / "kb"), "index"])
    assert result.exit_code == 0
    assert "indexed 1 articles in 1 topics" in result.stdout
    assert "no title in frontmatter" in result.stderr
    assert "- [Hand made](notes/hand.md) — A page written by hand without frontmatter." in (tmp_path / "kb" / "wiki" / "master-index.md").read_text()


def test_bad_config_is_one_line(runner, sample_kb):
    (sample_kb.root / "kaas.toml").write_text("model = [")
    _one_line_error(runner.invoke(cli, ["--kb", str(sample_kb.root), "ask", "x"]), "not valid TOML")


def test_json_error_still_prints_the_object(runner, tmp_path):
    result = runner.invoke(cli, ["ask", "--kb", str(tmp_path), "anything", "--json"])  # --kb after the command works too
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["error"]["code"] == "no_wiki" and data["answer"] == ""
    assert result.stderr.startswith("kaas: error: no wiki")


def _compile(runner, root, *args):
    return runner.invoke(cli, ["--kb", str(root), "compile", *args])


def test_compile_exit_status_is_documented_and_says_whether_everything_compiled(runner, tmp_path, monkeypatch):
    from compile_checks import make_source_kb
    from kb_ai.store.lock import CompileLock
    from llm_fakes import API_BASE, MODEL, FakeOpenAI

    assert _compile(runner, tmp_path).exit_code == 2  # no raw/: a usage error
    make_source_kb(tmp_path)
    result = _compile(runner, tmp_path)
    assert result.exit_code == 0 and "created" in result.stdout  # skipped files and duplicates are no failure
    # Every source failing (the model answers 500 to everything): the report, and exit status 1.
    for raw in (tmp_path / "raw").rglob("*.md"):
        raw.write_text(raw.read_text() + "\nOne more line.\n")
    monkeypatch.setenv("KAAS_MODEL", MODEL)
    monkeypatch.setenv("KAAS_API_BASE", API_BASE)
    monkeypatch.setenv("KAAS_API_KEY", "sk-test")
    monkeypatch.setenv("KAAS_MAX_RETRIES", "0")
    with FakeOpenAI() as fake:
        fake.fail(500, "upstream broke", repeat=True)
        result = _compile(runner, tmp_path, "--json")
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    assert data["failed"] and all("upstream broke" in f["reason"] for f in data["failed"])
    assert data["exit_code"] == 1
    held = CompileLock(tmp_path / ".kaas").acquire()
    try:
        result = _compile(runner, tmp_path, "--offline")
    finally:
        held.release()
    assert result.exit_code == 3 and "another kaas compile is running" in result.stderr
    help_text = runner.invoke(cli, ["compile", "--help"]).stdout
    assert "Exit status:" in help_text
    for code, meaning in (("0", "compiled"), ("1", "failed"), ("2", "configuration"), ("3", "lock")):
        assert re.search(rf"^\s+{code}\s+.*{meaning}", help_text, re.M), help_text


def test_serve_on_a_busy_port_says_so_and_never_says_serving(runner, sample_kb):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(cli, ["--kb", str(sample_kb.root), "serve", "--port", str(port), "--offline"])
    assert result.exit_code == 3, result.output
    assert f"cannot listen on 127.0.0.1:{port}: the port is in use" in result.output
    assert "serving" not in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_works_before_or_after_the_command(runner, sample_kb, where):
    import logging

    logging.getLogger("kb_ai").setLevel(logging.WARNING)
    args = ["--kb", str(sample_kb.root), "index"]
    args = ["-v", *args] if where == "before" else [*args, "-v"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert logging.getLogger("kb_ai").getEffectiveLevel() == logging.INFO
