"""The MCP server through the official MCP client: in-process, over a real stdio subprocess,
offline and with a mocked LLM, and with bad arguments (tool errors, never a crash)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from kb_ai.config import load_settings
from kb_ai.server.mcp import build_mcp_server

from helpers import llm_settings, page_refs
from llm_fakes import FakeOpenAI

KAAS = str(Path(sys.executable).with_name("kaas"))


async def test_tools_are_listed_with_schemas(sample_kb):
    async with Client(build_mcp_server(load_settings(sample_kb.root, env={}))) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"ask", "ask_and_save", "read_page", "list_pages"}
    assert tools["ask"].input_schema["required"] == ["question"]
    assert set(tools["ask"].input_schema["properties"]) == {"question", "paths", "rewrite", "suggest", "model_only"}
    assert set(tools["ask_and_save"].input_schema["properties"]) == {"question", "paths", "rewrite", "suggest", "model_only"}
    assert {"answer", "citations", "pages", "suggestions"} <= set(tools["ask"].output_schema["properties"])
    assert tools["read_page"].annotations.read_only_hint is True


async def test_ask_offline_returns_structured_cited_answer_and_readable_text(sample_kb):
    async with Client(build_mcp_server(load_settings(sample_kb.root, env={}))) as client:
        result = await client.call_tool("ask", {"question": "How are citations validated?", "suggest": True})
    assert not result.is_error
    data = result.structured_content
    assert data["mode"] == "offline"
    assert {"path": "retrieval/citations.md", "title": "Citations"} in page_refs(data["citations"])
    assert all(c in data["pages"] for c in page_refs(data["citations"]))
    assert isinstance(data["suggestions"], list)
    text = result.content[0].text
    assert "Sources:\n- Citations (retrieval/citations.md" in text


async def test_ask_with_paths_reads_those_pages(sample_kb):
    async with Client(build_mcp_server(load_settings(sample_kb.root, env={}))) as client:
        result = await client.call_tool("ask", {"question": "reverse proxy", "paths": ["ops/deployment.md"]})
    assert [p["path"] for p in result.structured_content["pages"]] == ["ops/deployment.md"]


async def test_ask_with_a_mocked_llm(sample_kb):
    settings = llm_settings(sample_kb.root)
    with FakeOpenAI() as fake:
        fake.reply_json({"paths": ["ops/configuration.md"]}, when="navigator of a wiki")
        fake.reply_stream(["Set KAAS_MODEL ", "[Configuration](ops/configuration.md)."], when="You answer questions")
        async with Client(build_mcp_server(settings)) as client:
            result = await client.call_tool("ask", {"question": "How do I pick a model?"})
    assert not result.is_error, result.content
    assert result.structured_content["mode"] == "llm"
    assert result.structured_content["answer"] == "Set KAAS_MODEL [Configuration](ops/configuration.md)."
    assert page_refs(result.structured_content["citations"]) == [{"path": "ops/configuration.md", "title": "Configuration"}]


async def test_bad_arguments_are_tool_errors_the_model_can_act_on(sample_kb):
    async with Client(build_mcp_server(load_settings(sample_kb.root, env={}))) as client:
        empty = await client.call_tool("ask", {"question": "   "})
        unknown = await client.call_tool("read_page", {"path": "ops/nope.md"})
        hostile = await client.call_tool("read_page", {"path": "../../etc/passwd"})
        bad_paths = await client.call_tool("ask", {"question": "x", "paths": ["made/up.md"]})
        bad_topic = await client.call_tool("list_pages", {"topic": "cooking"})
        missing = await client.call_tool("ask", {})
        still_alive = await client.call_tool("list_pages", {})
    assert empty.is_error and "question is empty" in empty.content[0].text
    assert unknown.is_error and "list_pages" in unknown.content[0].text
    assert hostile.is_error and "etc/passwd" in hostile.content[0].text and "root:" not in hostile.content[0].text
    assert bad_paths.is_error and "made/up.md" in bad_paths.content[0].text
    assert bad_topic.is_error and "ops" in bad_topic.content[0].text and "retrieval" in bad_topic.content[0].text
    assert missing.is_error
    assert not still_alive.is_error and still_alive.structured_content["total"] == 4


async def test_read_page_and_list_pages(sample_kb):
    async with Client(build_mcp_server(load_settings(sample_kb.root, env={}))) as client:
        listing = await client.call_tool("list_pages", {"topic": "ops"})
        page = await client.call_tool("read_page", {"path": "ops/configuration.md"})
    assert [p["path"] for p in listing.structured_content["pages"]] == ["ops/configuration.md", "ops/deployment.md"]
    assert listing.structured_content["topics"] == ["ops", "retrieval"]
    assert page.structured_content["title"] == "Configuration"
    assert page.structured_content["frontmatter"]["topic"] == "ops"
    assert "KAAS_MODEL variable selects" in page.structured_content["markdown"]


@pytest.mark.slow
async def test_stdio_subprocess_speaks_only_protocol(sample_kb):
    params = StdioServerParameters(command=KAAS, args=["--kb", str(sample_kb.root), "mcp"], env={"PATH": "/usr/bin:/bin"})
    async with Client(params) as client:
        tools = await client.list_tools()
        result = await client.call_tool("ask", {"question": "Which variable selects the language model?"})
        page = await client.call_tool("read_page", {"path": "ops/configuration.md"})
    assert {t.name for t in tools.tools} == {"ask", "ask_and_save", "read_page", "list_pages"}
    assert not result.is_error
    assert result.structured_content["citations"][0]["path"] == "ops/configuration.md"
    assert page.structured_content["path"] == "ops/configuration.md"
    # Any stray print on stdout would have broken the JSON-RPC stream above: reaching here proves it.


@pytest.mark.slow
def test_mcp_command_with_a_wrong_kb_is_a_one_line_error(tmp_path):
    import subprocess

    out = subprocess.run([KAAS, "--kb", str(tmp_path / "nowhere"), "mcp"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and out.stdout == ""
    assert out.stderr.strip().startswith("kaas: error: no wiki")


async def test_streamable_http_at_mcp_inside_the_chat_server(sample_kb):
    import dataclasses

    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from kb_ai.server.app import create_app
    from server_fakes import ServerThread

    settings = dataclasses.replace(load_settings(sample_kb.root, env={}), api_token="s3cret-token")
    with ServerThread(create_app(settings, allowed_hosts=["127.0.0.1", "localhost"])) as server:
        url = server.url + "/mcp"
        async with httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret-token"}, timeout=30) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                tools = await client.list_tools()
                result = await client.call_tool("ask", {"question": "How are citations validated?"})
                page = await client.call_tool("read_page", {"path": "retrieval/citations.md"})
        assert {t.name for t in tools.tools} == {"ask", "ask_and_save", "read_page", "list_pages"}
        assert not result.is_error
        assert page_refs(result.structured_content["citations"])[0] == {"path": "retrieval/citations.md", "title": "Citations"}
        assert page.structured_content["title"] == "Citations"
        # The same bearer-token rule as the API: no token, no MCP.
        async with httpx2.AsyncClient(timeout=10) as http:
            refused = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                      headers={"Accept": "application/json, text/event-stream"})
        assert refused.status_code == 401


async def test_ask_reports_progress_while_answering(sample_kb):
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    async with Client(build_mcp_server(load_settings(sample_kb.root, env={}))) as client:
        result = await client.call_tool("ask", {"question": "How are citations validated?"}, progress_callback=on_progress)
    assert not result.is_error
    assert seen and seen[0][1].startswith("reading ")
    assert [p for p, _ in seen] == sorted(p for p, _ in seen)  # progress only goes up
