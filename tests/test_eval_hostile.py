"""`kaas eval` on hostile question files (red-team finding B14): a line nested deeper than the
parser's stack, a question that cannot be asked, a huge unknown key. Each gives one clear line,
no traceback, and an exit status that says something went wrong."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kb_ai.cli import cli


def _eval(sample_kb, tmp_path, text: str):
    file = tmp_path / "q.jsonl"
    file.write_text(text, encoding="utf-8")
    return CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "eval", "--offline", str(file)])


@pytest.mark.parametrize("line", [
    '{"question": "q", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",  # valid JSON, past the stack
    "[" * 200_000,  # not JSON, but the parser recurses before it finds out
    '{"question": "q", "x": ' + "[" * 40 + "]" * 40 + "}",  # parses, but deeper than a question is
])
def test_a_deeply_nested_line_is_one_error_naming_the_line(sample_kb, tmp_path, line):
    good = json.dumps({"question": "How are citations validated?"})
    result = _eval(sample_kb, tmp_path, good + "\n" + line + "\n")
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit), repr(result.exception)  # not a RecursionError
    assert "Traceback" not in result.output
    assert "q.jsonl line 2: not valid JSON (nested more than" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_question_that_fails_is_named_and_the_exit_status_says_so(sample_kb, tmp_path):
    rows = [{"id": "fine", "question": "How are citations validated?"},
            {"id": "huge", "question": "How much " + "word " * 1_000}]
    result = _eval(sample_kb, tmp_path, "\n".join(json.dumps(r) for r in rows) + "\n")
    assert "1 errors" in result.stdout
    assert "kaas: eval: question huge: the question is longer than 4000 characters" in result.stderr
    assert "question fine" not in result.stderr
    assert result.exit_code == 1


def test_a_huge_unknown_key_is_not_echoed_in_full(sample_kb, tmp_path):
    key = "k" * 100_000
    result = _eval(sample_kb, tmp_path, json.dumps({"question": "How are citations validated?", key: 1}) + "\n")
    assert result.exit_code == 0, result.output
    warning = [line for line in result.stderr.splitlines() if "unknown key" in line]
    assert len(warning) == 1 and len(warning[0]) < 400
    assert "(100,000 characters)" in warning[0]
