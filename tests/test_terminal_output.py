"""Nothing from a source, a page, a model or a file name can act on the terminal of whoever runs
`kaas`: in text mode every command prints through one filter (``untrusted_text.terminal_safe``)
that drops escape sequences and C0/C1 control characters (tab and newline excepted); ``--json``
stays the exact JSON value."""

from __future__ import annotations

import io
import json
import re
import time

import pytest
from click.testing import CliRunner

from kb_ai.cli import cli

from helpers import write_page

ESC_SOURCE = ("# Office hours\n\nThe office opens at nine.\x1b]0;PWNED-TITLE\x07 The office closes at five."
              "\x1b[2J\x1b[31m Coffee is free on Fridays.\x1b]52;c;ZWNobyBwd25lZA==\x07 Tea\x9b2J is\r too.\n")
CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def assert_inert(text: str) -> None:
    found = CONTROLS.findall(text)
    assert not found, f"control characters reach the terminal: {found!r} in {text[:300]!r}"
    assert "PWNED" not in text and "ZWNob" not in text  # whole sequences go, not just their ESC


@pytest.fixture
def kb(tmp_path):
    root = tmp_path / "kb"
    assert run("init", str(root)).exit_code == 0
    notes = root / "raw" / "notes"
    notes.mkdir(parents=True)
    (notes / "hours.md").write_text(ESC_SOURCE, encoding="utf-8")
    (notes / "evil\x1b]0;NAMED\x07.md").write_text("# Named\n\nA file whose name holds a sequence.\n")
    return root


def test_compile_ask_and_lint_print_nothing_that_acts_on_a_terminal(kb):
    compiled = run("--kb", str(kb), "compile", "--offline")
    assert compiled.exit_code in (0, 1), compiled.output
    assert_inert(compiled.stdout + compiled.stderr)

    asked = run("--kb", str(kb), "ask", "--offline", "When does the office open?")
    assert asked.exit_code == 0, asked.output
    assert "The office opens at nine." in asked.stdout
    assert_inert(asked.stdout + asked.stderr)

    for command in (["lint"], ["index"], ["lint", "--fix"]):
        result = run("--kb", str(kb), *command)
        assert_inert(result.stdout + result.stderr)


def test_json_output_is_the_exact_value_and_inert(kb):
    run("--kb", str(kb), "compile", "--offline")
    asked = run("--kb", str(kb), "ask", "--offline", "--json", "When does the office open?")
    assert asked.exit_code == 0, asked.output
    assert not CONTROLS.findall(asked.stdout.replace("\n", "")), asked.stdout
    data = json.loads(asked.stdout)  # still JSON, and the answer is the answer the wiki gave
    assert "The office opens at nine." in data["answer"]
    linted = run("--kb", str(kb), "lint", "--json")
    json.loads(linted.stdout)
    assert not CONTROLS.findall(linted.stdout.replace("\n", ""))


def test_page_titles_and_warnings_are_filtered_too(tmp_path):
    root = tmp_path / "kb"
    run("init", str(root))
    write_page(root / "wiki", "a/one.md", "Same\x1b]0;T1\x07 title", None, "# One\n\nText\x9d0;x\x9c here.")
    write_page(root / "wiki", "a/two.md", "Same\x1b]0;T1\x07 title", "S.", "# Two\n\nText.")
    for command in (["index"], ["lint"], ["ask", "--offline", "text here", "--suggest"]):
        result = run("--kb", str(root), *command)
        assert not CONTROLS.findall(result.stdout + result.stderr), (command, result.output)


def test_eval_prints_questions_safely(tmp_path, kb):
    run("--kb", str(kb), "compile", "--offline")
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question": "When\x1b]0;Q\x07 does the office open?\x1b[2J",
                                     "gold_pages": ["notes/hours.md"]}) + "\n")
    result = run("--kb", str(kb), "eval", str(questions), "--offline")
    assert result.exit_code == 0, result.output
    assert_inert(result.stdout + result.stderr)


def test_the_compile_progress_bar_filters_file_names():
    from kb_ai.compile.progress import Progress

    stream = io.StringIO()
    progress = Progress(enabled=True, stream=stream)
    progress.start("ingest", 1)
    progress.advance("raw/evil\x1b]0;NAMED\x07.md")
    assert "\x1b" not in stream.getvalue() and "NAMED" not in stream.getvalue()


def test_terminal_safe_drops_sequences_in_linear_time():
    from kb_ai.untrusted_text import terminal_safe

    assert terminal_safe("tab\tand\nnewline stay") == "tab\tand\nnewline stay"
    assert terminal_safe("a\x1b]0;title\x07b\x1b[1;31mc\x1b[0m\x9b2Jd\x9d8;;http://x\x9ce\r\x00\x7f") == "abcde"
    assert terminal_safe("cut \x1b]0;never ends\nnext line") == "cut \nnext line"
    started = time.monotonic()
    for hostile in ("\x9d" * 300_000, "\x1b]" * 200_000, "\x1b[" + "0" * 300_000, "\x1b" * 300_000):
        assert not CONTROLS.findall(terminal_safe(hostile))
    assert time.monotonic() - started < 2
