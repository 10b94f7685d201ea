"""What the model sends back: lenient JSON (a literal newline inside a string is JSON every
lenient parser reads), and parse errors that name the real problem. Against respx fakes of an
OpenAI-compatible server."""

from __future__ import annotations

import json

import pytest

from kb_ai.compile.pipeline import run_compile
from kb_ai.config import Settings
from kb_ai.errors import LLMOutputError
from kb_ai.llm.gateway import GatewayConfig, LLMGateway
from kb_ai.llm.usage import UsageMeter

from llm_fakes import API_BASE, MODEL, FakeOpenAI, all_text, chat_json

MESSAGES = [{"role": "user", "content": "hi"}]
SCHEMA = {"type": "object", "properties": {"paths": {"type": "array", "items": {"type": "string"}}},
          "required": ["paths"]}


def llm_settings(root, **overrides) -> Settings:
    values = dict(kb=root, model=MODEL, api_base=API_BASE, api_key="k", max_retries=0, timeout=5.0, cache=False)
    values.update(overrides)
    return Settings(**values)


def gateway() -> LLMGateway:
    return LLMGateway(GatewayConfig(model=MODEL, api_base=API_BASE, api_key="k", max_retries=0))


# -- lenient JSON, honest parse errors -------------------------------------------------------------


async def test_a_literal_newline_inside_a_json_string_is_accepted():
    # llama.cpp's JSON grammar allows raw control characters in strings ([^"\\]), and models write
    # Markdown bodies with real line breaks: what a lenient parser reads is a valid reply.
    reply = '{"summary": "Alpha.", "tags": [], "body": "# Alpha\n\nAlpha ships in May.\n\tIndented."}'
    with FakeOpenAI() as fake:
        fake.reply(reply, when=None)
        value = await gateway().complete_json(
            MESSAGES, schema={"type": "object", "required": ["body"]}, schema_name="w", purpose="compile.write",
            max_tokens=100)
    assert value["body"] == "# Alpha\n\nAlpha ships in May.\n\tIndented." and len(fake.requests) == 1


def test_a_source_whose_reply_has_literal_newlines_compiles_with_one_write_call(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.md").write_text("# Alpha\n\n## Plan\n\nAlpha is the first project.\n\n## Dates\n\nIt ships in May.\n")
    body = "# Alpha\n\n## Plan\n\nAlpha is the first project of the team.\n\n## Dates\n\nIt ships in May."

    def responder(request):
        text = all_text(request)
        if "decide where its knowledge belongs" in text:
            return chat_json(json.dumps({"updates": [], "creates": [
                {"topic": "projects", "slug": "alpha", "title": "Alpha", "summary": "What Alpha is."}]}))
        if "You write and maintain one article" in text:  # raw newlines, as llama.cpp sends them
            return chat_json('{"summary": "What Alpha is and when it ships.", "tags": ["alpha"], "body": "'
                             + body.replace('"', '\\"') + '"}')
        return chat_json(json.dumps({"summary": "Projects of the team."}))

    with FakeOpenAI() as fake:
        fake.add(responder, repeat=True)
        report = run_compile(llm_settings(tmp_path), progress=False)
    writes = [r for r in fake.requests if "You write and maintain one article" in all_text(r)]
    assert report.ok and report.created == ["projects/alpha.md"], report.failed
    assert len(writes) == 1  # no repair round
    assert "## Dates\n\nIt ships in May." in (tmp_path / "wiki" / "projects" / "alpha.md").read_text()


async def test_an_invalid_reply_reports_the_real_parse_error():
    with FakeOpenAI() as fake:
        fake.reply('Here is the selection: {"paths": ["a.md" "b.md"]}', when=None, repeat=True)
        meter = UsageMeter()
        with pytest.raises(LLMOutputError) as caught:
            await gateway().complete_json(MESSAGES, schema=SCHEMA, schema_name="s", purpose="select", meter=meter,
                                          max_tokens=100)
    # Not "Expecting value: line 1 column 1" (the prose before the JSON): where the JSON broke.
    assert "Expecting ',' delimiter at line 1 column 42" in caught.value.message, caught.value.message
    assert "line 1 column 1" not in caught.value.message
    assert "Expecting ',' delimiter" in fake.requests[1]["messages"][-1]["content"]  # the repair is told the truth
