"""What the model sends back, and what every call asks for: a reply limit on every call, replies
cut off at that limit handled as bad output (JSON) or kept with a notice (the answer), lenient
JSON (a literal newline inside a string is JSON every lenient parser reads), and parse errors
that name the real problem. Against respx fakes of an OpenAI-compatible server."""

from __future__ import annotations

import json

import pytest

from kb_ai.compile.pipeline import run_compile
from kb_ai.errors import LLMOutputError
from kb_ai.llm.gateway import GatewayConfig, LLMGateway
from kb_ai.llm.usage import UsageMeter
from kb_ai.navigate.ask import ask, build_service
from kb_ai.navigate.records import AskRequest, Turn
from kb_ai.quality.lint import run_lint

from helpers import llm_settings, write_page, page_refs
from llm_fakes import ANSWER, API_BASE, MODEL, REWRITE, SELECT, SUGGEST, FakeOpenAI, all_text, chat_json

MESSAGES = [{"role": "user", "content": "hi"}]
SCHEMA = {"type": "object", "properties": {"paths": {"type": "array", "items": {"type": "string"}}},
          "required": ["paths"]}


def gateway() -> LLMGateway:
    return LLMGateway(GatewayConfig(model=MODEL, api_base=API_BASE, api_key="k", max_retries=0))


# -- a reply limit on every call ------------------------------------------------------------------


async def test_the_gateway_refuses_a_call_without_a_reply_limit():
    with FakeOpenAI() as fake:
        fake.reply_json({"paths": []}, repeat=True)
        with pytest.raises(TypeError, match="max_tokens"):
            await gateway().complete_json(MESSAGES, schema=SCHEMA, schema_name="s", purpose="select")
        with pytest.raises(ValueError, match="max_tokens"):
            await gateway().complete_json(MESSAGES, schema=SCHEMA, schema_name="s", purpose="select", max_tokens=0)
    assert fake.requests == []


def _limits(fake: FakeOpenAI) -> dict[str, int]:
    found = {}
    for request in fake.requests:
        text = all_text(request)
        kind = next((k for k, marker in (("select", SELECT), ("answer", ANSWER), ("rewrite", REWRITE),
                                          ("suggest", SUGGEST), ("topics", "You are the navigator of a large wiki"),
                                          ("plan", "decide where its knowledge belongs"),
                                          ("write", "You write and maintain one article"),
                                          ("topic-summary", "one-line summaries of a wiki's topic index"),
                                          ("lint", "You review two pages")) if marker in text), "?")
        assert isinstance(request.get("max_tokens"), int) and request["max_tokens"] > 0, (kind, request.get("max_tokens"))
        found[kind] = request["max_tokens"]
    return found


async def test_every_ask_call_carries_a_reply_limit_sized_to_its_purpose(sample_kb):
    with FakeOpenAI() as fake:
        fake.reply_json({"query": "how citations are validated"}, when=REWRITE)
        fake.reply_json({"paths": ["retrieval/citations.md"]}, when=SELECT)
        fake.reply_stream(["Checked [Citations](retrieval/citations.md)."], when=ANSWER)
        fake.reply_json({"questions": ["Which pages count?"]}, when=SUGGEST)
        result = await ask(build_service(llm_settings(sample_kb.root)), AskRequest(
            question="and how are they checked?", history=[Turn("user", "citations?"), Turn("assistant", "yes")],
            rewrite=True, suggest=True))
    assert result.error is None, result.error
    limits = _limits(fake)
    assert set(limits) == {"rewrite", "select", "answer", "suggest"}
    assert limits["answer"] > limits["select"] > limits["rewrite"] // 2  # sized to purpose, not one number


def test_every_compile_and_lint_call_carries_a_reply_limit(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.md").write_text("# Alpha\n\nAlpha is the first project of the team and ships in May.\n")

    def responder(body):
        text = all_text(body)
        if "decide where its knowledge belongs" in text:
            return chat_json(json.dumps({"updates": [], "creates": [
                {"topic": "projects", "slug": "alpha", "title": "Alpha", "summary": "What Alpha is."}]}))
        if "You write and maintain one article" in text:
            return chat_json(json.dumps({"summary": "What Alpha is.", "tags": [],
                                         "body": "# Alpha\n\nAlpha is the first project and ships in May."}))
        if "You review two pages" in text:
            return chat_json(json.dumps({"contradictions": []}))
        return chat_json(json.dumps({"summary": "Projects of the team."}))

    with FakeOpenAI() as fake:
        fake.add(responder, repeat=True)
        report = run_compile(llm_settings(tmp_path), progress=False)
        write_page(tmp_path / "wiki", "projects/alpha-2.md", "Alpha again", "Alpha, again.",
                   "# Alpha again\n\nAlpha ships in June.", topic="projects", sources=["raw/a.md"])
        run_lint(llm_settings(tmp_path), contradictions=True, max_pairs=1)
    assert report.ok
    assert {"plan", "write", "topic-summary", "lint"} <= set(_limits(fake))


# -- replies cut off at the limit ------------------------------------------------------------------


async def test_an_answer_cut_off_at_its_limit_is_kept_with_a_notice(sample_kb):
    with FakeOpenAI() as fake:
        fake.reply_json({"paths": ["retrieval/citations.md"]}, when=SELECT)
        fake.reply_stream(["Only pages read count ", "[Citations](retrieval/citations.md) and then"],
                          finish_reason="length", when=ANSWER)
        result = await ask(build_service(llm_settings(sample_kb.root)), AskRequest(question="How are citations validated?"))
    assert result.error is None, result.error
    assert result.answer == "Only pages read count [Citations](retrieval/citations.md) and then"
    assert page_refs(result.citations) == [{"path": "retrieval/citations.md", "title": "Citations"}]
    cut = [n for n in result.notices if n.startswith("The answer was cut off")]
    assert cut and "limit of 1500 tokens" in cut[0], result.notices


async def test_a_selection_cut_off_at_its_limit_is_repaired_once_then_falls_back(sample_kb):
    service = build_service(llm_settings(sample_kb.root))
    # Complete, valid JSON that ran into the limit with trailing whitespace is an answer.
    with FakeOpenAI() as fake:
        fake.add(chat_json('{"paths": ["retrieval/citations.md"]}' + " " * 40, finish_reason="length"), when=SELECT)
        fake.reply_stream(["See [Citations](retrieval/citations.md)."], when=ANSWER)
        result = await ask(service, AskRequest(question="How are citations validated?"))
    assert [p["path"] for p in result.pages] == ["retrieval/citations.md"] and len(fake.requests) == 2
    # JSON that stops mid-way is bad output: one repair round, then the keyword fallback, said.
    with FakeOpenAI() as fake:
        fake.add(chat_json('{"paths": ["retrieval/cita', finish_reason="length"),
                 chat_json('{"paths": [   ', finish_reason="length"), when=SELECT)
        fake.reply_stream(["See [Citations](retrieval/citations.md)."], when=ANSWER)
        result = await ask(service, AskRequest(question="How are citations validated?"))
    selection = [r for r in fake.requests if SELECT in all_text(r)]
    assert len(selection) == 2
    assert "cut off at the limit of" in selection[1]["messages"][-1]["content"]  # the repair says why
    notice = next(n for n in result.notices if n.startswith("Page selection by the model failed"))
    assert "cut off at the limit of 400 tokens" in notice and "fell back to keyword selection" in notice
    assert result.pages and result.error is None


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
