"""``kaas feedback``: the questions voted down in the chat (``.kaas/feedback.jsonl``), most recent
first, with the pages read and cited; the file bounded and damaged lines counted, not fatal."""

from __future__ import annotations

import datetime as dt
import json
import re

from click.testing import CliRunner

from kb_ai.cli import cli
from kb_ai.quality import feedback
from kb_ai.quality.feedback import feedback_record, record_feedback


def _vote(state, vote, question, minute, **extra):
    payload = {"vote": vote, "question": question, "pages": ["a/one.md", "b/two.md"], "citations": ["a/one.md"], **extra}
    record_feedback(state, feedback_record(payload, "rita", now=dt.datetime(2026, 11, 30, 12, minute, tzinfo=dt.timezone.utc)))


def test_kaas_feedback_lists_the_failed_questions(tmp_path):
    state = tmp_path / ".kaas"
    _vote(state, "down", "Who signs invoices?", 1, comment="it cited the wrong page")
    _vote(state, "up", "Where is the kettle?", 2)
    _vote(state, "down", "How much is Solo?", 3)
    _vote(state, "up", "who signs  invoices?", 4)
    with (state / "feedback.jsonl").open("a") as handle:
        handle.write("{not json\n")
    result = CliRunner().invoke(cli, ["--kb", str(tmp_path), "feedback"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "4 votes (2 up, 2 down)" in text and "1 lines could not be read" in text
    assert text.index("Who signs invoices?") < text.index("How much is Solo?")  # most recent vote first
    assert "Where is the kettle?" not in text
    assert "pages read: a/one.md, b/two.md" in text and "cited: a/one.md" in text
    assert "comment: it cited the wrong page" in text
    data = json.loads(CliRunner().invoke(cli, ["--kb", str(tmp_path), "feedback", "--json"]).stdout)
    assert [q["question"] for q in data["failed_questions"]] == ["Who signs invoices?", "How much is Solo?"]
    assert data["failed_questions"][0]["down"] == 1 and data["failed_questions"][0]["up"] == 1


def test_the_feedback_file_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(feedback, "MAX_FEEDBACK_BYTES", 2000)
    for minute in range(30):
        _vote(tmp_path, "down", f"question number {minute}", minute)
    current = (tmp_path / "feedback.jsonl").stat().st_size
    older = (tmp_path / "feedback.1.jsonl").stat().st_size
    assert current <= 2000 and older <= 2000
    assert all(json.loads(line) for line in (tmp_path / "feedback.jsonl").read_text().splitlines())


def test_no_feedback_yet(tmp_path):
    result = CliRunner().invoke(cli, ["--kb", str(tmp_path), "feedback"])
    assert result.exit_code == 0 and "0 votes" in result.stdout and "no question was voted down" in result.stdout


def test_the_failed_questions_can_be_run_again_with_kaas_eval(sample_kb):
    state = sample_kb.root / ".kaas"
    _vote(state, "down", "How are citations validated?", 1)
    out = sample_kb.root / "failed.jsonl"
    result = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "feedback", "--questions", str(out)])
    assert result.exit_code == 0 and "wrote 1 questions" in result.stderr
    assert [json.loads(line) for line in out.read_text().splitlines()] == [
        {"id": "feedback-1", "question": "How are citations validated?"}]
    evaluated = CliRunner().invoke(cli, ["--kb", str(sample_kb.root), "eval", str(out), "--offline"])
    assert evaluated.exit_code == 0, evaluated.output
    assert re.search(r"questions +1 +1 answerable", evaluated.stdout), evaluated.stdout
