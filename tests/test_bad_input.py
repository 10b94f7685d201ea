"""Bad input at every door gets a clear error and loses nothing: request bodies (nesting, lone
surrogates, NaN, bad UTF-8), headers, page paths the file system cannot take (too long, a
symlink loop, a folder or a FIFO named like an article), MCP messages over stdio and HTTP.
Never a 500, a traceback, a hang, or a server that stops answering."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from mcp import Client
from starlette.testclient import TestClient

from kb_ai.cli import cli
from kb_ai.config import Settings, load_settings
from kb_ai.server import create_app
from kb_ai.server.mcp import build_mcp_server

from helpers import KAAS, McpStdio

JSON = {"content-type": "application/json"}
DEEP = "[" * 100_000 + "]" * 100_000
GOOD_ARTICLE = "---\ntitle: Deployment\nsummary: Edited.\n---\n# Deployment\n\nEdited.\n"


@pytest.fixture
def client(sample_kb):
    with TestClient(create_app(Settings(kb=sample_kb.root), mcp=False), raise_server_exceptions=False) as test_client:
        yield test_client


def assert_bad_request(response, fragment: str) -> None:
    assert response.status_code == 400, response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        assert "event: error" in response.text and '"code": "bad_request"' in response.text
        assert fragment in response.text
    else:
        error = response.json()["error"]
        assert error["code"] == "bad_request" and fragment in error["message"]


# -- JSON bodies ----------------------------------------------------------------------------------

BODY_ROUTES = [("POST", "/api/chat"), ("PUT", "/api/pages/ops/deployment.md"), ("POST", "/api/answers")]


@pytest.mark.parametrize("method, url", BODY_ROUTES)
def test_deeply_nested_json_is_a_bad_request(client, sample_kb, method, url):
    before = (sample_kb.wiki_dir / "ops/deployment.md").read_text()
    for body in (DEEP, '{"markdown": ' + DEEP + "}", '{"question": ' + "{\"a\": " * 40 + "1" + "}" * 40 + "}"):
        assert_bad_request(client.request(method, url, content=body, headers=JSON), "nested more than")
    assert (sample_kb.wiki_dir / "ops/deployment.md").read_text() == before


LONE_SURROGATES = {
    "/api/chat": ['{"question": "citations \\ud800"}',
                  '{"question": "x", "history": [{"role": "user", "content": "\\udfff"}]}'],
    "/api/pages/ops/deployment.md": ['{"markdown": "---\\ntitle: x\\n---\\nbody \\ud800"}',
                                     '{"markdown": "---\\ntitle: x\\n---\\nbody", "version": "\\udc00"}'],
    "/api/answers": ['{"question": "q\\ud800", "answer": "a", "citations": ["ops/deployment.md"]}',
                     '{"question": "q", "answer": "a", "citations": [], "\\ud801": 1}'],
}


@pytest.mark.parametrize("method, url", BODY_ROUTES)
def test_a_lone_surrogate_anywhere_in_a_body_is_a_bad_request(client, sample_kb, method, url):
    before = {p: p.read_bytes() for p in sample_kb.wiki_dir.rglob("*.md")}
    for body in LONE_SURROGATES[url]:
        assert_bad_request(client.request(method, url, content=body, headers=JSON), "lone surrogate")
    assert {p: p.read_bytes() for p in sample_kb.wiki_dir.rglob("*.md")} == before  # nothing written


@pytest.mark.parametrize("method, url", BODY_ROUTES)
def test_nan_and_infinity_are_not_json(client, method, url):
    for constant in ("NaN", "Infinity", "-Infinity"):
        body = '{"question": "x", "markdown": "x", "max_pages": %s}' % constant
        assert_bad_request(client.request(method, url, content=body, headers=JSON), "not valid JSON")


def test_a_body_that_is_not_utf8_is_a_bad_request(client):
    response = client.post("/api/chat", content=b'{"question": "\xff\xfe"}', headers=JSON)
    assert_bad_request(response, "not UTF-8")


# -- headers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("origin", [b"http://[::1", b"http://[", b"https://[fe80::1%25eth0"])
def test_an_origin_that_does_not_parse_is_refused_not_crashed(client, origin):
    response = client.post("/api/chat", content='{"question": "x"}', headers={**JSON, "origin": origin})
    assert response.status_code == 403 and response.json()["error"]["code"] == "bad_origin"


# -- paths the file system cannot take --------------------------------------------------------------

LONG_PATHS = ["a" * 300 + ".md", "ops/" + "é" * 200 + ".md", "a/" * 600 + "x.md"]


@pytest.mark.parametrize("path", LONG_PATHS, ids=["long-name", "long-utf8-name", "long-path"])
def test_a_path_too_long_for_the_file_system_is_refused_everywhere(client, sample_kb, path):
    got = client.get(f"/api/pages/{path}")
    assert got.status_code == 400 and got.json()["error"]["code"] == "unsafe_path"
    assert "longer than" in got.json()["error"]["message"]
    assert client.get(f"/wiki/{path}").status_code == 400
    saved = client.put(f"/api/pages/{path}", json={"markdown": GOOD_ARTICLE})
    assert saved.status_code == 400 and saved.json()["error"]["code"] == "unsafe_path"
    result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "ask", "--page", path, "x"])
    assert "Traceback" not in result.output and not isinstance(result.exception, OSError)
    assert "longer than" in result.stderr


async def test_mcp_read_page_with_a_long_path_is_a_clear_tool_error(sample_kb):
    async with Client(build_mcp_server(load_settings(sample_kb.root, env={}))) as mcp:
        result = await mcp.call_tool("read_page", {"path": "a" * 300 + ".md"})
    assert result.is_error and "longer than 255 bytes" in result.content[0].text


def test_a_symlink_loop_is_skipped_and_reported(client, sample_kb):
    (sample_kb.wiki_dir / "ops" / "loop.md").symlink_to("loop.md")
    (sample_kb.wiki_dir / "ops" / "a.md").symlink_to("b.md")
    (sample_kb.wiki_dir / "ops" / "b.md").symlink_to("a.md")
    result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "index"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert "indexed 4 articles" in result.stdout and "symlink loop" in result.stderr
    got = client.get("/api/pages/ops/loop.md")
    assert got.status_code == 400 and "symlink loop" in got.json()["error"]["message"]
    lint = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "lint", "--json"])
    assert "Traceback" not in lint.output and not isinstance(lint.exception, RuntimeError)
    assert {f["path"] for f in json.loads(lint.stdout)["findings"] if "symlink loop" in f["message"]} >= {"ops/loop.md"}


def test_a_folder_named_like_an_article(client, sample_kb):
    folder = sample_kb.wiki_dir / "ops" / "folder.md"
    (folder / "inner").mkdir(parents=True)
    saved = client.put("/api/pages/ops/folder.md", json={"markdown": GOOD_ARTICLE})
    assert saved.status_code == 400 and saved.json()["error"]["code"] == "bad_request"
    assert "folder or special file" in saved.json()["error"]["message"]
    assert folder.is_dir()
    assert client.get("/api/pages/ops/folder.md").status_code == 404
    result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "index"])
    assert result.exit_code == 0 and "indexed 4 articles" in result.stdout and "folder.md" not in result.stderr


def _isolated(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter: a read that blocks forever (a FIFO) fails the test
    instead of hanging it."""
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              timeout=timeout, cwd=Path(__file__).parent)
    except subprocess.TimeoutExpired:
        pytest.fail("blocked: a read of the FIFO never returned")


def test_a_fifo_named_like_an_article_never_blocks(sample_kb):
    fifo = sample_kb.wiki_dir / "ops" / "pipe.md"
    os.mkfifo(fifo)
    index = _isolated(f"""
        from click.testing import CliRunner
        from kb_ai.cli import cli
        result = CliRunner().invoke(cli, ["--kb", {str(sample_kb.root)!r}, "index"])
        print(result.exit_code, result.stdout.strip(), "|", result.stderr.strip())
    """)
    assert index.stdout.startswith("0 indexed 4 articles"), index.stdout + index.stderr
    assert "skipped ops/pipe.md: not a regular file" in index.stdout
    http = _isolated(f"""
        import json
        from starlette.testclient import TestClient
        from kb_ai.config import Settings
        from kb_ai.server import create_app
        with TestClient(create_app(Settings(kb={str(sample_kb.root)!r}), mcp=False)) as client:
            got = client.get("/api/pages/ops/pipe.md")
            put = client.put("/api/pages/ops/pipe.md", json={{"markdown": {GOOD_ARTICLE!r}, "version": "x"}})
            print(json.dumps([got.status_code, got.json(), put.status_code, put.json()]))
    """)
    got_status, got, put_status, put = json.loads(http.stdout.strip().splitlines()[-1])
    assert got_status == 422 and got["error"]["message"] == "ops/pipe.md: not a regular file"
    assert put_status == 400 and "special file" in put["error"]["message"]
    assert fifo.exists() and not fifo.is_file()  # left alone


# -- MCP over stdio ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_stdio_mcp_answers_unreadable_messages_with_errors_and_keeps_serving(sample_kb):
    session = McpStdio(sample_kb.root)
    try:
        bad = {
            1: session.call(1, "ask", '{"question": "citations \\ud800"}'),
            2: session.call(2, "read_page", '{"path": "ops/\\udc00.md"}'),
            3: session.call(3, "ask", '{"question": "x", "paths": ' + "[" * 5000 + "]" * 5000 + "}"),
            4: session.call(4, "list_pages", '{"topic": ' + "[" * 100 + "]" * 100 + "}"),
        }
        for request_id, line in bad.items():
            session.send(line)
            answer = session.receive()
            assert answer["id"] == request_id and answer["error"]["code"] == -32700, answer
        assert "lone surrogate" in json.dumps(answer) or "nested" in answer["error"]["message"]
        # The id may come after the deep part: it is still found.
        session.send('{"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "ask", "arguments": '
                     '{"question": "x", "paths": ' + "[" * 3000 + "]" * 3000 + '}}, "id": "late"}')
        assert session.receive()["id"] == "late"
        session.send(session.call(9, "list_pages", "{}"))
        alive = session.receive()
        assert alive["id"] == 9 and alive["result"]["structuredContent"]["total"] == 4
    finally:
        stderr = session.close()
    assert "Traceback" not in stderr


@pytest.mark.slow
def test_stdio_mcp_refuses_an_endless_line_without_holding_it(sample_kb):
    session = McpStdio(sample_kb.root)
    try:
        session.send('{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "ask", '
                     '"arguments": {"question": "' + "x" * 4_500_000 + '"}}}')
        answer = session.receive(timeout=60)
        assert answer["id"] == 5 and "longer than" in answer["error"]["message"]
        session.send(session.call(6, "read_page", '{"path": "ops/deployment.md"}'))
        assert session.receive()["result"]["structuredContent"]["title"] == "Deployment"
    finally:
        stderr = session.close()
    assert "Traceback" not in stderr


# -- files the CLI and the server read: questions, kaas.toml, catalog lines -----------------------


def _one_line_error(result, *fragments: str) -> str:
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("kaas: error:")]
    assert len(errors) == 1, result.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def test_eval_of_a_fifo_is_a_one_line_error_not_a_hang(sample_kb, tmp_path):
    fifo = tmp_path / "questions.jsonl"
    os.mkfifo(fifo)
    try:
        out = subprocess.run([KAAS, "--kb", str(sample_kb.root), "eval", str(fifo), "--offline"],
                             capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("kaas eval waited for a writer on the FIFO")
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert out.stderr.strip() == f"kaas: error: {fifo}: not a regular file"


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_kaas_toml_that_is_not_a_file_is_a_one_line_error(sample_kb, kind):
    config = sample_kb.root / "kaas.toml"
    os.mkfifo(config) if kind == "fifo" else config.mkdir()
    code = f"""
        from click.testing import CliRunner
        from kb_ai.cli import cli
        from kb_ai.store.users import UserDirectory
        result = CliRunner().invoke(cli, ["--kb", {str(sample_kb.root)!r}, "ask", "deployment"])
        print(result.exit_code, result.stderr.strip())
        UserDirectory({str(sample_kb.root)!r}).required()  # what the server asks on every request
        print("users read")
    """
    try:
        out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                             timeout=60, cwd=Path(__file__).parent)
    except subprocess.TimeoutExpired:
        pytest.fail("waited for a writer on the FIFO")
    lines = out.stdout.strip().splitlines()
    reason = "not a regular file" if kind == "fifo" else "Is a directory"
    assert lines[0] == f"2 kaas: error: {config}: cannot read ({reason})", out.stdout + out.stderr
    assert lines[-1] == "users read"


def test_a_catalog_line_naming_a_folder_or_fifo_is_dropped_with_a_warning(sample_kb):
    (sample_kb.wiki_dir / "ops" / "folder.md").mkdir()
    os.mkfifo(sample_kb.wiki_dir / "ops" / "pipe.md")
    with sample_kb.master_index.open("a") as index:
        index.write("- [Folder](ops/folder.md) — a folder\n- [Pipe](ops/pipe.md) — a FIFO\n")
    lint = subprocess.run([KAAS, "--kb", str(sample_kb.root), "lint", "--json"], capture_output=True, text=True,
                          timeout=60)
    assert lint.returncode == 1 and "Traceback" not in lint.stderr  # errors found, nothing crashed
    findings = json.loads(lint.stdout)["findings"]
    assert any(f["path"] == "ops/pipe.md" and "not a regular file" in f["message"] for f in findings)
    ask = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "ask", "--json", "reverse proxy"])
    assert ask.exit_code == 0, ask.output
    assert "lists ops/folder.md, which is not an article file" in ask.stderr
    assert "lists ops/pipe.md, which is not an article file" in ask.stderr


# -- MCP over HTTP (/mcp) -----------------------------------------------------------------------------


def test_http_mcp_answers_unreadable_messages_and_long_paths_with_errors(sample_kb):
    import httpx

    from server_fakes import ServerThread

    with ServerThread(create_app(Settings(kb=sample_kb.root), allowed_hosts=["127.0.0.1"])) as server, \
            httpx.Client(timeout=30) as http:
        url = server.url + "/mcp"
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        init = http.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
        headers |= {"mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})

        def call(request_id: int, tool: str, arguments: str) -> httpx.Response:
            body = ('{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "%s", "arguments": %s}}'
                    % (request_id, tool, arguments))
            return http.post(url, headers=headers, content=body)

        def result_of(response: httpx.Response) -> dict:
            text = response.text
            data = text.split("data: ", 1)[1].split("\n", 1)[0] if text.startswith(("event:", "data:")) else text
            return json.loads(data)

        for response in (call(1, "ask", '{"question": "citations \\ud800"}'),
                         call(2, "ask", '{"question": "x", "paths": ' + "[" * 5000 + "]" * 5000 + "}")):
            assert response.status_code == 400 and result_of(response)["error"]["code"] == -32700
        for request_id, path in ((3, "a" * 300 + ".md"), (4, "a/" * 600 + "x.md")):
            result = result_of(call(request_id, "read_page", json.dumps({"path": path})))["result"]
            assert result["isError"] and "longer than" in result["content"][0]["text"]
        alive = result_of(call(5, "list_pages", "{}"))["result"]
        assert alive["structuredContent"]["total"] == 4


@pytest.mark.parametrize("options", [[], ["--save"], ["--json", "--save"]], ids=["plain", "save", "json-save"])
def test_a_question_with_bytes_that_are_not_utf8_is_a_one_line_error(sample_kb, options):
    before = sorted(p.relative_to(sample_kb.wiki_dir) for p in sample_kb.wiki_dir.rglob("*"))
    out = subprocess.run([KAAS.encode(), b"--kb", str(sample_kb.root).encode(), b"ask", *[o.encode() for o in options],
                          b"deployment \xff\xfe proxy"], capture_output=True, timeout=60)
    stderr = out.stderr.decode("utf-8", "replace")
    assert out.returncode == 1 and "Traceback" not in stderr, stderr
    assert "kaas: error: the question is not valid text (it holds bytes that are not UTF-8)" in stderr
    assert sorted(p.relative_to(sample_kb.wiki_dir) for p in sample_kb.wiki_dir.rglob("*")) == before  # nothing saved


# -- article bodies Python-Markdown cannot render (in time) -----------------------------------------


@pytest.mark.parametrize("body, why", [
    ("*" * 5000 + "x" + "*" * 5000, "nests too deeply"),  # RecursionError inside Python-Markdown
    ("[a " * 10000, "brackets"),  # each "[" scans to the end: quadratic, minutes for 30 KB
    ("[x](" * 10000, "brackets"),
    ("[" * 5000 + "x" + "]" * 5000, "brackets"),
], ids=["emphasis-run", "open-brackets", "open-links", "nested-brackets"])
def test_an_article_too_complex_to_render_is_shown_as_text_at_once(sample_kb, body, why):
    from helpers import write_page

    write_page(sample_kb.wiki_dir, "ops/hard.md", "Hard to render", "Pathological Markdown.", "# Hard\n\n" + body)
    sample_kb.reindex()
    http = _isolated(f"""
        import json, time
        from starlette.testclient import TestClient
        from kb_ai.config import Settings
        from kb_ai.server import create_app
        with TestClient(create_app(Settings(kb={str(sample_kb.root)!r}), mcp=False), raise_server_exceptions=False) as client:
            started = time.monotonic()
            api = client.get("/api/pages/ops/hard.md")
            page = client.get("/wiki/ops/hard.md")
            print(json.dumps([api.status_code, api.json().get("html", api.text), page.status_code,
                              time.monotonic() - started]))
    """, timeout=90)
    api_status, html, page_status, seconds = json.loads(http.stdout.strip().splitlines()[-1])
    assert api_status == 200 and page_status == 200
    assert "Shown as plain text" in html and why in html and "<pre>" in html
    assert seconds < 30


@pytest.mark.parametrize("env, fragment", [
    ({"KAAS_TIMEOUT": "nan"}, "'timeout': 'nan'"),
    ({"KAAS_TIMEOUT": "inf"}, "'timeout': 'inf'"),
    ({"KAAS_TIMEOUT": "1e400"}, "'timeout': '1e400'"),
])
def test_a_setting_that_is_not_a_finite_number_is_a_config_error(sample_kb, env, fragment):
    from kb_ai.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        load_settings(sample_kb.root, env=env)
    assert fragment in info.value.message


@pytest.mark.parametrize("line", ["max_pages = true", "max_pages = 2.9", "read_budget = false"])
def test_a_toml_value_int_would_silently_change_is_a_config_error(sample_kb, line):
    (sample_kb.root / "kaas.toml").write_text(line + "\n")
    result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "ask", "deployment"])
    _one_line_error(result, "kaas.toml: invalid value", "expected a whole number")


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_master_index_that_is_not_a_file_never_blocks_and_the_wiki_still_answers(sample_kb, kind):
    index = sample_kb.master_index
    index.unlink()
    os.mkfifo(index) if kind == "fifo" else index.mkdir()
    out = _isolated(f"""
        import json
        from click.testing import CliRunner
        from starlette.testclient import TestClient
        from kb_ai.cli import cli
        from kb_ai.config import Settings
        from kb_ai.server import create_app
        root = {str(sample_kb.root)!r}
        with TestClient(create_app(Settings(kb=root), mcp=False), raise_server_exceptions=False) as client:
            got = client.get("/api/index")
        ask = CliRunner().invoke(cli, ["--kb", root, "ask", "--json", "reverse proxy"])
        lint = CliRunner().invoke(cli, ["--kb", root, "lint", "--json"])
        index = CliRunner().invoke(cli, ["--kb", root, "index"])
        print(json.dumps([got.status_code, got.json(), ask.exit_code, ask.stderr, lint.stdout, index.exit_code, index.stderr]))
    """)
    status, catalog, ask_code, ask_err, lint_out, index_code, index_err = json.loads(out.stdout.strip().splitlines()[-1])
    assert status == 200 and catalog["articles"] == 4
    assert "wiki/master-index.md is not a file; catalog built from the articles" in catalog["warnings"][0]
    assert ask_code == 0 and "is not a file" in ask_err
    assert "master-index.md is not a file" in [f["message"] for f in json.loads(lint_out)["findings"]]
    if kind == "fifo":  # re-indexing replaces it by the catalog
        assert index_code == 0 and index.is_file() and "ops/deployment.md" in index.read_text()
    else:  # a folder is never removed by kaas: a one-line error says what is in the way
        assert index_code != 0 and index_err.strip().endswith("master-index.md: Is a directory") and index.is_dir()


def test_a_fifo_in_place_of_the_log_or_the_server_announcement_never_blocks(sample_kb):
    os.unlink(sample_kb.wiki_dir / "log.md") if (sample_kb.wiki_dir / "log.md").exists() else None
    os.mkfifo(sample_kb.wiki_dir / "log.md")
    (sample_kb.root / ".kaas").mkdir(exist_ok=True)
    os.mkfifo(sample_kb.root / ".kaas" / "server.json")
    from helpers import write_page

    write_page(sample_kb.wiki_dir, "ops/new.md", "New page", "Added by hand.", "# New\n\nNew text.")
    try:
        index = subprocess.run([KAAS, "--kb", str(sample_kb.root), "index"], capture_output=True, text=True, timeout=60)
        ask = subprocess.run([KAAS, "--kb", str(sample_kb.root), "ask", "reverse proxy"], capture_output=True,
                             text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("waited on a FIFO")
    assert index.returncode == 1 and index.stderr.strip() == f"kaas: error: cannot access {sample_kb.wiki_dir / 'log.md'}: not a regular file"
    assert "New page" in sample_kb.master_index.read_text()  # the catalog itself was written
    assert ask.returncode == 0 and "Deployment" in ask.stdout  # answered here: no server to ask


# -- JSON nested past Python's stack, from a model or in kaas's own state files --------------------

DEEP_JSON = "[" * 100_000 + "]" * 100_000


def test_a_model_reply_nested_past_the_stack_is_bad_output_and_selection_falls_back(sample_kb, monkeypatch):
    from llm_fakes import API_BASE, MODEL, FakeOpenAI

    for name, value in {"KAAS_MODEL": MODEL, "KAAS_API_BASE": API_BASE, "KAAS_API_KEY": "k",
                        "KAAS_MAX_RETRIES": "0", "KAAS_CACHE": "false"}.items():
        monkeypatch.setenv(name, value)
    with FakeOpenAI() as fake:
        fake.reply('{"paths": ' + DEEP_JSON + "}", when="navigator of a wiki", repeat=True)
        fake.reply_stream(["Behind nginx [Deployment](ops/deployment.md)."], when="You answer questions")
        result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "ask", "--json", "reverse proxy"])
    assert result.exit_code == 0 and result.exception is None, repr(result.exception)
    data = json.loads(result.stdout)
    assert "ops/deployment.md" in [p["path"] for p in data["pages"]]  # keyword fallback found it
    assert any("nested too deeply" in n for n in data["notices"]), data["notices"]


STATE_FILES = {
    "topic summaries": (".kaas/topic-summaries.json", ["index"]),
    "manifest": (".kaas/manifest.json", ["compile", "--offline"]),
    "journal line": (".kaas/journal.jsonl", ["compile", "--offline"]),
    "dedup fingerprints": (".kaas/fingerprints.json", ["compile", "--offline"]),
    "server announcement": (".kaas/server.json", ["ask", "reverse proxy"]),
    "lexical index postings": (".kaas/lexical-index/kaas-extra.json", ["ask", "reverse proxy"]),
}


@pytest.mark.parametrize("name", sorted(STATE_FILES), ids=sorted(STATE_FILES))
def test_state_files_nested_past_the_stack_are_ignored_like_damaged_ones(sample_kb, name):
    relative, command = STATE_FILES[name]
    (sample_kb.root / "raw").mkdir()
    (sample_kb.root / "raw" / "alpha.md").write_text("# Alpha\n\nAlpha is the first project and ships in May.\n")
    first = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "compile", "--offline"])
    assert first.exit_code == 0, first.output
    CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "ask", "reverse proxy"])  # builds the lexical index
    (sample_kb.root / "raw" / "beta.md").write_text("# Beta\n\nBeta is the second project and ships in July.\n")
    target = sample_kb.root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(DEEP_JSON + "\n")
    result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), *command])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 0, result.output


def test_llm_cache_entries_nested_past_the_stack_are_misses(sample_kb, monkeypatch):
    from llm_fakes import API_BASE, MODEL, FakeOpenAI

    for name, value in {"KAAS_MODEL": MODEL, "KAAS_API_BASE": API_BASE, "KAAS_API_KEY": "k", "KAAS_MAX_RETRIES": "0"}.items():
        monkeypatch.setenv(name, value)

    def ask():
        with FakeOpenAI() as fake:
            fake.reply_json({"paths": ["ops/deployment.md"]}, when="navigator of a wiki", repeat=True)
            fake.reply_stream(["Behind nginx [Deployment](ops/deployment.md)."], when="You answer questions", repeat=True)
            result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "ask", "--json", "reverse proxy"])
        return result, fake.call_count

    first, calls = ask()
    assert first.exit_code == 0 and calls > 0, first.output
    entries = [p for p in (sample_kb.root / ".kaas").rglob("*.json") if "cache" in p.parts]
    assert entries  # the reply cache and the remembered response format
    for entry in entries:
        entry.write_text(DEEP_JSON)
    again, calls = ask()
    assert again.exception is None or isinstance(again.exception, SystemExit), repr(again.exception)
    assert again.exit_code == 0 and calls > 0 and json.loads(again.stdout)["citations"]


def test_saving_an_answer_to_an_overlong_question_is_refused_not_saved_unreadable(client, sample_kb):
    before = sorted(p.relative_to(sample_kb.wiki_dir) for p in sample_kb.wiki_dir.rglob("*.md"))
    response = client.post("/api/answers", json={"question": "why " * 25_000, "answer": "See [Citations](retrieval/citations.md).",
                                                 "citations": ["retrieval/citations.md"]})
    assert_bad_request(response, "longer than 4000 characters")
    assert sorted(p.relative_to(sample_kb.wiki_dir) for p in sample_kb.wiki_dir.rglob("*.md")) == before
